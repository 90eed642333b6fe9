#!/usr/bin/env bash
# install_slurm: munge + slurmd on every node, slurmctld on node-0 (which also computes).
# One partition "gpu" with every node, GPUs as gres. Run on the head first, then workers.
set -euo pipefail

GPUS="${RUNCRATE_GPUS_PER_NODE:?}"
step "check"
check_install_fault slurm

step "config"
# Debian's slurmd is not built with NVML autodetection: GPUs are listed as device files, and
# only those the machine has (a machine without /dev/nvidia* declares none).
DEVICES=0
if ! is_sandbox; then
    for device in /dev/nvidia[0-9]*; do
        [ -e "$device" ] && DEVICES=$((DEVICES + 1))
    done
    [ "$DEVICES" -ge "$GPUS" ] || log "found $DEVICES of $GPUS GPU devices; Slurm lists $DEVICES"
    [ "$DEVICES" -le "$GPUS" ] || DEVICES="$GPUS"
else
    DEVICES="$GPUS"
fi
# The node's real CPUs and memory, as slurmd itself measures them (`slurmd -C`): without them
# Slurm assumes 1 CPU and 1 MB, and refuses -n2, -c2 and --mem. Every node of a cluster is the
# same machine type and writes the same line for every node, from its own figures. Memory is
# rounded down to a whole GiB less 5%, so two machines of one type whose kernels keep a few MB
# more or less write the same slurm.conf, and none has less than Slurm was told (it would drain
# the node, "Low RealMemory").
CPUS=1 MEMORY=1
if is_sandbox; then
    CPUS=2 MEMORY=4096
elif hardware="$(slurmd -C 2>/dev/null)"; then
    for field in $hardware; do
        case "$field" in
            CPUs=*) CPUS="${field#CPUs=}" ;;
            RealMemory=*) MEMORY="${field#RealMemory=}" ;;
            *) ;;
        esac
    done
fi
# In a container the kernel reports the host's memory; what the node may use is its cgroup's
# limit (a job past it would be killed by the kernel, not refused by Slurm).
for limit_file in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do
    limit=""
    [ ! -r "$limit_file" ] || read -r limit <"$limit_file" || true
    case "$limit" in
        '' | max | *[!0-9]*) ;;
        *) [ $((limit / 1048576)) -ge "$MEMORY" ] || MEMORY=$((limit / 1048576)) ;;
    esac
done
if [ "$MEMORY" -ge 2048 ]; then
    MEMORY=$(((MEMORY * 95 / 100) / 1024 * 1024))
fi
# A task that asks for no memory gets its share of the node's (else it would hold all of it
# and a second job could not start beside it).
DEF_MEM_PER_CPU=$((MEMORY / CPUS))

# With systemd, jobs are tracked and confined in cgroups it delegates; without it (a
# container, real nodes on one computer) by their process tree.
if has_systemd || is_sandbox; then
    PROCTRACK=proctrack/cgroup TASK=task/cgroup,task/affinity
else
    PROCTRACK=proctrack/linuxproc TASK=task/none
