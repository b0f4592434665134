#!/usr/bin/env bash
# ferry against real torch 2.6 DCP checkpoints (see README.md here). torch
# runs inside the Debian 13 root `make trixie` builds (chroot), ferry runs
# outside on the same folders:
#   1. a 4-rank DTensor + AdamW job runs uninterrupted (the reference: the
#      SHA-256 of every gathered tensor at every saved step, every loss);
#   2. the same job with `ferry agent` at its defaults beside it, SIGKILLed
#      again and again at chosen moments of a save (sync and async_save)
#      and at random ones, restarted each time from its newest complete
#      step on disk; after each kill `ferry flush`, and every step complete
#      on disk must be committed;
#   3. every committed step restored onto an empty folder and loaded by
#      torch (1 rank), the latest also at 2 and 8 ranks (DCP reshards):
#      each must equal the reference exactly;
#   4. the latest committed step restored onto an empty folder, resumed at
#      4 ranks to the end: the final state and every loss bit-identical to
#      the uninterrupted run;
#   5. HF-style (safetensors) and plain torch.save trainers, restored and
#      loaded by torch (hf.py);
#   6. the trainer's own word: `ferry commit` after dcp.save, from
#      async_save's future and after torch.save (commit.sh).
# Run through `make e2e-dcp` (as root), which builds the root, ferry and
# versitygw first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=root.sh
. "$here/root.sh"
root_private "$@"

: "${FERRY:?run through make e2e-dcp}" "${VERSITYGW:?run through make e2e-dcp}" "${ROOT:?run through make e2e-dcp}"
STEPS=${STEPS:-60}         # train until this step (the kills must not reach it)
EVERY=${EVERY:-2}          # save every EVERY steps into step-N/
RANDOM_KILLS=${RANDOM_KILLS:-10}
SEED=${SEED:-$RANDOM}
RANDOM=$SEED
train=(python3 "$here/train.py" --nprocs 4 --steps "$STEPS" --save-every "$EVERY")

die() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d -t ferry-dcp.XXXXXX)
server_pid="" job_pid="" agent_pid=""
kills=0
started=$SECONDS
cleanup() {
	local rc=$?
	if [ -n "$job_pid" ]; then kill -KILL -- "-$job_pid" 2>/dev/null || true; fi
	for p in $agent_pid $server_pid; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	root_down
	if [ "$rc" -ne 0 ]; then
		echo "e2e-dcp FAILED (exit $rc) after $((SECONDS - started))s (SEED=$SEED); logs kept in $work" >&2
		for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f (last 15 lines)"; tail -n 15 "$f"; } >&2; done
		rm -rf "$work"/s3 "$work"/[abcr] # keep logs, drop the bulk
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
quiet() { sed -e '/[Ww]arn/d' -e '/storage().size()/d'; } # torch 2.6's UserWarnings
say() { printf '\n== [%3ds] %s\n' "$((SECONDS - started))" "$*"; }

# ferry's folder too: the trainers of commit.sh call the static binary.
root_up "$work" "$here" "$(dirname "$(readlink -f "$FERRY")")"
in_root python3 -c 'import torch; assert torch.__version__.startswith("2."), torch.__version__' ||
	die "no torch 2.x in $ROOT"

say "Local S3 server (versitygw) on loopback"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/s3/e2e"
export AWS_ACCESS_KEY_ID=ferrye2e AWS_SECRET_ACCESS_KEY=ferrye2esecret AWS_REGION=us-east-1
"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:$port" posix "$work/s3" >"$work/s3.log" 2>&1 &
server_pid=$!
export S3_ENDPOINT_URL="http://127.0.0.1:$port"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || die "versitygw did not listen on 127.0.0.1:$port (see s3.log)"
remote=s3://e2e/dcp
export FERRY_LOG_LEVEL=warn

dcp_cases() {
# ---------------------------------------------------------------------------
say "1. Uninterrupted 4-rank run to step $STEPS (the reference)"
in_root "${train[@]}" --save-dir "$work/a" --log-dir "$work/la" >"$work/run-a.log" 2>&1 || die "the reference run failed (see run-a.log)"

# ---------------------------------------------------------------------------
say "2. The same job with ferry agent (defaults) beside it, SIGKILLed mid-save"
ckpt=$work/b
mkdir -p "$ckpt" "$work/lb"
"$FERRY" agent --watch "$ckpt" --to "$remote" --state-dir "$work/state" --metrics-addr off >"$work/agent.log" 2>&1 &
agent_pid=$!

complete_on_disk() { # steps with a .metadata
	local d
	for d in "$ckpt"/step-*/.metadata; do
		if [ -f "$d" ]; then basename "$(dirname "$d")" | sed 's/^step-//'; fi
	done | sort -n
}
committed() { "$FERRY" list --from "$remote" --json | python3 -c 'import json,sys; print(" ".join(str(r["step"]) for r in json.load(sys.stdin)))'; }

# run_job ARGS: the job resumes from its newest complete step on disk; it
# must end by SIGKILL (exit 137) unless it finished.
run_job() {
	local what=$1 rc=0
	shift
	in_root_exec "${train[@]}" --resume "$ckpt" --save-dir "$ckpt" --log-dir "$work/lb" "$@" >>"$work/run-b.log" 2>&1 &
	job_pid=$! # the launcher, which leads the job's process group
	if [ -n "${KILL_AFTER:-}" ]; then # a random moment: once a save has begun, a random delay
		local before n
		before=$(ls "$ckpt" | wc -l)
		for _ in $(seq 600); do
			n=$(ls "$ckpt" | wc -l)
			[ "$n" -gt "$before" ] && break
			kill -0 "$job_pid" 2>/dev/null || break
			sleep 0.05
		done
		sleep "$KILL_AFTER"
		kill -KILL -- "-$job_pid" 2>/dev/null || true
	fi
	wait "$job_pid" 2>/dev/null || rc=$? # no "Killed" line from the shell
	job_pid=""
	if grep -q "^done at step $STEPS" <(tail -n 3 "$work/run-b.log"); then
		echo "  $what: the job finished"
		return
	fi
	[ "$rc" = 137 ] || die "$what: the job exited $rc, want 137 (SIGKILL) (see run-b.log)"
	kills=$((kills + 1))
	local disk com s
	disk=$(complete_on_disk | tr '\n' ' ')
	if ! "$FERRY" flush --timeout 2m --state-dir "$work/state" >"$work/flush.log" 2>&1; then
		# Killed before its first complete step, the agent has nothing to flush.
		[ -z "$disk" ] && grep -q 'nothing to flush' "$work/flush.log" ||
			die "$what: ferry flush failed: $(tail -n 3 "$work/flush.log")"
	fi
	com=$(committed)
	for s in $disk; do
		[[ " $com " == *" $s "* ]] || die "$what: step $s is complete on disk (.metadata) but not committed; committed: $com"
	done
	for s in $com; do
		[[ " $disk " == *" $s "* ]] || die "$what: step $s is committed but has no .metadata on disk"
	done
	local torn
	torn=$(ls -d "$ckpt"/step-* | while read -r d; do [ -f "$d/.metadata" ] || printf '%s(%s) ' "${d##*/}" "$(ls -A "$d" | tr '\n' ' ' | sed 's/ $//')"; done)
	printf '  kill %2d %-28s committed up to %s%s\n' "$kills" "$what:" "${com##* }" "${torn:+; torn, not committed: $torn}"
}

for mode in sync async; do
	flag=()
	[ "$mode" = async ] && flag=(--async)
	for point in open between shards metadata-tmp metadata after; do
		run_job "$mode $point" "${flag[@]}" --die "1:$point"
	done
done
for i in $(seq "$RANDOM_KILLS"); do
	flag=()
	((i % 2)) && flag=(--async)
	delay=$(printf '0.%02d' $((RANDOM % 30)))
	KILL_AFTER=$delay run_job "random ${flag[*]:-sync} +${delay}s" "${flag[@]}"
done
[ "$kills" -ge 20 ] || die "only $kills kills landed, want at least 20"
"$FERRY" flush --timeout 2m --state-dir "$work/state" >/dev/null || die "final flush failed"
[ "$(complete_on_disk | tail -n 1)" -lt "$STEPS" ] || die "the killed job reached step $STEPS: nothing left to resume; raise STEPS"

say "3. Every committed step restored onto an empty folder and loaded by torch"
com=$(committed)
pairs=()
for s in $com; do
	"$FERRY" restore --quiet --from "$remote" --step "$s" --to "$work/r/$s" >/dev/null || die "restore of step $s failed"
	pairs+=("$work/r/$s/step-$s" "$work/la/ref/step-$s.json")
done
echo "  $(echo "$com" | wc -w) committed steps ($com)"
in_root python3 "$here/load.py" --nprocs 1 "${pairs[@]}" 2>&1 | quiet ||
	die "a committed step does not load or differs from the reference"
latest=${com##* }
for w in 2 8; do
	in_root python3 "$here/load.py" --nprocs "$w" "$work/r/$latest/step-$latest" "$work/la/ref/step-$latest.json" 2>&1 | quiet ||
		die "step $latest loaded at $w ranks differs from the reference"
done
# Every step the job saw complete (dcp.save returned on every rank) is committed.
python3 - "$work/lb/saves.jsonl" "$com" <<'EOF' || die "a step the trainer completed is not committed"
import json, sys
done = {json.loads(l)["step"] for l in open(sys.argv[1])}
com = {int(s) for s in sys.argv[2].split()}
missing = sorted(done - com)
if missing:
    sys.exit(f"steps {missing} returned from dcp.save on every rank but are not committed")
print(f"  all {len(done)} steps whose save returned on every rank are committed")
EOF

# ---------------------------------------------------------------------------
say "4. New node: restore the latest step onto an empty folder, resume at 4 ranks"
kill -TERM "$agent_pid"; wait "$agent_pid" || die "the agent exited $? on SIGTERM"
agent_pid=""
"$FERRY" restore --quiet --from "$remote" --to "$work/c" >/dev/null || die "restore of the latest step failed"
in_root "${train[@]}" --resume "$work/c" --save-dir "$work/c" --log-dir "$work/lc" >"$work/run-c.log" 2>&1 || die "the resumed run failed (see run-c.log)"
grep -h 'resumed from' "$work/run-c.log" | sed 's/^/  /'
cmp -s "$work/la/final.json" "$work/lc/final.json" || die "the resumed run's final state differs from the uninterrupted run's"
python3 - "$work/la/loss.jsonl" "$work/lc/loss.jsonl" <<'EOF' || die "losses differ"
import json, sys
ref = {r["step"]: r["loss_hex"] for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
bad = [r["step"] for r in got if ref.get(r["step"]) != r["loss_hex"]]
if bad or not got:
    sys.exit(f"losses differ at steps {bad}")
print(f"  final model and optimizer state identical (every tensor's SHA-256), {len(got)} losses identical to the bit (steps {got[0]['step']}..{got[-1]['step']})")
EOF

}

# ONLY=hf or ONLY=commit runs one part (a quicker try).
[ -n "${ONLY:-}" ] || dcp_cases
# ---------------------------------------------------------------------------
if [ "${ONLY:-hf}" = hf ]; then
	say "5. HF-style (safetensors) and plain torch.save trainers"
	# shellcheck source=hf.sh
	. "$here/hf.sh"
fi
# ---------------------------------------------------------------------------
if [ "${ONLY:-commit}" = commit ]; then
	say "6. The trainer's own word: ferry commit (each agent's settle window: 1 h)"
	# shellcheck source=commit.sh
	. "$here/commit.sh"
fi

say "e2e-dcp passed in $((SECONDS - started))s: $kills kills, every committed step loads and equals its reference"
