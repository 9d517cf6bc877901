#!/usr/bin/env bash
# A real single-node SLURM cluster runs a 4-task job array of `zshard convert` over one input; after
# `zshard finalize` the output must equal a single-process run byte for byte and pass `zshard verify`.
#
# Needs root (to install and start munge + slurm-wlm from Debian). Where SLURM cannot be installed or
# started, the test prints "SKIPPED: <reason>" and exits 0: it is skipped, never silently passed.
#   usage: tests/cluster/slurm.sh ZSHARD_BIN PYTHON
set -euo pipefail
ZSHARD_BIN=$(readlink -f "${1:?zshard binary}")
PYTHON=${2:?python with zarr}
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK=$(mktemp -d /tmp/zshard-slurm.XXXXXX)
LOGS="$WORK/logs"; mkdir -p "$LOGS"

skip() { echo "SKIPPED: SLURM test: $*"; exit 0; }
fail() { echo "FAILED: SLURM test: $*"; for f in "$LOGS"/*; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

cleanup() {
  scancel --user=root >/dev/null 2>&1 || true
  for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  [ -n "${MUNGED_STARTED:-}" ] && pkill -x munged 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || skip "not running as root (needed to install and start munge and slurm)"
command -v apt-get >/dev/null || skip "no apt-get to install slurm-wlm and munge"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "installing slurm-wlm and munge from Debian"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) \
    >"$LOGS/apt.log" 2>&1 || skip "apt-get install slurm-wlm munge failed: $(tail -1 "$LOGS/apt.log")"
fi

# munge: key and daemon (as the munge user).
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n </dev/null >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged --force >"$LOGS/munged.log" 2>&1 || skip "munged does not start: $(tail -1 "$LOGS/munged.log")"
  MUNGED_STARTED=1
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n </dev/null | unmunge >/dev/null 2>&1 || skip "munge credentials do not round-trip"

# slurm: one node with 2 CPUs, no cgroups.
NODE=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=zshardtest
SlurmctldHost=$NODE
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$NODE CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
: >/etc/slurm/cgroup.conf
slurmctld -i >>"$LOGS/slurmctld.out" 2>&1 || skip "slurmctld does not start: $(tail -1 "$LOGS/slurmctld.out")"
slurmd >>"$LOGS/slurmd.out" 2>&1 || skip "slurmd does not start: $(tail -1 "$LOGS/slurmd.out")"
ready=
for _ in $(seq 100); do
  state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  case "$state" in idle*|mixed*|allocated*) ready=1; break ;; esac
  [ "$state" = "down" ] || [ "$state" = "drained" ] && scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
  sleep 0.2
done
[ -n "$ready" ] || skip "the node did not become idle (state: ${state:-none}): $(tail -3 "$LOGS/slurmd.log" 2>/dev/null | tr '\n' ' ')"
echo "SLURM is up: $(sinfo -h -o '%P %D %T %c')"

# The conversion: once as a 4-task job array + finalize, once as a single process.
SRC="$WORK/input.zarr"; ARRAY_OUT="$WORK/array-out.zarr"; SINGLE_OUT="$WORK/single-out.zarr"
"$PYTHON" "$HERE/make_input.py" "$SRC"
OPTS=(--shard-shape 128,128 --chunk-shape 64,64 --compressor zstd:3)
sbatch --wait --array=0-3 --output="$LOGS/task-%a.log" \
  --wrap "'$ZSHARD_BIN' convert '$SRC' '$ARRAY_OUT' ${OPTS[*]} --threads 1 --report '$WORK'/report-\$SLURM_ARRAY_TASK_ID.json" \
  >"$LOGS/sbatch.log" 2>&1 || fail "the job array failed: $(cat "$LOGS/sbatch.log")"
for i in 0 1 2 3; do
  [ -f "$ARRAY_OUT/.zshard/options/w${i}of4.json" ] || fail "task $i did not run as worker $i/4"
  grep -q "\"index\": $i" "$WORK/report-$i.json" || fail "task $i's report is missing or not worker $i"
done
[ ! -f "$ARRAY_OUT/zarr.json" ] || fail "workers of a job array must not write metadata"
# DST alone: the source and the shapes come from the claim the tasks recorded (issue 44).
"$ZSHARD_BIN" finalize "$ARRAY_OUT" || fail "finalize failed"
"$ZSHARD_BIN" convert "$SRC" "$SINGLE_OUT" "${OPTS[@]}" --quiet
diff -r --exclude='.zshard*' "$ARRAY_OUT" "$SINGLE_OUT" >"$LOGS/diff.log" 2>&1 || fail "job-array output differs from a single run: $(head -5 "$LOGS/diff.log")"
"$ZSHARD_BIN" verify "$SRC" "$ARRAY_OUT" || fail "verify found mismatches"
echo "PASSED: SLURM test: a 4-task job array + finalize equals a single-process run ($(find "$ARRAY_OUT" -path '*/c/*' -type f | wc -l) shards)"
