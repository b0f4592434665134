#!/usr/bin/env bash
# make test-slurm: deploy/slurm/ferry-train.sbatch on a real SLURM.
#
#   1. Installs Debian's slurm-wlm and munge when missing (as root).
#   2. Starts a one-host cluster of its own in a scratch folder: munged on
#      its own socket, slurmctld and slurmd on free ports, this host's real
#      CPU count, cons_tres, JobRequeue=1, proctrack/linuxproc; and a local
#      S3 server (versitygw). Nothing under /etc is read or changed.
#   3. Submits the batch script with the trainer simulator
#      (scripts/test-slurm-trainer.sh), waits for two committed
#      checkpoints, and preempts the job as --signal=B:TERM does:
#      `scancel --signal=TERM --batch`.
#   4. Checks that the script drained and requeued the job, that the
#      requeued run restored the last committed step, byte for byte, and
#      resumed from it, and that the job finished with every step committed.
#
# It stops everything it started, on success and on failure (logs are kept
# on failure). Run through `make test-slurm`, which builds what it needs.
set -euo pipefail

: "${FERRY:?run through make test-slurm}" "${TRAINSIM:?run through make test-slurm}" "${VERSITYGW:?run through make test-slurm}"
root=$(cd "$(dirname "$0")/.." && pwd)
EVERY=100 LAST=${LAST:-1200} RANKS=2
started=$SECONDS

say() { printf '\n== [%3ds] %s\n' "$((SECONDS - started))" "$*"; }
die() {
	echo "test-slurm FAILED: $*" >&2
	exit 1
}

# --- 1. SLURM and munge ------------------------------------------------------
missing=""
for bin in sbatch srun scontrol scancel slurmctld slurmd munged; do
	command -v "$bin" >/dev/null || missing=yes
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
		die "SLURM is not installed; as root: apt-get install -y slurm-wlm munge"
	fi
	say "Installing Debian's slurm-wlm and munge"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge
fi
[ "$(id -u)" -eq 0 ] || die "run as root: slurmd must start job steps as the submitting user"

work=$(mktemp -d -t ferry-slurm.XXXXXX)
chmod 0755 "$work"
pids=() # daemons started here, stopped in reverse order
job=""
cleanup() {
	local rc=$?
	set +e
	if [ -n "$job" ]; then
		scancel "$job" 2>/dev/null
		for _ in $(seq 60); do
			state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
			case $state in PENDING | RUNNING | COMPLETING | CONFIGURING | REQUEUED | REQUEUE_FED | SUSPENDED | SIGNALING | STAGE_OUT) sleep 0.5 ;; *) break ;; esac
		done
	fi
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null
		for _ in $(seq 100); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "${pids[i]}" 2>/dev/null
		wait "${pids[i]}" 2>/dev/null
	done
	if [ "$rc" -ne 0 ]; then
		echo "test-slurm FAILED (exit $rc) after $((SECONDS - started))s; logs in $work:" >&2
		for f in "$work"/job.out "$work"/log/*.log; do
			[ -f "$f" ] && { echo "--- $f (last 40 lines)"; tail -n 40 "$f"; } >&2
		done
		rm -rf "$work"/s3 "$work"/tmp "$work"/verify
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() { # port seconds
	for _ in $(seq $(($2 * 10))); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

say "A one-host SLURM cluster in $work"
mkdir -p "$work"/{munge,log,ctld,spool,tmp,record,s3/ckpt}
chmod 0700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 0400 "$work/munge/munge.key"
munge_sock=$work/munge/munge.socket
# --force: munged as root (it prefers its own user; this cluster is
# private to the test).
munged --foreground --force --socket="$munge_sock" --key-file="$work/munge/munge.key" \
	--pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" \
	--log-file="$work/log/munged.log" >>"$work/log/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$munge_sock" ] && break; sleep 0.1; done
[ -S "$munge_sock" ] || die "munged did not start (see log/munged.log)"

host=$(hostname -s)
# This host as slurmd sees it (CPUs, sockets, cores, threads, memory), so
# that the node is not drained for a hardware mismatch.
node=$(slurmd -C | sed -n '/^NodeName=/{s/ UpTime=.*//;p;q}')
[ -n "$node" ] || die "slurmd -C printed no NodeName line"
ctld_port=$(free_port)
slurmd_port=$(free_port)
export SLURM_CONF=$work/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=ferrytest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobRequeue=1
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
KillWait=30
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -f "$SLURM_CONF" >>"$work/log/slurmctld.log" 2>&1 &
pids+=($!)
wait_port "$ctld_port" 20 || die "slurmctld did not listen on port $ctld_port (see log/slurmctld.log)"
slurmd -D -f "$SLURM_CONF" >>"$work/log/slurmd.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
	state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
	[ "$state" = idle ] && break
	sleep 0.5
