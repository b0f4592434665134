#!/usr/bin/env bash
# ferry end to end with a real PyTorch job (see README.md in this folder):
#   1. run the job uninterrupted and record its losses and final weights;
#   2. run it again with `ferry agent` watching, SIGKILL the whole job while
#      a checkpoint is being written, let the agent commit what is complete
#      (`ferry flush`), stop the agent;
#   3. on a fresh, empty directory (a new node), `ferry restore` the latest
#      step and relaunch the job with --resume;
#   4. assert the resumed losses and final weights are bit-identical to run 1,
#      and that the step being written at the kill was not committed
#      half-written.
# Run through `make e2e`, which builds bin/ferry and versitygw first.
set -euo pipefail

: "${FERRY:?run through make e2e}" "${VERSITYGW:?run through make e2e}"
PYTHON=${PYTHON:-/usr/bin/python3} # Debian's, where python3-torch lives
STEPS=${STEPS:-200}                # train until this step
EVERY=${EVERY:-25}                 # checkpoint every EVERY steps
SLOW_SAVE=${SLOW_SAVE:-6}          # MiB/s while run 2 saves: widens the kill window
RANKS=2
here=$(cd "$(dirname "$0")" && pwd)
train=("$PYTHON" "$here/train.py" --steps "$STEPS" --save-every "$EVERY" --nprocs "$RANKS")
check=("$PYTHON" "$here/check.py")

die() { echo "FAIL: $*" >&2; exit 1; }
"$PYTHON" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null ||
	die "$PYTHON has no torch: apt-get install -y python3-torch"

work=$(mktemp -d -t ferry-e2e.XXXXXX)
server_pid="" job_pgid="" agent_pid=""
started=$SECONDS

