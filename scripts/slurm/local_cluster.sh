#!/usr/bin/env bash
# local_cluster.sh start|stop|status|env: a real single-node Slurm (munge + slurmctld + slurmd)
# on this machine, for the Slurm tests and for trying the sbatch examples. Root only.
#
#   start   installs slurmctld/slurmd/slurm-client/munge if missing (apt, quiet), writes a
#           slurm.conf for this host under the state dir, starts the daemons that are not
#           running yet and waits until the node is usable. Idempotent; concurrent callers
#           serialise on a lock.
#   stop    stops only the daemons this script started (by the pid files in the state dir).
#   status  what runs, and `sinfo`.
#   env     prints `export SLURM_CONF=...`: client commands (srun, sbatch, sinfo) read the
#           config from there: eval "$(scripts/slurm/local_cluster.sh env)".
#
# State dir: $RLPT_SLURM_DIR (default /tmp/rlpt-slurm): etc/slurm.conf, logs, spool, pid files.
# The node advertises $RLPT_SLURM_CPUS CPUs (default 8, or the real count if larger), so
# `srun -n 4` runs on a 2-core machine (SlurmdParameters=config_overrides).
# No systemd and no cgroups are needed (proctrack/linuxproc, task/none). MpiDefault=pmix:
# Debian's Open MPI has no PMI-1/PMI-2, so a plain `srun` must use PMIx.
set -euo pipefail

state="${RLPT_SLURM_DIR:-/tmp/rlpt-slurm}"
conf="$state/etc/slurm.conf"
host="$(hostname -s)"
log() { echo "local_cluster: $*" >&2; }
die() { log "$*"; exit 1; }

# The pid in `file` when that process is alive and runs `name`, else nothing.
live_pid() {
    local file="$1" name="$2" pid
    [ -s "$file" ] || return 1
    pid="$(tr -dc 0-9 <"$file")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ] && echo "$pid"
}

install_packages() {
    local missing=0
    for exe in slurmctld slurmd srun sinfo munged munge; do
        command -v "$exe" >/dev/null 2>&1 || missing=1
    done
    [ "$missing" -eq 0 ] && return 0
    log "installing slurmctld slurmd slurm-client munge (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends \
            slurmctld slurmd slurm-client munge >/dev/null; } || die "apt-get install failed"
}

write_conf() {
    local cpus real_cpus mem_mb
    real_cpus="$(nproc)"
    cpus="${RLPT_SLURM_CPUS:-8}"
    [ "$real_cpus" -gt "$cpus" ] && cpus="$real_cpus"
    mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    mkdir -p "$state/etc" "$state/log" "$state/ctld" "$state/spool"
    local tmp="$conf.tmp.$$"
    cat >"$tmp" <<EOF
# Written by scripts/slurm/local_cluster.sh: one node, root, no cgroups, for tests.
ClusterName=rlptlocal
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
KillWait=10
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=local Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
    if [ -f "$conf" ] && cmp -s "$tmp" "$conf"; then rm -f "$tmp"; else mv "$tmp" "$conf"; fi
}

start_munge() {
    # Reuse a working munged (ours or the system's); start one only when none answers.
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (reinstall munge or run mungekey)"
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- munged --force 9>&-
    for _ in $(seq 1 50); do
        if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
            cp /run/munge/munged.pid "$state/munged.pid"  # ours: stop will end it
            return 0
        fi
        sleep 0.1
    done
    die "munged did not start"
}

node_state() { SLURM_CONF="$conf" sinfo -h -n "$host" -o %T 2>/dev/null | head -1 | tr -d '*~#!%$@^-'; }

start() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (the daemons run as root)"
    install_packages
    mkdir -p "$state"
    exec 9>"$state/lock"
    flock -w 120 9 || die "timed out waiting for $state/lock"
    write_conf
    start_munge
    if ! live_pid "$state/slurmctld.pid" slurmctld >/dev/null; then
        rm -f "$state/slurmctld.pid"
        # 9>&-: the daemons must not inherit the lock's descriptor (they would hold the lock).
        slurmctld -c -f "$conf" 9>&- || die "slurmctld failed to start (see $state/log/slurmctld.log)"
    fi
    if ! live_pid "$state/slurmd.pid" slurmd >/dev/null; then
        rm -f "$state/slurmd.pid"
        SLURM_CONF="$conf" slurmd -f "$conf" 9>&- || die "slurmd failed to start (see $state/log/slurmd.log)"
    fi
    local s=""
    for _ in $(seq 1 300); do
        s="$(node_state)"
        case "$s" in
            idle|mixed|allocated|completing) log "node $host is $s (SLURM_CONF=$conf)"; return 0;;
            down|drained|draining|fail|failing)
                SLURM_CONF="$conf" scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true;;
        esac
        sleep 0.1
    done
    die "node $host is not usable after 30 s (state '$s'); see $state/log/"
}

stop_one() {
    local name="$1" file="$2" pid
    pid="$(live_pid "$file" "$name")" || { rm -f "$file"; return 0; }
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        [ -d "/proc/$pid" ] || { rm -f "$file"; log "stopped $name ($pid)"; return 0; }
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$file"
    log "killed $name ($pid) after 10 s"
}

stop() {
    [ -d "$state" ] || return 0
    exec 9>"$state/lock"
    flock -w 120 9 || die "timed out waiting for $state/lock"
    stop_one slurmd "$state/slurmd.pid"
    stop_one slurmctld "$state/slurmctld.pid"
    stop_one munged "$state/munged.pid"
}

status() {
    local name pid rc=0
    for name in munged slurmctld slurmd; do
        if pid="$(live_pid "$state/$name.pid" "$name")"; then
            echo "$name: running (pid $pid, started by this script)"
        else
            echo "$name: not started by this script"
            [ "$name" = munged ] || rc=1
        fi
    done
    [ -f "$conf" ] && SLURM_CONF="$conf" sinfo 2>/dev/null || true
    return $rc
}

case "${1:-}" in
    start) start;;
    stop) stop;;
    status) status;;
    env) echo "export SLURM_CONF=$conf";;
    *) echo "usage: $0 start|stop|status|env" >&2; exit 2;;
esac