done
[ "$state" = idle ] || die "node $host is '$state', not idle (see log/slurmd.log, log/slurmctld.log)"
sinfo

# --- 2. The S3 server --------------------------------------------------------
s3_port=$(free_port)
export AWS_ACCESS_KEY_ID=ferryslurm AWS_SECRET_ACCESS_KEY=ferryslurmsecret AWS_REGION=us-east-1
"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:$s3_port" \
	--keep-alive --quiet posix "$work/s3" >"$work/log/s3.log" 2>&1 &
pids+=($!)
wait_port "$s3_port" 10 || die "versitygw did not listen on 127.0.0.1:$s3_port"
export S3_ENDPOINT_URL=http://127.0.0.1:$s3_port
remote=s3://ckpt/run

# --- 3. Submit, then preempt -------------------------------------------------
# The job's environment (sbatch exports it): where checkpoints go, the
# agent's settings, and the test trainer's.
export CHECKPOINTS=$remote FERRY TMPDIR=$work/tmp
export FERRY_LAYOUT=composer FERRY_EXPECTED_RANKS=$RANKS FERRY_SETTLE=1s FERRY_METRICS_ADDR=off FERRY_PART_SIZE=8MiB
export FERRY_DRAIN_TIMEOUT=30s FLUSH_TIMEOUT=60s
export TRAINSIM RECORD=$work/record RANKS EVERY LAST INTERVAL=1 SIZE=8MiB

list_steps() { { "$FERRY" list --from "$remote" --json 2>/dev/null || true; } | sed -n 's/.*"step": *\([0-9]*\).*/\1/p' | sort -n; }
job_field() { { scontrol show job "$job" 2>/dev/null || true; } | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }

say "sbatch deploy/slurm/ferry-train.sbatch (1 node, trainer: $RANKS ranks, a checkpoint every $EVERY steps to $LAST)"
job=$(sbatch --parsable --nodes=1 --time=10 --chdir="$work" --output="$work/job.out" \
	"$root/deploy/slurm/ferry-train.sbatch" "$root/scripts/test-slurm-trainer.sh")
echo "job $job"

deadline=$((SECONDS + 90))
while :; do
	committed=$(list_steps | wc -l)
	[ "$committed" -ge 2 ] && break
	state=$(job_field JobState)
	[ "$SECONDS" -lt "$deadline" ] || die "fewer than 2 steps committed after 90 s (job state $state)"
	case $state in PENDING | CONFIGURING | RUNNING) ;; *) die "job $job is $state before it could be preempted" ;; esac
	sleep 0.5
done
# Preempt while the trainer writes the next checkpoint: its files exist
# but the trainer has not finished them (no line in written.0 yet).
# The job's own folder: a name with a random part (ferry-train.sbatch).
ckpt=""
for _ in $(seq 100); do
	for d in "$work"/tmp/ferry-ckpt-"$job"-*; do [ -d "$d" ] && ckpt=$d; done
	[ -n "$ckpt" ] && break
	sleep 0.1
