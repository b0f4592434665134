#!/bin/bash
# An evaluation node following a run of 200 commits on loopback (issue 48
# item 2's target): `ferry push` commits steps 1..200 (64 KiB each, one
# every 0.25 s) to versitygw while `ferry follow --interval 1s --keep 3`
# restores them; follow's --exec stamps when each step was placed. Prints
# steps placed, missed, and the lag from each push returning to its step
# placed (median, 95th percentile, max). Run from the repository root after
# make build tools: bench/follow-200.sh
set -u
F=${FERRY:-bin/ferry}
GW=${VERSITYGW:-tools/bin/versitygw}
N=${STEPS:-200}
R=$(mktemp -d)
mkdir -p "$R/s3/bench" "$R/src" "$R/eval"
port=$((20000 + RANDOM % 20000))
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 S3_ENDPOINT_URL=http://127.0.0.1:$port
"$GW" --access bench --secret bench-secret --port 127.0.0.1:$port posix "$R/s3" > "$R/s3.log" 2>&1 &
gw=$!
trap 'kill $gw $fo 2>/dev/null; wait 2>/dev/null' EXIT
for i in $(seq 50); do "$F" list --from s3://bench/run >/dev/null 2>&1 && break; sleep 0.2; done
"$F" follow --from s3://bench/run --to "$R/eval" --interval 1s --keep 3 -q \
	--exec 'date +%s.%N > "$FERRY_STEP_DIR/../.placed-$FERRY_STEP"' > "$R/follow.log" 2>&1 &
fo=$!
for s in $(seq 1 "$N"); do
	head -c 64K /dev/urandom > "$R/src/model.bin"
	"$F" push -q --to s3://bench/run --step "$s" "$R/src" > /dev/null 2>> "$R/push.err" || echo "push $s failed"
	date +%s.%N > "$R/pushed-$s"
	sleep 0.25
done
sleep 5
kill -TERM $fo; wait $fo; echo "follow exit $?"
placed=0; lags=()
for s in $(seq 1 "$N"); do
	[ -f "$R/eval/.placed-$s" ] || continue
	placed=$((placed + 1))
	lags+=("$(awk -v a="$(cat "$R/pushed-$s")" -v b="$(cat "$R/eval/.placed-$s")" 'BEGIN {printf "%.3f", b - a}')")
done
echo "steps committed: $N; placed by follow: $placed; missed: $((N - placed)); step folders left: $(ls -d "$R"/eval/[0-9]* | wc -l)"
printf '%s\n' "${lags[@]}" | sort -n | awk '{a[NR]=$1} END {printf "lag push->placed: median %.2fs, p95 %.2fs, max %.2fs\n", a[int(NR/2)+1], a[int(NR*0.95)], a[NR]}'
