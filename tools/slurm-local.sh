#!/usr/bin/env bash
# A throwaway Slurm cluster on this one host (Debian bookworm packages, Slurm 22.05), run as plain background
# processes as root, without systemd.          slurm-local.sh start|stop|status|env
#
# Env (all optional):
#   SLURM_LOCAL_DIR      state, logs, pid files, slurm.conf              (default /tmp/slurm-local)
#   SLURM_LOCAL_NODES    number of slurmd "nodes" on this host            (default 1)
#   SLURM_LOCAL_PORT     slurmctld port; slurmd i listens on PORT+i, slurmdbd on PORT+50, MariaDB on PORT+51 (6817)
#   SLURM_LOCAL_CPUS     CPUs each node advertises (may exceed the real count)   (default: nproc)
#   SLURM_LOCAL_MEM_MB   memory each node advertises                     (default 4000)
#   SLURM_LOCAL_GPUS     fake GPUs (GRES gpu backed by /dev/null look-alikes) per node  (default 0)
#   SLURM_LOCAL_ACCT     none | slurmdbd (private MariaDB + slurmdbd, so that sacct works)  (default none)
#   SLURM_LOCAL_CRED_EXPIRE  seconds a requeued job waits before it may start again; minimum 5  (default 5)
#   SLURM_LOCAL_FIRST_JOB_ID (default 1)
#   SLURM_LOCAL_GRACE    GraceTime (s) of a preempted job in partition debug (default 30)
# Clients find the cluster through SLURM_CONF=$SLURM_LOCAL_DIR/slurm.conf (`slurm-local.sh env` prints it).
set -euo pipefail
D=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
NODES=${SLURM_LOCAL_NODES:-1}
# Node names end up in SLURM_JOB_NODELIST, hence in submitit's JobEnvironment.hostnames, and code connects to
# hostnames[0]: loopback addresses resolve without /etc/hosts entries and sort in order.
read -r -a NAMES <<< "${SLURM_LOCAL_NODE_NAMES:-$(seq -s ' ' -f '127.0.0.%g' 1 "$NODES")}"
PORT=${SLURM_LOCAL_PORT:-6817}
CPUS=${SLURM_LOCAL_CPUS:-$(nproc)}
MEM=${SLURM_LOCAL_MEM_MB:-4000}
GPUS=${SLURM_LOCAL_GPUS:-0}
ACCT=${SLURM_LOCAL_ACCT:-none}
CRED_EXPIRE=${SLURM_LOCAL_CRED_EXPIRE:-5}
FIRST_JOB_ID=${SLURM_LOCAL_FIRST_JOB_ID:-1}
DBD_PORT=$((PORT + 50)); DB_PORT=$((PORT + 51))
CONF=$D/slurm.conf
export SLURM_CONF=$CONF

running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st#Z}" = "$st" ]; }  # zombies are dead:
alive() { [ -s "$1" ] && running "$(cat "$1")"; }   # PID 1 here (no init/systemd) may reap them late
wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local n=$(( $1 * 10 )) what=$2; shift 2
  until "$@" > /dev/null 2>&1; do
    n=$((n - 1)); [ $n -gt 0 ] || { echo "slurm-local: $what did not come up; logs in $D/log" >&2; return 1; }
    sleep 0.1
  done
}

write_conf() {
  local i gres=""
  {
    cat <<EOF
ClusterName=local
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=$CRED_EXPIRE
FirstJobId=$FIRST_JOB_ID
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MinJobAge=600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
EOF
    if [ "$ACCT" = slurmdbd ]; then
      echo "AccountingStorageType=accounting_storage/slurmdbd"
      echo "AccountingStorageHost=localhost"
      echo "AccountingStoragePort=$DBD_PORT"
    else
      echo "AccountingStorageType=accounting_storage/none"
    fi
    if [ "$GPUS" -gt 0 ]; then echo "GresTypes=gpu"; gres="Gres=gpu:$GPUS"; fi
    for i in $(seq 1 "$NODES"); do
      echo "NodeName=${NAMES[$((i - 1))]} NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + i))" \
           "CPUs=$CPUS RealMemory=$MEM $gres State=UNKNOWN"
    done
    # jobs in "high" preempt (requeue) jobs in "debug"; the victim first gets its --signal (submitit: USR2) and
    # GraceTime seconds to act on it: without a grace time Slurm requeues it at once, and the scontrol requeue
    # that submitit then runs fails ("Job is pending execution"), which submitit reports as a failed job
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=${SLURM_LOCAL_GRACE:-30}"
    echo "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF"
  } > "$CONF.tmp"
  : > "$D/gres.conf"
  if [ "$GPUS" -gt 0 ]; then   # a gpu GRES needs device files (Count= alone is reported as 0): /dev/null clones
    mkdir -p "$D/dev"
    for i in $(seq 0 $((GPUS - 1))); do [ -c "$D/dev/gpu$i" ] || mknod "$D/dev/gpu$i" c 1 3; done
    echo "Name=gpu File=$D/dev/gpu[0-$((GPUS - 1))]" > "$D/gres.conf"
  fi
  mv "$CONF.tmp" "$CONF"
}

