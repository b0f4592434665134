#!/bin/bash
# An evaluation node following a run of 200 commits, revisions included,
# on loopback (issue 48 item 2's target). A trainer loop saves step-N/
# folders (two shards, no marker; N up to STEPS=182) beside a real `ferry
# agent --layout dcp --no-marker --settle 1s`, which commits each once its
# files are quiet for the settle window; every 10th save, once the step
# before is committed, re-saves that step (one shard rewritten), which the
# agent commits as its next revision: 182 steps and 18 revisions. The agent's
# --on-commit hook stamps each commit (step and revision); `ferry follow
# --interval 1s --keep 3` restores them on the evaluation side and its
# --exec stamps each placement. Prints commits (steps and revisions),
# placed, missed, the lag from commit to placed (median, p95, max), and
# follow's requests per poll when nothing is new (from its --json
# summary of a last idle poll). Run from the repository root after make
# build tools: bench/follow-revisions.sh
set -u
F=${FERRY:-bin/ferry}
GW=${VERSITYGW:-tools/bin/versitygw}
N=${STEPS:-182}
R=$(mktemp -d)
echo "work folder: $R"
mkdir -p "$R/s3/bench" "$R/watch" "$R/eval" "$R/commits" "$R/state"
port=$((20000 + RANDOM % 20000))
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 S3_ENDPOINT_URL=http://127.0.0.1:$port
export FERRY_STATE_DIR=$R/state
"$GW" --access bench --secret bench-secret --port 127.0.0.1:$port posix "$R/s3" > "$R/s3.log" 2>&1 &
gw=$!
trap 'kill $gw $ag $fo 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$R"' EXIT
for i in $(seq 50); do "$F" list --from s3://bench/run >/dev/null 2>&1 && break; sleep 0.2; done
"$F" agent --watch "$R/watch" --to s3://bench/run -q --layout dcp --no-marker --settle 1s \
	--on-commit "date +%s.%N > $R/commits/\$FERRY_STEP.\$FERRY_REVISION" > "$R/agent.log" 2>&1 &
ag=$!
"$F" follow --from s3://bench/run --to "$R/eval" --interval 1s --keep 3 -q \
	--exec 'date +%s.%N > "$FERRY_STEP_DIR/../.placed-$FERRY_STEP.$FERRY_REVISION"' > "$R/follow.log" 2>&1 &
fo=$!
save() { # save STEP: two shards, written and closed
	mkdir -p "$R/watch/step-$1"
	head -c 64K /dev/urandom > "$R/watch/step-$1/__0_0.distcp"
	head -c 16K /dev/urandom > "$R/watch/step-$1/__1_0.distcp"
}
revisions=0
for s in $(seq 1 "$N"); do
	save "$s"
	if [ $((s % 10)) = 0 ]; then
		for i in $(seq 100); do [ -f "$R/commits/$((s - 1)).0" ] && break; sleep 0.1; done
		head -c 64K /dev/urandom > "$R/watch/step-$((s - 1))/__0_0.distcp"
		revisions=$((revisions + 1))
	fi
	sleep 0.25
done
sleep 5
kill -TERM $fo; wait $fo; echo "follow exit $?"
kill -TERM $ag; wait $ag; echo "agent exit $?"
commits=0; placed=0; missed=(); lags=()
for c in "$R"/commits/*; do
	k=$(basename "$c"); commits=$((commits + 1))
	if [ -f "$R/eval/.placed-$k" ]; then
		placed=$((placed + 1))
		lags+=("$(awk -v a="$(cat "$c")" -v b="$(cat "$R/eval/.placed-$k")" 'BEGIN {printf "%.3f", b - a}')")
	else
		missed+=("$k")
	fi
done
echo "steps saved: $N; revisions saved: $revisions; commits (step.revision): $commits; placed by follow: $placed; missed: ${#missed[@]} ${missed[*]:-}"
echo "step folders left: $(ls -d "$R"/eval/[0-9]* | wc -l)"
printf '%s\n' "${lags[@]}" | sort -n | awk '{a[NR]=$1} END {printf "lag commit->placed: median %.2fs, p95 %.2fs, max %.2fs\n", a[int(NR/2)+1], a[int(NR*0.95)], a[NR]}'
"$F" follow --from s3://bench/run --to "$R/eval" --once --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("idle poll: placed", len(d.get("placed") or []), "requests", d.get("requests"))'
