#!/usr/bin/env bash
# What torch 2.6 DCP writes, and how soon ferry makes it durable (see
# README.md here; `make dcp-measure`, as root, after `make trixie`):
#   - a 4-rank DTensor + AdamW job with a step of about 200 MiB
#     (--dim 2048 --hidden 2048 --layers 4: 16.8 M parameters, weights and
#     two AdamW moments in fp32) saves SAVES times with dcp.save, then
#     SAVES times with dcp.async_save, `ferry agent` at its defaults beside it;
#   - trace.py records every file event under the checkpoint folder
#     (inotify), summarised per step by trace-summary.py;
#   - time to durable: from dcp.save returning on every rank (async: its
#     future resolved on every rank; the trainer's saves.jsonl) to the
#     agent's "committed step" log line;
#   - the modes sync-commit and async-commit run the same saves with the
#     trainer's own word after each (`ferry commit`: waiting for the step to
#     be durable after dcp.save, --no-wait from async_save's future).
# Results in $OUT (default bench-results/dcp): trace-*.jsonl, saves-*.jsonl,
# agent-*.log and summary.txt. MODES (sync async sync-commit async-commit),
# AGENT_FLAGS (e.g. --priority normal) and SAVES (8) vary the run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=root.sh
. "$here/root.sh"
root_private "$@"
: "${FERRY:?run through make dcp-measure}" "${VERSITYGW:?run through make dcp-measure}" "${ROOT:?run through make dcp-measure}"
SAVES=${SAVES:-8}
PAUSE=${PAUSE:-4} # seconds of steps between saves (the trainer's compute, here a sleep)
OUT=${OUT:-bench-results/dcp}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
model=(--dim 2048 --hidden 2048 --layers 4)

die() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d -t ferry-dcpm.XXXXXX)
server_pid="" agent_pid="" trace_pid=""
cleanup() {
	for p in $trace_pid $agent_pid $server_pid; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	root_down
	rm -rf "$work"
}
trap cleanup EXIT
root_up "$work" "$here" "$(dirname "$(readlink -f "$FERRY")")" # the commit modes call ferry

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/s3/dcpm"
export AWS_ACCESS_KEY_ID=ferrym AWS_SECRET_ACCESS_KEY=ferrymsecret AWS_REGION=us-east-1
"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:$port" posix "$work/s3" >"$work/s3.log" 2>&1 &
server_pid=$!
export S3_ENDPOINT_URL="http://127.0.0.1:$port"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

: >"$OUT/summary.txt"
for mode in ${MODES:-sync async sync-commit async-commit}; do
	ckpt=$work/$mode
	mkdir -p "$ckpt" "$work/log-$mode"
	python3 "$here/trace.py" "$ckpt" "$OUT/trace-$mode.jsonl" &
	trace_pid=$!
	"$FERRY" agent --watch "$ckpt" --to "s3://dcpm/$mode" --state-dir "$work/state" --metrics-addr off \
		--log-format json ${AGENT_FLAGS:-} >"$OUT/agent-$mode.log" 2>&1 &
	agent_pid=$!
	flag=()
	case $mode in async*) flag+=(--async) ;; esac
	case $mode in *-commit) flag+=(--commit "$(readlink -f "$FERRY") commit --state-dir $work/state --watch $ckpt --timeout 2m") ;; esac
	echo "== $mode: $SAVES saves of the 4-rank ~200 MiB step, ${PAUSE}s apart"
	in_root python3 "$here/train.py" --nprocs 4 "${model[@]}" --steps $((2 * SAVES)) --save-every 2 \
		--pause "$PAUSE" --no-ref "${flag[@]}" --save-dir "$ckpt" --log-dir "$work/log-$mode" >"$work/train-$mode.log" 2>&1 ||
		{ tail "$work/train-$mode.log"; die "the $mode run failed"; }
	"$FERRY" flush --timeout 5m --state-dir "$work/state" --watch "$ckpt" >/dev/null || die "flush ($mode)"
	cp "$work/log-$mode/saves.jsonl" "$OUT/saves-$mode.jsonl"
	for p in $trace_pid $agent_pid; do kill -TERM "$p"; wait "$p" || true; done
	trace_pid="" agent_pid=""
	du -sb "$ckpt"/step-2 | awk '{printf "step size: %.1f MiB\n", $1/1048576}' | tee -a "$OUT/summary.txt"
	python3 "$here/trace-summary.py" "$mode" "$OUT/trace-$mode.jsonl" "$OUT/saves-$mode.jsonl" "$OUT/agent-$mode.log" | tee -a "$OUT/summary.txt"
done
