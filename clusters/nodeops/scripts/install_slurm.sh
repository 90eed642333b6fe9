#!/usr/bin/env bash
# install_slurm: munge + slurmd on every node, slurmctld on node-0 (which also computes).
# One partition "gpu" with every node, GPUs as gres. Run on the head first, then workers.
set -euo pipefail

GPUS="${RUNCRATE_GPUS_PER_NODE:?}"
step "check"
check_install_fault slurm

step "config"
{
    printf 'ClusterName=%s\n' "runcrate-${RUNCRATE_CLUSTER_ID:-cluster}"
    printf 'SlurmctldHost=node-0(%s)\n' "${RUNCRATE_HEAD_IP:?}"
    printf 'AuthType=auth/munge\n'
    printf 'GresTypes=gpu\n'
    printf 'ProctrackType=proctrack/cgroup\n'
    printf 'TaskPlugin=task/cgroup,task/affinity\n'
    printf 'SelectType=select/cons_tres\n'
    printf 'SelectTypeParameters=CR_Core_Memory\n'
    printf 'ReturnToService=2\n'
    printf 'SlurmctldPort=6817\nSlurmdPort=6818\n'
    printf 'StateSaveLocation=/var/spool/slurmctld\nSlurmdSpoolDir=/var/spool/slurmd\n'
    for entry in "${CLUSTER_NODES[@]}"; do
        printf 'NodeName=%s NodeAddr=%s Gres=gpu:%s State=UNKNOWN\n' "${entry%% *}" "${entry#* }" "$GPUS"
    done
    printf 'PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n'
} | write_file "$ROOT/etc/slurm/slurm.conf" 0644
if [ "$GPUS" -gt 0 ]; then
    # Explicit device files: Debian's slurmd is not built with NVML autodetection.
    write_file "$ROOT/etc/slurm/gres.conf" 0644 <<<"Name=gpu File=/dev/nvidia[0-$((GPUS - 1))]"
fi

if is_sandbox; then
    step "sandbox-daemons"
    sim_tool sinfo slurm <<'FAKE'
CONF="$ROOT/etc/slurm/slurm.conf"
per_node=0 header=1 format=""
while [ $# -gt 0 ]; do
    case "$1" in
        -N | --Node) per_node=1 ;;
        -h | --noheader) header=0 ;;
        -o | --format) format="$2"; shift ;;
        --format=*) format="${1#--format=}" ;;
        -o*) format="${1#-o}" ;;
        *) ;;
    esac
    shift
done
gres="$(sed -n 's/^NodeName=.* Gres=\([^ ]*\).*/\1/p' "$CONF" | head -n 1)"
state_of() {
    if [ -f "$REGISTRY/$1" ]; then echo idle; else echo 'down*'; fi
}
nodes="$(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF")"
if [ -n "$format" ]; then
    # Field widths (%20N) are accepted and ignored.
    format="$(printf '%s' "$format" | sed 's/%[.0-9-]*\([A-Za-z]\)/%\1/g')"
    if [ "$header" = 1 ]; then
        line="${format//%N/NODELIST}"; line="${line//%T/STATE}"; line="${line//%t/STATE}"
        line="${line//%P/PARTITION}"; line="${line//%G/GRES}"; line="${line//%D/NODES}"
        printf '%s\n' "$line"
    fi
    for node in $nodes; do
        state="$(state_of "$node")"
        line="${format//%N/$node}"; line="${line//%T/$state}"; line="${line//%t/$state}"
        line="${line//%P/gpu*}"; line="${line//%G/$gres}"; line="${line//%D/1}"
        printf '%s\n' "$line"
    done
elif [ "$per_node" = 1 ]; then
    [ "$header" = 1 ] && printf 'NODELIST   NODES PARTITION STATE \n'
    for node in $nodes; do
        printf '%-10s %5s %9s %s \n' "$node" 1 'gpu*' "$(state_of "$node")"
    done
else
    [ "$header" = 1 ] && printf 'PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n'
    for state in idle 'down*'; do
        list=""; count=0
        for node in $nodes; do
            [ "$(state_of "$node")" = "$state" ] || continue
            list="${list:+$list,}$node"; count=$((count + 1))
        done
        [ "$count" -gt 0 ] && printf '%-9s %5s %10s %6s %6s %s\n' 'gpu*' up infinite "$count" "$state" "$list"
    done
    true
fi
FAKE
    sim_register slurm
    log "sandbox: slurm.conf written, slurmd registered with node-0"
else
    step "packages"
    apt-get update -q
    if is_head; then
        apt_install munge slurm-wlm slurmctld slurmd
    else
        apt_install munge slurmd slurm-client
    fi
    step "munge"
    printf '%s' "${RUNCRATE_MUNGE_KEY:?}" | base64 -d | write_file /etc/munge/munge.key 0400
    chown munge:munge /etc/munge/munge.key
    systemctl enable munge
    systemctl restart munge
    step "daemons"
    mkdir -p /var/spool/slurmd /var/spool/slurmctld
    if is_head; then
        chown slurm:slurm /var/spool/slurmctld
        systemctl enable slurmctld
        systemctl restart slurmctld
    fi
    systemctl enable slurmd
    systemctl restart slurmd
    log "slurm installed"
fi
