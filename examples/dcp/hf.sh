# Sourced by scenario.sh (its server, root and helpers): the HF-style
# (safetensors) and the plain torch.save trainers of hf.py, each with
# `ferry agent` beside it, SIGKILLed in its third save; every committed
# step is restored onto an empty folder and loaded by torch, equal to what
# the trainer held; the torn step is not committed.
# PLAIN_AGENT_FLAGS: the single-file trainer's agent flags (default flat
# with a step pattern). Flat has no marker and commits a torch.save torn by
# SIGKILL (the kernel closes the file at the kill), so the plain trainer
# runs to its end unless PLAIN_KILL=1, for a layout that tells a torn
# torch.save zip (PLAIN_AGENT_FLAGS= PLAIN_KILL=1: the defaults).
PLAIN_AGENT_FLAGS=${PLAIN_AGENT_FLAGS-'--layout flat --step-pattern ^step-(\d+)\.pt$'}

hf_case() { # kind die expected [agent flags]: run hf.py KIND (killed in its
	# save number DIE unless 0), then check the committed steps are EXPECTED
	local kind=$1 kill=$2 expect=$3 dir=$work/$1 log=$work/l$1 rc=0 s com want n
	shift 3
	mkdir -p "$dir" "$log"
	"$FERRY" agent --watch "$dir" --to "$remote-$kind" --state-dir "$work/state-$kind" --metrics-addr off "$@" \
		>"$work/agent-$kind.log" 2>&1 &
	agent_pid=$!
	in_root python3 "$here/hf.py" "$kind" --save-dir "$dir" --log-dir "$log" --steps 12 --save-every 3 --die "$kill" \
		>"$work/run-$kind.log" 2>&1 || rc=$?
	if [ "$kill" = 0 ]; then
		[ "$rc" = 0 ] || die "$kind: the trainer exited $rc (see run-$kind.log)"
	else
		[ "$rc" = 137 ] || die "$kind: the trainer exited $rc, want 137 (SIGKILL in save $kill; see run-$kind.log)"
	fi
	"$FERRY" flush --timeout 2m --state-dir "$work/state-$kind" >/dev/null || die "$kind: ferry flush failed"
	kill -TERM "$agent_pid"; wait "$agent_pid" || die "$kind: the agent exited $? on SIGTERM"
	agent_pid=""
	com=$("$FERRY" list --from "$remote-$kind" --json | python3 -c 'import json,sys; print(" ".join(str(r["step"]) for r in json.load(sys.stdin) or []))')
	# Restore every committed step onto an empty folder; which trainer steps
	# they hold is read from the restored names (a layout may number steps
	# by a counter: the single layout does).
	local pairs=() saved=""
	for s in $com; do
		"$FERRY" restore --quiet --from "$remote-$kind" --step "$s" --to "$work/r$kind/$s" >/dev/null || die "$kind: restore of step $s failed"
		for want in "$work/r$kind/$s"/checkpoint-* "$work/r$kind/$s"/step-*.pt; do
			[ -e "$want" ] || continue
			n=$(basename "$want" | tr -dc 0-9)
			saved="$saved $n"
			pairs+=("$want" "$log/ref/step-$n.json")
		done
	done
	saved=$(echo "$saved" | tr ' ' '\n' | sed '/^$/d' | sort -nu | tr '\n' ' ' | sed 's/ $//')
	[ "$saved" = "$expect" ] || die "$kind: the committed steps ($com) hold trainer steps '$saved', want '$expect'"
	if [ "$kill" = 0 ]; then
		echo "  $kind: ran to its end ($(ls "$dir" | tr '\n' ' ')); committed: trainer steps $saved"
	else
		echo "  $kind: killed in the save of step $((3 * kill)) ($(ls "$dir" | tr '\n' ' ')); committed: trainer steps $saved"
	fi
	local check=check-plain
	[ "$kind" = hf ] && check=check-hf
	set -- "${pairs[@]}"
	while [ $# -gt 0 ]; do
		in_root python3 "$here/hf.py" "$check" "$1" "$2" 2>&1 | quiet || die "$kind: $1 does not load or differs"
		shift 2
	done
}

hf_case hf 3 "3 6"
# shellcheck disable=SC2086 # word splitting wanted
if [ -n "${PLAIN_KILL:-}" ]; then
	hf_case plain 3 "3 6" $PLAIN_AGENT_FLAGS
else
	hf_case plain 0 "3 6 9 12" $PLAIN_AGENT_FLAGS
fi
