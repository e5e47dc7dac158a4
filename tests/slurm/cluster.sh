#!/usr/bin/env bash
# A throw-away one-host Slurm cluster for the tests: its own munge key and socket, its own
# slurm.conf, spool, state and log directories under DIR, its own ports; daemons started by
# hand as root (no systemd) and stopped by PID.
#
#   tests/slurm/cluster.sh start DIR   writes DIR/slurm.conf, starts munged, slurmctld, slurmd,
#                                      waits until the node is idle (bounded)
#   tests/slurm/cluster.sh stop DIR    stops slurmd, then slurmctld, then munged
#
# Clients reach it with SLURM_CONF=DIR/slurm.conf. Without the Slurm binaries `start` writes
# DIR/absent (the tests then fail, saying why: scripts/setup.sh installs Slurm) and succeeds.
set -euo pipefail

cmd=${1:?usage: cluster.sh start|stop DIR}
dir=${2:?usage: cluster.sh start|stop DIR}
say() { printf '[slurm-cluster] %s\n' "$*" >&2; }
sbin_path() { PATH=$PATH:/usr/sbin:/sbin command -v "$1" || true; }

# Stops the daemon whose PID file is $1: SIGTERM, then SIGKILL after a bounded wait.
stop_pid() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { say "pid $pid ignored SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$file"
}

stop() {
  # slurmd first: a slurmd that cannot reach its controller ignores SIGTERM.
  stop_pid "$dir/run/slurmd.pid"
  # The controller and munge are independent of each other: stopped together.
  stop_pid "$dir/run/slurmctld.pid" & stop_pid "$dir/run/munged.pid"
  wait
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { say "unknown command $cmd"; exit 2; }

munged=$(sbin_path munged); slurmctld=$(sbin_path slurmctld); slurmd=$(sbin_path slurmd)
stop 2>/dev/null || true
rm -rf "$dir"; mkdir -p "$dir"
if [ -z "$munged" ] || [ -z "$slurmctld" ] || [ -z "$slurmd" ] || ! command -v sbatch >/dev/null; then
  echo "munged, slurmctld, slurmd or sbatch is not installed (scripts/setup.sh installs them)" > "$dir/absent"
  say "$(cat "$dir/absent")"; exit 0
fi
[ "$(id -u)" = 0 ] || { say "slurmd must run as root to start jobs"; exit 1; }
mkdir -p "$dir"/{run,log,spool/ctld,spool/d,munge}
chmod 700 "$dir/munge"

# Two free TCP ports next to each other, away from Slurm's defaults (6817/6818).
in_use() { awk -v p="$(printf ':%04X' "$1")" 'substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
port=$((20000 + RANDOM % 20000))
while in_use "$port" || in_use $((port + 1)); do port=$((20000 + RANDOM % 20000)); done

dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
"$munged" --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log"

cat > "$dir/slurm.conf" <<CONF
ClusterName=sweeptest
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
MinJobAge=300
KillWait=5
GresTypes=gpu
NodeName=localhost CPUs=8 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
# Two fake GPUs: existing character devices (regular files or Count= alone do not work).
cat > "$dir/gres.conf" <<CONF
AutoDetect=off
Name=gpu File=/dev/null
Name=gpu File=/dev/zero
CONF


export SLURM_CONF=$dir/slurm.conf
"$slurmctld" -f "$dir/slurm.conf" -i
"$slurmd" -f "$dir/slurm.conf"
for _ in $(seq 100); do
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && { say "up in $dir (ports $port, $((port + 1)))"; exit 0; }
  sleep 0.2
done
say "the node did not become idle within 20 s (state: ${state:-no answer}); logs:"
tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
stop
exit 1
