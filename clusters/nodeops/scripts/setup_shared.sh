#!/usr/bin/env bash
# setup_shared: the job environment every node needs.
#
# vm / bare_metal: the head exports /shared over NFS to the private network, workers
#   mount it (sshfs where the kernel has no NFS: real nodes on one computer); the hostfiles and runcrate.env are written into /shared by the head.
#   Sandbox mode simulates the mount: a worker's $ROOT/shared is a symlink to the head's
#   $ROOT/shared (both roots live on the same computer).
# container: no shared folder; each node keeps its own disk and gets its own copy of the
#   hostfiles and runcrate.env in /etc/runcrate.
# nccl.env (in /shared, or /etc/runcrate on containers): NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
#   set to the interface that carries the node's 10.77.0.x address, socket settings for it.
#
# Every kind: /etc/runcrate/node.env holds this node's NODE_RANK, NODE_NAME, NODE_ADDR.
set -euo pipefail

KIND="${RUNCRATE_MACHINE_KIND:?}"
GPUS="${RUNCRATE_GPUS_PER_NODE:?}"
HEAD_IP="${RUNCRATE_HEAD_IP:?}"
COUNT="$NODE_COUNT"
# Where the kernel has no NFS client, workers mount the head's /shared with sshfs, tuned to
# reach at least half the head's own disk speed (docs/nodeops.md "/shared"): SSH straight to
# the head's underlay address, whose own encryption (AES-GCM, with the CPU's AES instructions)
# protects the data, rather than through wg0 (userspace WireGuard cannot carry more than a
# fraction of a disk's speed, and would encrypt everything twice); the head's key checked under
# its name, node-0, against the managed known hosts; several SSH connections for files read and
# written at once; reads and writes in 256 KiB requests (OpenSSH's sftp-server's largest).
# KexAlgorithms: the default post-quantum exchange (sntrup761x25519) costs ~40 ms of CPU on
# each side per connection, and every worker opens its connections to the head at once.
HEAD_ENDPOINT="${RUNCRATE_HEAD_ENDPOINT:-$HEAD_IP}"
SSHFS_OPTIONS="allow_other,reconnect,ServerAliveInterval=15,IdentityFile=/root/.ssh/id_ed25519"
SSHFS_OPTIONS+=",HostKeyAlias=node-0,StrictHostKeyChecking=yes,GlobalKnownHostsFile=/etc/ssh/ssh_known_hosts"
SSHFS_OPTIONS+=",UserKnownHostsFile=/dev/null,KexAlgorithms=curve25519-sha256,Ciphers=aes128-gcm@openssh.com"
SSHFS_OPTIONS+=",Compression=no,max_conns=4,max_read=261120,max_write=261120"

# shared_mounted TYPE...: the top mount on /shared is of one of these types. /shared may be a
# mount point of its own already (a local disk; a node's own folder on one computer), so
# "something is mounted there" is not enough. Read from the mount table, never by stat: a
# dead network mount would hang it.
shared_mounted() {
    local top="" point type want
    while read -r _ point type _; do
        [ "$point" != /shared ] || top="$type"
    done </proc/mounts
    for want in "$@"; do
        [ "$top" != "$want" ] || return 0
    done
    return 1
}

# The rank is the node's place in the cluster's node list, so ranks stay 0..N-1 even when a
# worker that never came up left its index unused.
NODE_RANK=0
for entry in "${CLUSTER_NODES[@]}"; do
    [ "${entry%% *}" = "$NODE_NAME" ] && break
    NODE_RANK=$((NODE_RANK + 1))
done

step "node-env"
write_file "$STATE_DIR/node.env" 0644 "export NODE_RANK=$NODE_RANK
export NODE_NAME=$NODE_NAME
export NODE_ADDR=$RUNCRATE_PRIVATE_IP
"

# write_job_files DIR: hostfiles (OpenMPI and DeepSpeed read the same "name slots=G"
# format) and the cluster-wide env file.
write_job_files() {
    local dir="$1" hostfile_path
    if [ "$dir" = "$STATE_DIR" ]; then
        hostfile_path=/etc/runcrate/hostfile
    else
        hostfile_path=/shared/hostfile
    fi
    local hostfile="" entry
    for entry in "${CLUSTER_NODES[@]}"; do
        hostfile+="${entry%% *} slots=$GPUS"$'\n'
    done
    write_file "$dir/hostfile" 0644 "$hostfile"
    write_file "$dir/hostfile.deepspeed" 0644 "$hostfile"
    cluster_env "$hostfile_path"
    write_file "$dir/runcrate.env" 0644 "$CLUSTER_ENV"
}

# cluster_env HOSTFILE: CLUSTER_ENV is the cluster-wide variables, as `export` lines.
cluster_env() {
    CLUSTER_ENV="\
export RUNCRATE_CLUSTER_ID=${RUNCRATE_CLUSTER_ID:-}
export NNODES=$COUNT
export NODE_NAMES=$(joined 1 ,)
export NODE_ADDRS=$(joined 2 ,)
export MASTER_ADDR=$HEAD_IP
export MASTER_PORT=29500
export GPUS_PER_NODE=$GPUS
export WORLD_SIZE=$((COUNT * GPUS))
export RUNCRATE_HOSTFILE=$1
"
}