start_munge() {  # Debian's own munged (the slurmdbd connection ignores AuthInfo=socket=, so use the default one)
  if munge -n > /dev/null 2>&1; then return 0; fi          # already served, by the system or an earlier start
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; }
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged                     # as root it refuses the munge-owned default log file
  wait_for 5 munged munge -n
  cp /run/munge/munged.pid "$D/run/munged.pid"             # ours to stop
}

start_dbd() {
  [ -d "$D/db/mysql" ] || mariadb-install-db --user=root --datadir="$D/db" --auth-root-authentication-method=socket \
                            --skip-test-db > "$D/log/mariadb-install.log" 2>&1
  if ! alive "$D/run/mariadb.pid"; then
    (mariadbd --no-defaults --user=root --datadir="$D/db" --socket="$D/run/mysql.sock" --port="$DB_PORT" \
       --bind-address=127.0.0.1 --skip-name-resolve --innodb-buffer-pool-size=32M --pid-file="$D/run/mariadb.pid" \
       --log-error="$D/log/mariadb.log" < /dev/null > /dev/null 2>&1 &)
    wait_for 30 mariadb mariadb --no-defaults -S "$D/run/mysql.sock" -e 'select 1'
    mariadb --no-defaults -S "$D/run/mysql.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  fi
  cat > "$D/slurmdbd.conf" <<EOF
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
AuthType=auth/munge
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=$D/run/slurmdbd.pid
LogFile=$D/log/slurmdbd.log
EOF
  chmod 600 "$D/slurmdbd.conf"                 # slurmdbd refuses a config that others can read
  alive "$D/run/slurmdbd.pid" || slurmdbd      # reads slurmdbd.conf from the directory of $SLURM_CONF
  wait_for 30 slurmdbd sacctmgr -n list cluster
  sacctmgr -n -P list cluster format=cluster | grep -qx local || sacctmgr -i add cluster local > /dev/null
}

all_nodes_up() { [ "$(sinfo -h -N -p debug -o '%t' | grep -cE '^(idle|mix|alloc)$')" -eq "$NODES" ]; }

start() {
  if alive "$D/run/slurmctld.pid" && scontrol ping > /dev/null 2>&1 && all_nodes_up 2>/dev/null; then
    echo "slurm-local: already up; export SLURM_CONF=$CONF"; return 0
  fi
  mkdir -p "$D"/{state,log,run}
  for n in "${NAMES[@]}"; do mkdir -p "$D/spool/$n"; done
  write_conf
  start_munge
  if [ "$ACCT" = slurmdbd ]; then start_dbd; fi
  alive "$D/run/slurmctld.pid" || slurmctld -c     # -c: forget the jobs and node states of an earlier run
  for n in "${NAMES[@]}"; do alive "$D/run/slurmd-$n.pid" || slurmd -N "$n"; done
  wait_for 30 "the nodes" all_nodes_up
  echo "slurm-local: up; export SLURM_CONF=$CONF"
}

stop_pid_file() {
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do running "$pid" || break; sleep 0.1; done
    running "$pid" && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop() {
  if alive "$D/run/slurmctld.pid"; then         # cancel what still runs, so that no job outlives the daemons
    scancel -u "$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for f in "$D"/run/slurmd-*.pid "$D/run/slurmctld.pid" "$D/run/slurmdbd.pid" "$D/run/mariadb.pid" \
           "$D/run/munged.pid"; do
    stop_pid_file "$f"
  done
  echo "slurm-local: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) scontrol ping && sinfo -N ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
