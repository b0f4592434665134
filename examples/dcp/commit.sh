# Sourced by scenario.sh (its server, root and helpers): the trainer's own
# word, `ferry commit`, in the forms docs/agent.md shows, run by torch 2.6
# inside the root against `ferry agent` outside it. Each agent has a settle
# window of an hour, so a step durable within the run was committed by the
# call (DCP's evidence aside: its closes and .metadata prove the step too;
# for plain torch.save the flat layout has no evidence but the settle
# window). Checked: every call exits 0, the committed steps are exactly the
# saved ones, each restores onto an empty folder and loads in torch equal to
# what the trainer held; the time from the save returning to the call
# returning (durable) is printed.
COMMIT_STEPS=${COMMIT_STEPS:-12}
ferry_in_root=$(readlink -f "$FERRY") # a static binary; scenario.sh binds its folder into the root

# durable_times FILE KEY_FROM: median and max of durable - KEY_FROM over
# the lines of FILE; fails on a line without a durable time or rc 0.
durable_times() {
	python3 - "$1" "$2" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r["step"] for r in rows if r.get("commit_rc", r.get("rc")) != 0]
if bad or not rows:
    sys.exit(f"ferry commit failed for steps {bad} (or was never called)")
d = sorted(r["durable"] - r[sys.argv[2]] for r in rows)
print(f"{len(d)} calls, all exit 0; durable after the save returned: median {statistics.median(d):.2f} s, max {d[-1]:.2f} s")
EOF
}

commit_agent() { # dir remote state [flags]: an agent that commits nothing by itself within the run
	local dir=$1 to=$2 state=$3
	shift 3
	mkdir -p "$dir"
	"$FERRY" agent --watch "$dir" --to "$to" --state-dir "$state" --metrics-addr off --settle 1h "$@" \
		>"$state.log" 2>&1 &
	agent_pid=$!
}

commit_check() { # what remote saved-steps: the committed steps are exactly the saved ones
	local com
	com=$("$FERRY" list --from "$2" --json | python3 -c 'import json,sys; print(" ".join(str(r["step"]) for r in json.load(sys.stdin) or []))')
	[ "$com" = "$3" ] || die "$1: committed steps '$com', want the saved steps '$3'"
	kill -TERM "$agent_pid"
	wait "$agent_pid" || die "$1: the agent exited $? on SIGTERM"
	agent_pid=""
}

# DCP: dcp.save on 4 ranks, then rank 0 calls ferry commit and waits.
dir=$work/cd
commit_agent "$dir" "$remote-commit" "$work/state-cd"
in_root "${train[@]}" --steps "$COMMIT_STEPS" --save-dir "$dir" --log-dir "$work/lcd" \
	--commit "$ferry_in_root commit --state-dir $work/state-cd --watch $dir --timeout 2m" >"$work/run-cd.log" 2>&1 ||
	die "the DCP trainer with ferry commit failed (see run-cd.log)"
out=$(durable_times "$work/lcd/saves.jsonl" returned) || die "dcp.save + ferry commit: $out"
echo "  dcp.save + ferry commit: $out"
saved=$(seq "$EVERY" "$EVERY" "$COMMIT_STEPS" | tr '\n' ' ' | sed 's/ $//')
commit_check "dcp.save + ferry commit" "$remote-commit" "$saved"
pairs=()
for s in $saved; do
	"$FERRY" restore --quiet --from "$remote-commit" --step "$s" --to "$work/rcd/$s" >/dev/null || die "restore of step $s (ferry commit) failed"
	pairs+=("$work/rcd/$s/step-$s" "$work/lcd/ref/step-$s.json")
done
in_root python3 "$here/load.py" --nprocs 1 "${pairs[@]}" 2>&1 | quiet ||
	die "a step committed by ferry commit does not load or differs from the reference"

# DCP async_save: the future's done callback calls ferry commit --no-wait.
dir=$work/ca
commit_agent "$dir" "$remote-commit-async" "$work/state-ca"
in_root "${train[@]}" --steps "$COMMIT_STEPS" --async --save-dir "$dir" --log-dir "$work/lca" \
	--commit "$ferry_in_root commit --state-dir $work/state-ca --watch $dir" >"$work/run-ca.log" 2>&1 ||
	die "the async DCP trainer with ferry commit --no-wait failed (see run-ca.log)"
python3 - "$work/lca/commits.jsonl" <<'EOF' || die "async ferry commit --no-wait"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r["step"] for r in rows if r["rc"] != 0]
if bad or not rows:
    sys.exit(f"ferry commit --no-wait failed for steps {bad} (or was never called)")
print(f"  dcp.async_save + ferry commit --no-wait: {len(rows)} calls from the future's callback, all exit 0")
EOF
"$FERRY" flush --timeout 2m --state-dir "$work/state-ca" >/dev/null || die "flush after async ferry commit"
commit_check "dcp.async_save + ferry commit --no-wait" "$remote-commit-async" "$saved"
"$FERRY" restore --quiet --from "$remote-commit-async" --to "$work/rca" >/dev/null || die "restore (async ferry commit) failed"
in_root python3 "$here/load.py" --nprocs 2 "$work/rca/step-$COMMIT_STEPS" "$work/lca/ref/step-$COMMIT_STEPS.json" 2>&1 | quiet ||
	die "the latest async step committed by ferry commit does not load at 2 ranks or differs"

# Plain torch.save into step-N.pt, then ferry commit on that file; the flat
# layout alone would wait the hour.
dir=$work/cp
# shellcheck disable=SC2016 # the pattern is for ferry
commit_agent "$dir" "$remote-commit-plain" "$work/state-cp" --layout flat --step-pattern '^step-(\d+)\.pt$'
in_root python3 "$here/hf.py" plain --save-dir "$dir" --log-dir "$work/lcp" --steps 12 --save-every 3 \
	--commit "$ferry_in_root commit --state-dir $work/state-cp --watch $dir --timeout 2m" >"$work/run-cp.log" 2>&1 ||
	die "the plain torch.save trainer with ferry commit failed (see run-cp.log)"
out=$(durable_times "$work/lcp/commits.jsonl" closed) || die "torch.save + ferry commit: $out"
echo "  torch.save + ferry commit: $out"
commit_check "torch.save + ferry commit" "$remote-commit-plain" "3 6 9 12"
for s in 3 6 9 12; do
	"$FERRY" restore --quiet --from "$remote-commit-plain" --step "$s" --to "$work/rcp/$s" >/dev/null || die "restore of step $s (plain ferry commit) failed"
	in_root python3 "$here/hf.py" check-plain "$work/rcp/$s/step-$s.pt" "$work/lcp/ref/step-$s.json" 2>&1 | quiet ||
		die "step-$s.pt committed by ferry commit does not load or differs"
done