# private_interface: PRIVATE_INTERFACE is the interface that carries this node's 10.77.0.x
# address (wg0 once the node joined; sandbox nodes have none and get the name it has on a
# real machine). One `ip` a run.
private_interface() {
    local _index name _family address _rest
    [ -z "${PRIVATE_INTERFACE:-}" ] || return 0
    if is_sandbox; then
        PRIVATE_INTERFACE=wg0
        return
    fi
    while read -r _index name _family address _rest; do
        if [ "${address%/*}" = "$RUNCRATE_PRIVATE_IP" ]; then
            PRIVATE_INTERFACE="$name"
            return
        fi
    done < <(ip -o -4 addr show 2>/dev/null || true)
    die "no interface carries $RUNCRATE_PRIVATE_IP: the private network is not up"
}

# write_nccl_env PATH: NCCL and Gloo over the private network, with socket settings for an
# encrypted overlay on Ethernet (no InfiniBand: a self-serve offer never has one).
write_nccl_env() {
    local text
    private_interface
    printf -v text '# Written by Runcrate: collective traffic over the cluster private network (%s,\n# %s). Every shell has it already; source %s where one does not.\n' \
        "$PRIVATE_INTERFACE" "${RUNCRATE_NETWORK:-10.77.0.0/24}" "$2"
    nccl_env "$PRIVATE_INTERFACE"
    write_file "$1" 0644 "$text$NCCL_ENV"
}

# nccl_env INTERFACE: NCCL_ENV is the NCCL and Gloo settings as `export` lines.
nccl_env() {
    local ib_disable=0
    case "${RUNCRATE_INTERCONNECT:-eth}" in
        eth*) ib_disable=1 ;;
        *) ;;
    esac
    NCCL_ENV="\
export NCCL_SOCKET_IFNAME=$1
export GLOO_SOCKET_IFNAME=$1
export NCCL_SOCKET_FAMILY=AF_INET
export NCCL_IB_DISABLE=$ib_disable
# Several TCP streams per peer: one stream over WireGuard is bound by one core's encryption.
export NCCL_SOCKET_NTHREADS=4
export NCCL_NSOCKS_PERTHREAD=4
"
}

# write_shell_env HOSTFILE: /etc/runcrate/env.sh, everything a job needs, read by every shell
# on the node: interactive, login, `ssh node cmd` (bash reads /etc/bash.bashrc for a command
# sshd runs, and the block goes above its "not interactive: return" line), and Slurm jobs
# (install_slurm's TaskProlog). A copy of its own on every node: a shell never waits on /shared.
write_shell_env() {
    local text
    private_interface
    cluster_env "$1"
    nccl_env "$PRIVATE_INTERFACE"
    printf -v text '# Written by Runcrate: this node and its cluster. Every shell reads it.\nexport NODE_RANK=%s NODE_NAME=%s NODE_ADDR=%s\n' \
        "$NODE_RANK" "$NODE_NAME" "$RUNCRATE_PRIVATE_IP"
    text+="$CLUSTER_ENV$NCCL_ENV"
    # Open MPI over the private network only (its TCP transport and its daemons' wire-up
    # would otherwise also use the unencrypted underlay), as root: docs/nodeops.md.
    text+="export OMPI_MCA_btl_tcp_if_include=$PRIVATE_INTERFACE OMPI_MCA_oob_tcp_if_include=$PRIVATE_INTERFACE
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"
    if [ "${RUNCRATE_SOFTWARE:-none}" = ray ]; then
        text+="export RAY_ADDRESS=$HEAD_IP:6379"$'\n'
    fi
    # Ray's own virtualenv last on PATH: `ray` is found, `python` stays the system's.
    # shellcheck disable=SC2016 # expanded by the shell that reads the file
    text+='case ":$PATH:" in *:/opt/ray/bin:*) ;; *) [ ! -d /opt/ray/bin ] || PATH="$PATH:/opt/ray/bin" ;; esac'$'\n'
    write_file "$STATE_DIR/env.sh" 0644 "$text"
    local hook='[ ! -r /etc/runcrate/env.sh ] || . /etc/runcrate/env.sh'
    write_file "$ROOT/etc/profile.d/runcrate.sh" 0644 "$hook"$'\n'
    managed_block_first "$ROOT/etc/bash.bashrc" environment "$hook"
}

step "packages"
# How this node serves or mounts /shared: "nfs-server" (the head, with a kernel NFS server),
# "nfs" (a worker, with a kernel NFS client), "sshfs" (a worker without one), or nothing.
share=""
if ! is_sandbox && [ "$KIND" != container ]; then
    if is_head; then
        if kernel_has nfsd; then share=nfs-server; fi
    elif kernel_has nfs; then
        share=nfs
    else
        share=sshfs
    fi
