#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests marked `slurm` (tests/fairtui/test_slurm_real.py):
#
#   bash tests/slurm/cluster.sh start   # installs slurm-wlm and munge where missing (Debian), writes a slurm.conf
#                                       # for this host and its cores, starts munged, slurmctld and slurmd, and
#                                       # waits until sinfo shows the node idle; prints the state folder
#   bash tests/slurm/cluster.sh stop    # stops exactly the daemons `start` started (their pid files)
#   bash tests/slurm/cluster.sh status
#
# Everything lives under $FAIRTUI_SLURM_STATE (default /tmp/fairtui-slurm): the configuration, the daemons' pid
# files, logs and spool. slurm.conf goes to /etc/slurm/slurm.conf (where sbatch, squeue and scancel read it);
# an existing one that `start` did not write is refused, never overwritten. Needs root (the daemons run as root:
# SlurmUser=root), as on the development and CI machines.
set -euo pipefail

STATE=${FAIRTUI_SLURM_STATE:-/tmp/fairtui-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by fairtui's tests/slurm/cluster.sh"
HOST=$(hostname -s)

say() { echo "slurm cluster: $*" >&2; }

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return
    fi
    say "installing slurm-wlm and munge (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || {
        apt-get update -q >/dev/null 2>&1
        apt-get install -y -q slurm-wlm munge >/dev/null
    }
}

write_conf() {
    if [ -f "$CONF" ] && ! grep -q "$MARK" "$CONF"; then
        say "$CONF exists and was not written by this script: not touching a real cluster's configuration"
        exit 2
    fi
    local cpus mem
    # the node's CPUs: at least 8 (config_overrides lets slurmd take more than the machine has), so that a job
    # array's cap, not the cores, is what limits how many of its tiny one-CPU jobs run at once
    cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
    mkdir -p /etc/slurm "$STATE/spool/ctld" "$STATE/spool/d" "$STATE/log"
    cat > "$CONF" <<EOF
$MARK
ClusterName=fairtui-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
ReturnToService=2
# refuse at submission a job no node of the partition can run (too many CPUs), as most sites do; without it
# sbatch accepts the job and it waits for ever (reason PartitionConfig)
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=10
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return  # a munged answers already (the machine's own, or ours): not ours to stop unless its pid file is
    fi
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    fi
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0400 /etc/munge/munge.key
    chmod 0755 /run/munge
    rm -f /run/munge/fairtui-munged.pid
    runuser -u munge -- munged --pid-file=/run/munge/fairtui-munged.pid
    for _ in $(seq 50); do [ -s /run/munge/fairtui-munged.pid ] && break; sleep 0.1; done
    cp /run/munge/fairtui-munged.pid "$STATE/munged.pid"
}

start() {
    install
    mkdir -p "$STATE/log"
    write_conf
    start_munge
    if ! { [ -f "$STATE/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurmctld.pid")" 2>/dev/null; }; then
        slurmctld -i
    fi
    if ! { [ -f "$STATE/slurmd.pid" ] && kill -0 "$(cat "$STATE/slurmd.pid")" 2>/dev/null; }; then
        slurmd
    fi
    for _ in $(seq 120); do
        if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
            say "up: node $HOST idle ($(sinfo -V)); state in $STATE"
            echo "$STATE"
            return 0
        fi
        sleep 0.5
    done
    say "the node did not become idle in 60 s; logs in $STATE/log"
    sinfo >&2 || true
    exit 1
}

stop() {
    for daemon in slurmd slurmctld munged; do
        if [ -f "$STATE/$daemon.pid" ]; then
            pid=$(cat "$STATE/$daemon.pid")
            if kill -0 "$pid" 2>/dev/null; then
                kill "$pid"
                for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            fi
            rm -f "$STATE/$daemon.pid"
        fi
    done
    if [ -f "$CONF" ] && grep -q "$MARK" "$CONF"; then
        rm -f "$CONF"
    fi
    say "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) sinfo ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
