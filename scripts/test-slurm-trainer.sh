#!/usr/bin/env bash
# The trainer of `make test-slurm` (scripts/test-slurm.sh), run by
# deploy/slurm/ferry-train.sbatch on each node. Like a real trainer it
# resumes from what it finds in CKPT_DIR: the step that latest-rank0.pt
# names (ferry restore put it there), else from scratch. Then it writes a
# checkpoint every EVERY steps up to LAST with ferry-trainsim (Composer's
# names, RANKS ranks), INTERVAL seconds of "training" apart.
#
# It records in RECORD/restored.<restart> the step it resumed from and the
# SHA-256 of each rank's file it found there, and in RECORD/written.<restart>
# each step it wrote completely: "step rank sha256".
set -euo pipefail

: "${CKPT_DIR:?}" "${TRAINSIM:?}" "${RECORD:?}"
ranks=${RANKS:-2} every=${EVERY:-100} last=${LAST:-1000}
run=${SLURM_RESTART_COUNT:-0}
mkdir -p "$CKPT_DIR" "$RECORD"

start=0
if link=$(readlink "$CKPT_DIR/latest-rank0.pt"); then
	start=$(sed -n 's/^ep[0-9]*-ba\([0-9]*\)-rank0\.pt$/\1/p' <<<"$link")
	[ -n "$start" ] || { echo "trainer: latest-rank0.pt -> $link: not a checkpoint name" >&2; exit 1; }
	for ((r = 0; r < ranks; r++)); do
		file=$CKPT_DIR/$(readlink "$CKPT_DIR/latest-rank$r.pt")
		echo "$start $r $(sha256sum <"$file" | cut -d' ' -f1)" >>"$RECORD/restored.$run"
	done
fi
echo "trainer: run $run resumes after step $start"

for ((step = start + every; step <= last; step += every)); do
	sleep "${INTERVAL:-1}"
	"$TRAINSIM" --dir "$CKPT_DIR" --ranks "$ranks" --steps "$step" --size "${SIZE:-8MiB}" --chunk 256KiB --pause 40ms >/dev/null
	for ((r = 0; r < ranks; r++)); do
		echo "$step $r $(sha256sum <"$CKPT_DIR/ep0-ba$step-rank$r.pt" | cut -d' ' -f1)" >>"$RECORD/written.$run"
	done
	echo "trainer: wrote step $step"
done
echo "trainer: reached step $last"