fi
# Built in a variable, not a pipeline: write_file then runs in this shell (no subshell, so the
# file helper's pipes are there).
slurm_conf="$(
    printf 'ClusterName=%s\n' "runcrate-${RUNCRATE_CLUSTER_ID:-cluster}"
    printf 'SlurmctldHost=node-0(%s)\n' "${RUNCRATE_HEAD_IP:?}"
    printf 'AuthType=auth/munge\n'
    printf 'GresTypes=gpu\n'
    printf 'ProctrackType=%s\n' "$PROCTRACK"
    printf 'TaskPlugin=%s\n' "$TASK"
    printf 'SelectType=select/cons_tres\n'
    printf 'SelectTypeParameters=CR_Core_Memory\n'
    printf 'ReturnToService=2\n'
    printf 'SlurmctldPort=6817\nSlurmdPort=6818\n'
    printf 'StateSaveLocation=/var/spool/slurmctld\nSlurmdSpoolDir=/var/spool/slurmd\n'
    printf 'SlurmctldPidFile=/run/slurmctld.pid\nSlurmdPidFile=/run/slurmd.pid\n'
    printf 'SlurmctldLogFile=/var/log/slurm/slurmctld.log\nSlurmdLogFile=/var/log/slurm/slurmd.log\n'
    # Accounting: slurmctld sends every job to slurmdbd on node-0, whose database is MariaDB on
    # node-0; `sacct` on any node asks slurmdbd over the private network (docs/nodeops.md "Slurm").
    if ! is_sandbox; then
        printf 'AccountingStorageType=accounting_storage/slurmdbd\n'
        printf 'AccountingStorageHost=%s\nAccountingStoragePort=6819\n' "$RUNCRATE_HEAD_IP"
    fi
    printf 'JobAcctGatherType=jobacct_gather/linux\n'
    printf 'DefMemPerCPU=%s\n' "$DEF_MEM_PER_CPU"
    # Each task gets its node's NODE_RANK/NODE_NAME/NODE_ADDR, not the submitting shell's.
    printf 'TaskProlog=/etc/slurm/runcrate-task-prolog.sh\n'
    for entry in "${CLUSTER_NODES[@]}"; do
        if [ "$DEVICES" -gt 0 ]; then
            printf 'NodeName=%s NodeAddr=%s CPUs=%s RealMemory=%s Gres=gpu:%s State=UNKNOWN\n' \
                "${entry%% *}" "${entry#* }" "$CPUS" "$MEMORY" "$DEVICES"
        else
            printf 'NodeName=%s NodeAddr=%s CPUs=%s RealMemory=%s State=UNKNOWN\n' \
                "${entry%% *}" "${entry#* }" "$CPUS" "$MEMORY"
        fi
    done
    printf 'PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n'
)"
write_file "$ROOT/etc/slurm/slurm.conf" 0644 "$slurm_conf"$'\n'
# A TaskProlog's `export NAME=value` lines become the task's environment.
write_file "$ROOT/etc/slurm/runcrate-task-prolog.sh" 0755 <<'PROLOG'
#!/bin/sh
# Written by Runcrate: this node's place in the cluster (NODE_RANK, NODE_NAME, NODE_ADDR) for
# every Slurm task, where srun and sbatch would pass on the submitting node's. Read by the
# shell itself: a task starts one program less.
while IFS= read -r line; do printf '%s\n' "$line"; done </etc/runcrate/node.env
PROLOG
if [ "$DEVICES" -gt 0 ]; then
    write_file "$ROOT/etc/slurm/gres.conf" 0644 "Name=gpu File=/dev/nvidia[0-$((DEVICES - 1))]"$'\n'
else
    [ ! -e "$ROOT/etc/slurm/gres.conf" ] || file_op rm "$ROOT/etc/slurm/gres.conf"
fi

# start_accounting: MariaDB (on its socket only) and slurmdbd on the head, and the cluster
# registered with it, before slurmctld starts and sends it jobs. Idempotent: a retried install
# keeps the jobs already recorded.
start_accounting() {
    step "accounting"
    apt_install mariadb-server slurmdbd
    # Sized for a head that also computes: Slurm's database of one cluster is small.
    write_file /etc/mysql/mariadb.conf.d/60-runcrate-slurm.cnf 0644 <<'CNF'
# Written by Runcrate: MariaDB for Slurm's accounting (slurmdbd), reached on its socket only.
[mysqld]
skip-networking
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
innodb_lock_wait_timeout=900
performance_schema=OFF
max_connections=32
CNF
    mkdir -p /run/mysqld
    chown mysql:mysql /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --skip-test-db >/dev/null
    service_start mariadb /run/mysqld/mysqld.pid \
        start-stop-daemon --start --background --chuid mysql --exec /usr/sbin/mariadbd -- \
        --pid-file=/run/mysqld/mysqld.pid --log-error=/var/log/mysql/error.log
    local waited=0
    until mariadb -e 'SELECT 1' >/dev/null 2>&1; do
        [ "$waited" -lt 300 ] || die "the accounting database did not start: $(tail -n 3 /var/log/mysql/error.log 2>/dev/null)"
        sleep 0.2
        waited=$((waited + 1))
    done
    # slurmdbd runs as the slurm user and signs in over the socket as that user: no password.
    mariadb <<'SQL'
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
    mkdir -p /run/slurmdbd
    chown slurm:slurm /run/slurmdbd
    {
        printf 'AuthType=auth/munge\n'
        printf 'DbdHost=%s\nDbdPort=6819\n' "$NODE_NAME"
        printf 'SlurmUser=slurm\n'
        printf 'PidFile=/run/slurmdbd/slurmdbd.pid\nLogFile=/var/log/slurm/slurmdbd.log\n'
        printf 'StorageType=accounting_storage/mysql\nStorageHost=localhost\nStorageUser=slurm\n'
        printf 'StorageLoc=slurm_acct_db\n'
    } | write_file /etc/slurm/slurmdbd.conf 0600
    chown slurm:slurm /etc/slurm/slurmdbd.conf
    service_start slurmdbd /run/slurmdbd/slurmdbd.pid slurmdbd
    waited=0
    until sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1; do
        [ "$waited" -lt 150 ] || die "slurmdbd did not answer: $(tail -n 3 /var/log/slurm/slurmdbd.log 2>/dev/null)"
        sleep 0.2
        waited=$((waited + 1))
    done
    local name
    name="$(sed -n 's/^ClusterName=//p' /etc/slurm/slurm.conf)"
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$name"; then
        sacctmgr -i add cluster "$name" >/dev/null
    fi
    log "slurmdbd keeps the jobs of $name in MariaDB on $NODE_NAME"
}

