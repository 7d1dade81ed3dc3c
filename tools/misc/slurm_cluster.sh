#!/usr/bin/env bash
# A single-node Slurm on this machine, for trying the slurm_*.sh scripts and
# for the tests (tests/slurm_cluster.py); needs root and Debian's packages
# (apt-get install -y slurm-wlm munge):
#   tools/misc/slurm_cluster.sh start DIR   munged, slurmctld and slurmd with
#       a slurm.conf generated in DIR (this host, CPUs=$(nproc), one
#       partition, PARTITION, default "debug"); waits until the node is idle,
#       then prints the line to type: export SLURM_CONF=DIR/slurm.conf
#   tools/misc/slurm_cluster.sh stop DIR    ends the three daemons it started
# Exit status 3: the packages are missing (the line says how to install them).
# Env: PARTITION (debug), SLURM_CPUS (the node's CPUs, default $(nproc)),
# FIRST_JOB_ID (1).
set -euo pipefail
ACTION=${1:-}
DIR=${2:-}
if [ -z "$ACTION" ] || [ -z "$DIR" ] || { [ "$ACTION" != start ] && [ "$ACTION" != stop ]; }; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
DAEMONS=(slurmd slurmctld munged)

stop() {
  local name pid
  for name in "${DAEMONS[@]}"; do
    [ -f "$DIR/$name.pid" ] || continue
    pid=$(cat "$DIR/$name.pid")
    rm -f "$DIR/$name.pid"
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
  done
}

if [ "$ACTION" = stop ]; then
  stop
  exit 0
fi

for program in munged slurmctld slurmd sinfo srun; do
  if ! command -v "$program" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$program" ]; then
    echo "$(basename "$0"): $program is missing: install Slurm with 'apt-get install -y slurm-wlm munge' (as root)" >&2
    exit 3
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "$(basename "$0"): the test cluster runs its daemons as root: run it as root" >&2
  exit 3
fi
export PATH="$PATH:/usr/sbin"
PARTITION=${PARTITION:-debug}
# nproc alone honours OMP_NUM_THREADS (1 in the tests)
CPUS=${SLURM_CPUS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
HOST=$(hostname -s)
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
# Ports of this cluster's own, 40000-49999: two test clusters on one machine
# do not meet, nor the rendezvous ports of their jobs (20000 + job id %
# 20000, mmseg_elliptical/engine/launch.py). FIRST_JOB_ID (default 1) starts
# the job ids: clusters side by side take ranges of their own (the tests:
# 1000 per pytest worker), else their jobs of one id share one port.
PORT=$(( 40000 + $(cksum <<<"$DIR" | cut -d' ' -f1) % 10000 ))
if [ ! -f "$DIR/munge.key" ]; then
  head -c 1024 /dev/urandom > "$DIR/munge.key"
  chmod 400 "$DIR/munge.key"
fi
cat > "$DIR/slurm.conf" <<EOF
ClusterName=mmseg-elliptical-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.run.pid
SlurmdPidFile=$DIR/slurmd.run.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId=${FIRST_JOB_ID:-1}
MinJobAge=600
KillWait=5
InactiveLimit=0
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$DIR/slurm.conf"
stop  # what a previous start in DIR left
munged --force --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" \
  --log-file="$DIR/log/munged.log" --pid-file="$DIR/munged.pid" \
  --seed-file="$DIR/munged.seed"
slurmctld -D -i -f "$SLURM_CONF" > "$DIR/log/slurmctld.out" 2>&1 &
echo $! > "$DIR/slurmctld.pid"
slurmd -D -N "$HOST" -f "$SLURM_CONF" > "$DIR/log/slurmd.out" 2>&1 &
echo $! > "$DIR/slurmd.pid"
for _ in $(seq 120); do
  if [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
echo "$(basename "$0"): the node is not idle after 60 s ($(sinfo -h -o %T 2>&1)); logs in $DIR/log" >&2
stop
exit 1
