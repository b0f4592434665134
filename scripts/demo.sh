#!/usr/bin/env bash
# ferry demo: a local S3 server, a simulated 2-rank training job writing
# three checkpoints while the ferry agent uploads them, then a restore onto a
# "new node" (an empty directory), with every file verified. Run through `make demo`, which builds the binaries.
set -euo pipefail

: "${VERSITYGW:?run through make demo}" "${FERRY:?run through make demo}" "${TRAINSIM:?run through make demo}"

work=$(mktemp -d -t ferry-demo.XXXXXX)
server_pid=""
agent_pid=""
cleanup() {
	if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; fi
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# Bold headings on a terminal only: a log file or CI gets plain text.
if [ -t 1 ]; then
	say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	say() { printf '\n== %s\n' "$*"; }
fi

# A free port on loopback, chosen by the kernel.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 17171)

say "Starting a local S3 server (Versity S3 Gateway) on 127.0.0.1:$port"
mkdir -p "$work/s3/demo-bucket" # a directory at the top level is a bucket
export AWS_ACCESS_KEY_ID=ferrydemo AWS_SECRET_ACCESS_KEY=ferrydemosecret AWS_REGION=us-east-1
"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:$port" posix "$work/s3" >"$work/s3.log" 2>&1 &
server_pid=$!
export S3_ENDPOINT_URL="http://127.0.0.1:$port"
for _ in $(seq 50); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
	sleep 0.1
done

mkdir -p "$work/node-a/ckpt"
say "Starting the ferry agent beside the job (watching $work/node-a/ckpt)"
"$FERRY" agent --watch "$work/node-a/ckpt" --to s3://demo-bucket/run-1 --state-dir "$work/state" \
	--layout composer --expected-ranks 2 --settle 1s --part-size 8MiB --metrics-addr off \
	--log-level warn &
agent_pid=$!

say "Training job (2 ranks) writes checkpoints at steps 100, 200, 300 while the agent uploads them"
"$TRAINSIM" --dir "$work/node-a/ckpt" --ranks 2 --steps 100,200,300 --size 24MiB --pause 5ms --interval 2s
say "The job has stopped; ferry flush waits until every checkpoint it wrote is committed"
"$FERRY" flush --state-dir "$work/state" --timeout 2m
"$FERRY" status --state-dir "$work/state"
kill -TERM "$agent_pid"; wait "$agent_pid" || true

say "ferry list: what the bucket holds"
"$FERRY" list --from s3://demo-bucket/run-1

say "A new node: an empty directory, restored from the bucket (latest step, every BLAKE3 verified)"
"$FERRY" restore --quiet --from s3://demo-bucket/run-1 --to "$work/node-b/ckpt"
ls -l "$work/node-b/ckpt"

say "Checking the restored step against what the job wrote, byte for byte"
ok=0
for name in ep0-ba300-rank0.pt ep0-ba300-rank1.pt; do
	if cmp -s "$work/node-a/ckpt/$name" "$work/node-b/ckpt/$name"; then
		echo "  identical: $name"
	else
		echo "  DIFFERENT: $name"; ok=1
	fi
done
for r in 0 1; do
	target=$(readlink "$work/node-b/ckpt/latest-rank$r.pt")
	echo "  latest-rank$r.pt -> $target"
	[ "$target" = "ep0-ba300-rank$r.pt" ] || ok=1
done
echo "  manifest hashes (BLAKE3, as b3sum prints them):"
"$FERRY" show --from s3://demo-bucket/run-1 | grep -E '"(path|blake3)"' | paste - - | sed -e 's/^ *"path": "\([^"]*\)",[[:space:]]*"blake3": "\([^"]*\)",*/    \2  \1/' | grep -E '^    [0-9a-f]{64}'
if [ "$ok" -ne 0 ]; then echo "demo FAILED"; exit 1; fi
say "Demo passed: step 300 restored on the new node, every hash verified"