if is_sandbox; then
    step "sandbox-daemons"
    standin_install slurm
    log "sandbox: slurm.conf written, slurmd registered with node-0"
else
    if is_reconfigure; then
        # A worker was added: every live node takes the new slurm.conf, then the controller
        # re-reads it and tells every slurmd to. Running jobs keep running.
        if is_head; then
            step "reconfigure"
            known="$(scontrol show nodes -o | grep -c '^NodeName=' || true)"
            if [ "$known" != "$NODE_COUNT" ]; then
                # Slurm before 23.11 cannot change its node count on `scontrol reconfigure`
                # ("MaxNodeCount has changed, slurmctld must be restarted"). A controller
                # restart keeps every job: they run under slurmd/slurmstepd on the nodes and
                # slurmctld recovers them from its state directory.
                service_restart slurmctld /run/slurmctld.pid slurmctld
                waited=0
                until scontrol ping >/dev/null 2>&1; do
                    [ "$waited" -lt 100 ] || die "slurmctld did not answer after its restart"
                    sleep 0.2
                    waited=$((waited + 1))
                done
                log "slurmctld restarted with $NODE_COUNT nodes (was $known); running jobs kept"
            fi
            scontrol reconfigure
            log "slurm.conf has $NODE_COUNT nodes; every slurmd reconfigured"
        else
            log "slurm.conf has $NODE_COUNT nodes"
        fi
        exit 0
    fi
    step "packages"
    if is_head; then
        apt_install munge slurmctld slurmd slurm-client
    else
        apt_install munge slurmd slurm-client
    fi
    step "munge"
    file_op b64file /etc/munge/munge.key "${RUNCRATE_MUNGE_KEY:?}" || die "the munge key is not valid base64"
    key_changed="$FILE_REPLY"
    file_op mkdir /run/munge /var/lib/munge /var/log/munge
    file_op chown munge:munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
    if [ "$key_changed" = changed ]; then
        service_restart munge /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
    else
        service_start munge /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
    fi
    step "daemons"
    file_op mkdir /var/spool/slurmd /var/spool/slurmctld /var/log/slurm
    if is_head; then
        file_op chown slurm:slurm /var/spool/slurmctld /var/log/slurm
        start_accounting
        service_restart slurmctld /run/slurmctld.pid slurmctld
    fi
    service_restart slurmd /run/slurmd.pid slurmd
    node_record=""
    is_head || node_record="$(scontrol show node "$NODE_NAME" 2>/dev/null || true)"
    if [[ "$node_record" == *"Reason=being replaced"* ]]; then
        # This machine takes over a node drained for its replacement (drain.sh). The jobs the old
        # machine still ran end now, as the replacement's event said: slurmctld would otherwise
        # count them on this machine until it noticed they are gone. Then the node takes work.
        scancel --nodelist="$NODE_NAME" --state=RUNNING || true
        waited=0
        while [ -n "$(squeue -h -w "$NODE_NAME" -o %i 2>/dev/null)" ] && [ "$waited" -lt 150 ]; do
            sleep 0.2
            waited=$((waited + 1))
        done
        scontrol update NodeName="$NODE_NAME" State=RESUME
        log "$NODE_NAME resumed: this machine has taken it over"
    fi
    log "slurm installed: slurmctld on node-0, slurmd on $NODE_NAME"
fi