done
[ -n "$ckpt" ] || die "no folder $work/tmp/ferry-ckpt-$job-* on the node"
writing=""
for _ in $(seq 300); do
	for f in "$ckpt"/ep0-ba*-rank0.pt; do
		[ -e "$f" ] || continue
		step=${f##*-ba}
		step=${step%-rank0.pt}
		grep -q "^$step " "$work/record/written.0" 2>/dev/null || writing=$step
	done
	[ -n "$writing" ] && break
	sleep 0.1
done
say "steps committed: $(list_steps | tr '\n' ' '); step ${writing:-?} being written; preempting: scancel --signal=TERM --batch $job"
scancel --signal=TERM --batch "$job"

deadline=$((SECONDS + 300))
seen=""
while :; do
	state=$(job_field JobState) restarts=$(job_field Restarts) reason=$(job_field Reason)
	if [ "$state/$reason/$restarts" != "$seen" ]; then
		seen="$state/$reason/$restarts"
		echo "  job $job: $state (reason $reason, restarts $restarts)"
	fi
	# SLURM holds a requeued job for about two minutes (Reason=BeginTime);
	# nothing else is waiting on this cluster, so let it start now.
	if [ "$state" = PENDING ] && [ "$reason" = BeginTime ]; then
		scontrol update JobId="$job" StartTime=now || true
	fi
	case $state in
	COMPLETED)
		[ "$restarts" -ge 1 ] || die "job $job completed without being requeued"
		break
		;;
	FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
		die "job $job ended $state after $restarts requeues"
		;;
	esac
	[ "$SECONDS" -lt "$deadline" ] || die "job $job is $state after 300 s (restarts: $restarts)"
	sleep 1
done
say "job $job: $state after $restarts requeue, exit code $(job_field ExitCode)"
[ "$restarts" -eq 1 ] || die "job was requeued $restarts times, want 1"
[ "$(job_field ExitCode)" = 0:0 ] || die "job exit code $(job_field ExitCode), want 0:0"
sed 's/^/  | /' "$work/job.out"

# --- 4. What happened --------------------------------------------------------
say "Checking: the preempted run committed what it completed; the requeued run restored it and resumed"
rec=$work/record
[ -s "$rec/written.0" ] || die "the first run wrote no complete checkpoint"
[ -s "$rec/restored.1" ] || die "the requeued run found no checkpoint to resume from"
last_written0=$(cut -d' ' -f1 "$rec/written.0" | sort -n | tail -n 1)
restored=$(cut -d' ' -f1 "$rec/restored.1" | sort -u)
[ "$(wc -l <<<"$restored")" -eq 1 ] || die "the requeued run resumed from several steps: $restored"
# The last step the first run's agent committed, from its last log line
# (flush names it too, but since flush exits 1 for a step the trainer was
# killed writing, it may print no such line).
flushed=$(sed -n 's/.*agent stopped.*"last_committed": *\([0-9]*\).*/\1/p' "$work/job.out" | head -n 1)
restore_line=$(grep -m1 "^restored step" "$work/job.out" || true)
echo "  first run: last step written completely $last_written0, last committed at its flush: ${flushed:-none}"
echo "  requeued run: $restore_line"
[ -n "$flushed" ] || die "no 'agent stopped' line with the last committed step in the first run's output"
# A step the trainer finished just as SIGTERM arrived may be complete on
# disk without its record line: then it is the next one.
[ "$flushed" -eq "$last_written0" ] || [ "$flushed" -eq $((last_written0 + EVERY)) ] ||
	die "the drain committed up to step $flushed, but the first run completed step $last_written0"
[ "$restored" -eq "$flushed" ] || die "the requeued run resumed from step $restored, not the last committed $flushed"
# The first run left nothing on the node (it removes CKPT_DIR once all is
# committed), so every file came from the bucket: "(0 kept, N downloaded)".
grep -q "^restored step $flushed from $remote .*(0 kept, [1-9][0-9]* downloaded)" "$work/job.out" ||
	die "ferry restore in the requeued run did not download step $flushed"

# Byte for byte: what the requeued run found equals what the trainer
# writes for that step (ferry-trainsim's content depends on step and rank
# only).
"$TRAINSIM" --dir "$work/verify/ref" --ranks "$RANKS" --steps "$restored" --size 8MiB --chunk 8MiB --pause 0 >/dev/null
while read -r step rank sum; do
	want=$(sha256sum <"$work/verify/ref/ep0-ba$step-rank$rank.pt" | cut -d' ' -f1)
	[ "$sum" = "$want" ] || die "restored step $step rank $rank differs from what the trainer wrote"
	echo "  step $step rank $rank restored byte for byte (sha256 $sum)"