stop_agent() { # SIGTERM the agent; it must exit 0 within 30 s
	local rc=0
	kill -TERM "$agent_pid"
	for _ in $(seq 300); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$agent_pid" 2>/dev/null && die "the agent did not stop within 30 s of SIGTERM"
	wait "$agent_pid" || rc=$?
	agent_pid=""
	[ "$rc" -eq 0 ] || die "the agent exited $rc on SIGTERM (see its log)"
}
stop_pid() { # pid signal: signal a process we started, wait for it (bounded)
	local pid=$1 sig=$2
	kill "-$sig" "$pid" 2>/dev/null || return 0
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$?
	if [ -n "$job_pgid" ]; then kill -KILL -- "-$job_pgid" 2>/dev/null || true; fi
	if [ -n "$agent_pid" ]; then stop_pid "$agent_pid" TERM; fi
	if [ -n "$server_pid" ]; then stop_pid "$server_pid" TERM; fi
	if [ "$rc" -ne 0 ]; then
		echo "e2e FAILED (exit $rc) after $((SECONDS - started))s; logs kept in $work:" >&2
		for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f (last 15 lines)"; tail -n 15 "$f"; } >&2; done
		rm -rf "$work"/[abcv]/ckpt "$work"/verify "$work"/s3 # keep logs, drop the bulk
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

if [ -t 1 ]; then
	say() { printf '\n\033[1m== [%3ds] %s\033[0m\n' "$((SECONDS - started))" "$*"; }
else
	say() { printf '\n== [%3ds] %s\n' "$((SECONDS - started))" "$*"; }
fi

say "Local S3 server (versitygw) on loopback"
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/s3/e2e" # a directory at the top level is a bucket
export AWS_ACCESS_KEY_ID=ferrye2e AWS_SECRET_ACCESS_KEY=ferrye2esecret AWS_REGION=us-east-1
"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:$port" posix "$work/s3" >"$work/s3.log" 2>&1 &
server_pid=$!
export S3_ENDPOINT_URL="http://127.0.0.1:$port"
up=0
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
	sleep 0.1
done
[ "$up" = 1 ] || die "versitygw did not listen on 127.0.0.1:$port within 10 s (see s3.log)"
remote=s3://e2e/run
export FERRY_LOG_LEVEL=warn

# ---------------------------------------------------------------------------
say "1. Uninterrupted run to step $STEPS (the reference)"
timeout 120 "${train[@]}" --save-dir "$work/a/ckpt" --log-dir "$work/a/log" >"$work/run1.log" 2>&1 ||
	die "run 1 failed (see run1.log)"
grep -h 'weights sha256' "$work/run1.log" | sed 's/^/  /'

# ---------------------------------------------------------------------------
say "2. Same job with ferry watching; SIGKILL while a checkpoint is being written"
ckpt_b=$work/b/ckpt
mkdir -p "$ckpt_b"
"$FERRY" agent --help >/dev/null 2>&1 || die "$FERRY has no agent command"
# Composer single-file checkpoints carry no marker: tell the agent how many
# ranks save here so that a rank whose file is not there yet holds the step.
# AGENT_FLAGS adds flags, to see the checks bite: with --no-marker the
# agent trusts the settle window alone and commits the half-written step.
# shellcheck disable=SC2206 # word splitting wanted
agent=("$FERRY" agent --to "$remote" --layout composer --expected-ranks "$RANKS" --settle 1s
	--metrics-addr off --drain-timeout 30s ${AGENT_FLAGS:-})
"${agent[@]}" --watch "$ckpt_b" --state-dir "$work/state-b" >"$work/agent-b.log" 2>&1 &
agent_pid=$!

# setsid: the job (launcher and both ranks) gets its own process group,
# which is what we kill.
setsid "${train[@]}" --save-dir "$ckpt_b" --log-dir "$work/b/log" --slow-save "$SLOW_SAVE" >"$work/run2.log" 2>&1 &
job_pgid=$!
# Kill once at least two checkpoints are complete on every rank (their
# latest links name them) and the next step's files exist on every rank
# but are not all done yet: the job is mid-save. Bounded: 60 s.
killed_at="" done_at=""
for _ in $(seq 600); do
	kill -0 "$job_pgid" 2>/dev/null || die "run 2 ended before it could be killed (see run2.log)"
	read -r done writing < <("${check[@]}" progress "$ckpt_b" "$RANKS")
	if [ "$done" -ge $((2 * EVERY)) ] && [ "$writing" -gt 0 ]; then
		sleep 0.3 # let the files grow a little
		read -r done writing < <("${check[@]}" progress "$ckpt_b" "$RANKS")
		if [ "$writing" -gt 0 ]; then
			kill -KILL -- "-$job_pgid"
			wait "$job_pgid" 2>/dev/null || true
			job_pgid=""
			# Read again: a rank may have finished between the look and the kill.
			read -r done_at killed_at < <("${check[@]}" progress "$ckpt_b" "$RANKS")
			break
		fi
	fi
	sleep 0.1
done
[ -n "$killed_at" ] || die "no save in progress seen within 60 s"
[ "$killed_at" -gt 0 ] || die "the save finished on every rank before the kill landed; try a lower SLOW_SAVE"
echo "  killed the job while step $killed_at was being written; steps up to $done_at are complete on disk"
ls -l "$ckpt_b" | sed 's/^/  /'
echo "  the files of step $killed_at as the kill left them:"
"${check[@]}" half-written "$ckpt_b" "$killed_at" "$RANKS" || die "every rank's file of step $killed_at loads: the kill did not land mid-write"

say "ferry flush: wait until the agent has committed every complete step; then stop it"
"$FERRY" flush --timeout 2m --state-dir "$work/state-b" | sed 's/^/  /' || die "ferry flush failed (see agent-b.log)"
stop_agent

say "What is committed"
"$FERRY" list --from "$remote" | sed 's/^/  /'
committed=$("$FERRY" list --from "$remote" --json | "$PYTHON" -c 'import json,sys; print(" ".join(str(r["step"]) for r in json.load(sys.stdin)))')
for s in $committed; do
	[ "$s" -ne "$killed_at" ] || die "step $killed_at, being written at the kill, was committed"
done
echo "  step $killed_at (being written at the kill) is not committed"
latest=$(echo "$committed" | tr ' ' '\n' | sort -n | tail -n 1)
[ "$latest" = "$done_at" ] || die "latest committed step is ${latest:-none}, want $done_at (the last complete one)"

say "Every committed step restores complete: sizes match the manifest, torch.load works, bytes equal the job's"
verify=()
for s in $committed; do
	"$FERRY" show --from "$remote" --step "$s" >"$work/manifest-$s.json"
	"$FERRY" restore --quiet --from "$remote" --step "$s" --to "$work/verify/$s" >/dev/null
	for f in "$work/verify/$s"/ep*.pt; do
		cmp -s "$f" "$ckpt_b/$(basename "$f")" || die "restored $(basename "$f") differs from what the job wrote"
	done
	verify+=("$work/verify/$s" "$work/manifest-$s.json" "$s")
done
"${check[@]}" steps "${verify[@]}"

# ---------------------------------------------------------------------------
say "3. New node: empty directory, ferry restore, relaunch with --resume (the README's entrypoint)"
ckpt_c=$work/c/ckpt # does not exist yet: nothing local survives
"$FERRY" restore --quiet --from "$remote" --to "$ckpt_c" --allow-empty | sed 's/^/  /'
mkdir -p "$ckpt_c"
"${agent[@]}" --watch "$ckpt_c" --state-dir "$work/state-c" >"$work/agent-c.log" 2>&1 & # fresh state too
agent_pid=$!
timeout 120 "${train[@]}" --resume "$ckpt_c" --save-dir "$ckpt_c" --log-dir "$work/c/log" >"$work/run3.log" 2>&1 ||
	die "run 3 failed (see run3.log)"
grep -h 'resumed from\|weights sha256' "$work/run3.log" | sed 's/^/  /'
"$FERRY" flush --timeout 2m --state-dir "$work/state-c" | sed 's/^/  /' || die "ferry flush on the new node failed (see agent-c.log)"
stop_agent
last=$("$FERRY" list --from "$remote" --json | "$PYTHON" -c 'import json,sys; print(max(r["step"] for r in json.load(sys.stdin)))')
[ "$last" = "$STEPS" ] || die "after the new node's flush the latest committed step is $last, want $STEPS"
"$FERRY" restore --quiet --from "$remote" --to "$work/verify/final" >/dev/null
final=()
for f in "$work/verify/final"/ep*.pt; do
	cmp -s "$f" "$ckpt_c/$(basename "$f")" || die "restored $(basename "$f") differs from what the new node wrote"
	final+=("$(basename "$f")")
done
echo "  the new node's agent committed step $STEPS; restored, it is byte for byte what the new node wrote"
"${check[@]}" same-content "$work/a/ckpt" "$work/verify/final" "${final[@]}"

# ---------------------------------------------------------------------------
say "4. Resumed run vs uninterrupted run"
"${check[@]}" losses "$work/a/log" "$work/c/log" $((done_at + 1)) "$STEPS" "$RANKS"
"${check[@]}" hashes "$work/a/log" "$work/c/log" "$RANKS"
resumed=()
for f in "$ckpt_c"/ep*.pt; do
	s=$(basename "$f" | sed -E 's/^ep[0-9]+-ba([0-9]+)-rank[0-9]+\.pt$/\1/')
	[ "$s" -le "$done_at" ] || resumed+=("$(basename "$f")")
done
echo "  the resumed run's checkpoints after step $done_at (${#resumed[@]} files) vs the reference's:"
"${check[@]}" same-content "$work/a/ckpt" "$ckpt_c" "${resumed[@]}"
echo "  (run 2 before the kill, for good measure:)"
"${check[@]}" losses "$work/a/log" "$work/b/log" 1 "$STEPS" "$RANKS" --partial

say "e2e passed in $((SECONDS - started))s: resumed at step $done_at on a new node, bit-exact to step $STEPS"
