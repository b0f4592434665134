#!/bin/bash
# 1,000 declarations (10 steps x 100, ferry commit --no-wait, 50 at once)
# against one agent on a file:// store (issue 47): reports the agent's
# resident memory before, at its peak and after, whether flush answers,
# and the bytes stored against the bytes of the steps (each byte once).
# Run from the repository root after make build: bench/declaration-flood.sh
set -u
F=${FERRY:-bin/ferry}
R=$(mktemp -d)
W=$R/watch; S=$R/state; B=$R/bucket
mkdir -p $W $S $B/run
for n in $(seq 1 10); do mkdir -p $W/step-$n; head -c 1M /dev/urandom > $W/step-$n/model.bin; head -c 1M /dev/urandom > $W/step-$n/optim.bin; done
$F agent --watch $W --to file://$B/run --state-dir $S --layout flat --step-pattern '^step-(\d+)$' --settle 1h --metrics-addr off > $R/agent.log 2>&1 &
A=$!
sleep 2
grep VmRSS /proc/$A/status
start=$(date +%s.%N)
for n in $(seq 1 10); do for i in $(seq 1 100); do echo $n; done; done | xargs -P 50 -I{} sh -c "$F commit --no-wait --step {} --watch $W --to file://$B/run --state-dir $S step-{} step-{}/model.bin step-{}/model.bin >/dev/null 2>>$R/commit.err || echo fail >> $R/fails"
end=$(date +%s.%N)
grep -E "VmHWM|VmRSS" /proc/$A/status
$F flush --watch $W --to file://$B/run --state-dir $S --timeout 2m > $R/flush.out 2>&1; echo "flush rc=$?"; cat $R/flush.out | tail -2
grep -E "VmHWM|VmRSS" /proc/$A/status
echo "declarations: 1000 in $(awk "BEGIN {print $end - $start}") s; failed commit calls: $(cat $R/fails 2>/dev/null | wc -l)"
sort $R/commit.err 2>/dev/null | uniq -c | sort -rn | head -3
echo "bytes in the steps: $(du -sb --apparent-size $W | cut -f1); bytes stored (data objects): $(find $B -path '*data*' -type f -printf '%s\n' | awk '{s+=$1} END {print s}')"
echo "data objects: $(find $B -path '*data*' -type f | wc -l); manifests: $(find $B -path '*manifests*' -type f | wc -l)"
echo "committed lines: $(grep -c 'committed step' $R/agent.log)"
kill -TERM $A; wait $A