fi
# What the Connect card's lines call on every node (python, Open MPI, mpi4py) and what /shared
# needs here, in one apt_install: one read of dpkg's status file.
if ! is_sandbox; then
    packages=(python3 python-is-python3 openmpi-bin python3-mpi4py)
    case "$share" in
        nfs-server) packages+=(nfs-kernel-server) ;;
        nfs) packages+=(nfs-common) ;;
        sshfs) packages+=(sshfs) ;;
        *) ;;
    esac
    apt_install "${packages[@]}"
fi

# mpi-rank-env COMMAND...: the Connect card's mpirun line starts each rank through it, so a
# PyTorch program's env:// rendezvous finds the variables torchrun would have set, taken from
# Open MPI's own (docs/nodeops.md, "Launch lines").
step "mpi-rank-env"
write_file "$ROOT/usr/local/bin/mpi-rank-env" 0755 <<'WRAPPER'
#!/bin/sh
# Written by Runcrate: runs COMMAND as one rank of an Open MPI job (`mpirun ... mpi-rank-env
# python train.py`) with the variables torch.distributed's env:// rendezvous reads, taken from
# Open MPI's: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE. MASTER_ADDR and MASTER_PORT come
# from mpirun's -x (or the node's environment).
if [ -z "${OMPI_COMM_WORLD_RANK:-}" ]; then
    echo "mpi-rank-env: not started by Open MPI's mpirun (no OMPI_COMM_WORLD_RANK)" >&2
    exit 2
fi
[ "$#" -gt 0 ] || { echo "usage: mpirun ... mpi-rank-env COMMAND [ARGS...]" >&2; exit 2; }
export RANK="$OMPI_COMM_WORLD_RANK" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE"
export LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"
exec "$@"
WRAPPER

case "$KIND" in
    container)
        step "local-files"
        write_job_files "$STATE_DIR"
        write_nccl_env "$STATE_DIR/nccl.env" /etc/runcrate/nccl.env
        write_shell_env /etc/runcrate/hostfile
        log "container: no shared folder; job files in /etc/runcrate"
        ;;
    vm | bare_metal)
        if is_head; then
            step "nfs-export"
            file_op mkdir "$ROOT/shared"
            file_op chmod 1777 "$ROOT/shared"
            managed_block "$ROOT/etc/exports" shared \
                "/shared ${RUNCRATE_NETWORK:-10.77.0.0/24}(rw,sync,no_subtree_check,no_root_squash)"
            if ! is_sandbox; then
                if [ "$share" = nfs-server ]; then
                    if has_systemd; then
                        systemctl enable --now nfs-server
                    else
                        pgrep -x nfsd >/dev/null || rpc.nfsd 8
                        pgrep -x rpc.mountd >/dev/null || rpc.mountd
                    fi
                    exportfs -ra
                else
                    # Workers mount /shared with sshfs instead (docs/nodeops.md).
                    log "this kernel has no NFS server: /shared is served by sshd"
                fi
            fi
            step "job-files"
            write_job_files "$ROOT/shared"
            write_nccl_env "$ROOT/shared/nccl.env" /shared/nccl.env
            # Where the launch lines' `sbatch --array` writes each task's output.
            file_op mkdir "$ROOT/shared/logs"
            file_op chmod 1777 "$ROOT/shared/logs"
            log "exported /shared, wrote hostfile for $COUNT nodes"
        else
            step "nfs-mount"
            if is_sandbox; then
                standin_mount_shared  # the stand-in overlay: sandboxes share one computer's disk
            else
                [ -d /shared ] || file_op mkdir /shared
                if [ "$share" = nfs ]; then
                    managed_block /etc/fstab shared "node-0:/shared /shared nfs defaults,_netdev,nofail 0 0"
                    shared_mounted nfs nfs4 || mount /shared
                    log "mounted node-0:/shared on /shared (NFS)"
                elif [ "${RUNCRATE_SHARED_FROM_HOST:-0}" = 1 ] && [ -f /shared/hostfile ] && ! shared_mounted fuse.sshfs; then
                    # Every machine of the cluster is on one computer, which mounted the head's
                    # own /shared filesystem here before this step (docs/nodeops.md "/shared"):
                    # nothing to mount over the network, nothing for fstab.
                    remove_block /etc/fstab shared
                    log "node-0's /shared is mounted here by this machine's host"
                else
                    # The one stand-in for NFS where the kernel has no NFS client: a real
                    # network mount of the head's /shared, over SSH on the private network.
                    managed_block /etc/fstab shared "root@$HEAD_ENDPOINT:/shared /shared fuse.sshfs _netdev,$SSHFS_OPTIONS 0 0"
                    shared_mounted fuse.sshfs || sshfs "root@$HEAD_ENDPOINT:/shared" /shared -o "$SSHFS_OPTIONS"
                    log "mounted node-0:/shared on /shared (sshfs: this kernel has no NFS client)"
                fi
            fi
            [ -f "$ROOT/shared/hostfile" ] || die "/shared/hostfile is not visible after the mount"
        fi
        write_shell_env /shared/hostfile
        ;;
    *)
        die "unknown machine kind $KIND"
        ;;
esac