done <"$rec/restored.1"

first1=$(head -n 1 "$rec/written.1" | cut -d' ' -f1)
[ "$first1" -eq $((restored + EVERY)) ] || die "the requeued run wrote step $first1 first, not $((restored + EVERY))"
last1=$(cut -d' ' -f1 "$rec/written.1" | sort -n | tail -n 1)
[ "$last1" -eq "$LAST" ] || die "the requeued run stopped at step $last1, not $LAST"
grep -q "run $job.0: requeueing" "$work/job.out" || die "the first run did not requeue itself"
grep -q "run $job.1: done with status 0" "$work/job.out" || die "the requeued run did not finish cleanly"

# Every step the trainer completed in either run is committed, and nothing else.
want=$(cut -d' ' -f1 "$rec/written.0" "$rec/written.1" | sort -nu)
got=$(list_steps)
if [ "$got" != "$want" ] && [ "$got" != "$(printf '%s\n%s' "$want" "$flushed" | sort -nu)" ]; then
	die "committed steps: $(tr '\n' ' ' <<<"$got"), want the completed ones: $(tr '\n' ' ' <<<"$want")"
fi
echo "  committed: $(tr '\n' ' ' <<<"$got")"
"$FERRY" restore --quiet --from "$remote" --to "$work/verify/final" >/dev/null
"$TRAINSIM" --dir "$work/verify/ref" --ranks "$RANKS" --steps "$LAST" --size 8MiB --chunk 8MiB --pause 0 >/dev/null
for ((r = 0; r < RANKS; r++)); do
	cmp -s "$work/verify/final/ep0-ba$LAST-rank$r.pt" "$work/verify/ref/ep0-ba$LAST-rank$r.pt" ||
		die "the final step $LAST rank $r restores with different bytes"
done

# --- 5. The mistakes of a first submission -----------------------------------
say "A wrong bucket and missing credentials end the job before training: ferry doctor's fail line and its fix"
mkdir -p "$work/home"
bad_bucket=$(CHECKPOINTS=s3://no-such-bucket/run sbatch --parsable --nodes=1 --time=2 --chdir="$work" \
	--output="$work/bad-bucket.out" "$root/deploy/slurm/ferry-train.sbatch" "$root/scripts/test-slurm-trainer.sh")
# No keys anywhere, and no instance metadata service asked for some.
no_keys=$(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work/home" AWS_EC2_METADATA_DISABLED=true \
	sbatch --parsable --nodes=1 --time=2 --chdir="$work" \
	--output="$work/no-keys.out" "$root/deploy/slurm/ferry-train.sbatch" "$root/scripts/test-slurm-trainer.sh")
for j in "$bad_bucket" "$no_keys"; do
	job=$j
	for _ in $(seq 120); do
		case $(job_field JobState) in FAILED | COMPLETED | CANCELLED | TIMEOUT) break ;; esac
		sleep 0.5
	done
	[ "$(job_field JobState)" = FAILED ] || die "job $j is $(job_field JobState), want FAILED"
done
job=""
# ferry doctor, before the restore, says what is wrong and how to fix it.
for c in "bad-bucket:fail bucket: \"no-such-bucket\" does not exist at $S3_ENDPOINT_URL; fix: " \
	"no-keys:fail credentials: no usable AWS credentials found"; do
	out=$work/${c%%:*}.out line=${c#*:}
	grep -qF "$line" "$out" || die "$(basename "$out") lacks '$line':$(printf '\n%s' "$(cat "$out")")"
	[ "$(grep -c '^ferry: ' "$out")" -eq 1 ] || die "$(basename "$out"): more than one error line"
	grep -q "^ferry: doctor: 1 of [0-9]* checks failed" "$out" || die "$(basename "$out"): no doctor summary line"
	grep -q "setup check or restore failed (the reason is above); not training" "$out" || die "$(basename "$out"): the job did not stop before training"
	! grep -q "training:" "$out" || die "$(basename "$out"): the trainer ran"
	echo "  $(basename "$out"): $(grep '^fail ' "$out")"
done

say "test-slurm passed in $((SECONDS - started))s: preempted at step $restored, requeued, restored, resumed, finished at step $LAST"
