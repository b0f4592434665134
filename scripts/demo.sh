#!/usr/bin/env bash
# ferry demo: a local S3 server, a simulated 2-rank training job, a push of
# its checkpoint, and a restore onto a "new node" (an empty directory), with
# every file verified. Run through `make demo`, which builds the binaries.
set -euo pipefail

: "${VERSITYGW:?run through make demo}" "${FERRY:?run through make demo}" "${TRAINSIM:?run through make demo}"

work=$(mktemp -d -t ferry-demo.XXXXXX)
server_pid=""
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

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

say "Training job writes checkpoint step 1000 (2 ranks, composer names)"
"$TRAINSIM" --dir "$work/node-a/ckpt" --ranks 2 --steps 1000 --size 24MiB --pause 5ms
ls -l "$work/node-a/ckpt"

say "ferry push: upload the step, then commit its manifest"
"$FERRY" push --quiet --to s3://demo-bucket/run-1 --step 1000 --part-size 8MiB --state-dir "$work/state" "$work/node-a/ckpt"

say "ferry list"
"$FERRY" list --from s3://demo-bucket/run-1

say "ferry restore onto a new node (an empty directory), verifying every BLAKE3"
"$FERRY" restore --quiet --from s3://demo-bucket/run-1 --to "$work/node-b/ckpt"
ls -l "$work/node-b/ckpt"

say "Checking every restored file byte for byte"
ok=0
for f in "$work/node-a/ckpt"/*; do
	name=$(basename "$f")
	if cmp -s "$f" "$work/node-b/ckpt/$name"; then
		echo "  identical: $name"
	else
		echo "  DIFFERENT: $name"; ok=1
	fi
done
"$FERRY" show --from s3://demo-bucket/run-1 | grep -E '"(path|blake3)"' | sed 's/^ */  /'
if [ "$ok" -ne 0 ]; then echo "demo FAILED"; exit 1; fi
say "Demo passed: step 1000 restored on the new node, every hash verified"
