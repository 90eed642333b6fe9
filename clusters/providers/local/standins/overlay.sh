#!/usr/bin/env bash
# shellcheck disable=SC2034 # variables read by the scripts streamed after this file
# The stand-in overlay: what replaces software a machine cannot run, streamed after lib.sh
# and before the script only where that is so (clusters.nodeops.operations, STANDINS):
#   - sandbox nodes (RUNCRATE_SANDBOX=1: every "machine" is a directory on one computer, no
#     daemons, no wg0, no NFS): stand-in sinfo / kubectl / ray that print the real tools'
#     formats from a registry, the /shared "mount" as a link to the head's, and the join's
#     "reach" as the peer's tunnel state file;
#   - real nodes on one computer that cannot run a kubelet (RUNCRATE_KUBELET_STANDIN=1):
#     the kubelet's registration, with the real CA, token and pin checks.
# Production machines never receive this file: clusters/nodeops/scripts/ holds no stand-in
# (tests/nodeops/test_nodeops_cluster.py checks both).

# Sandbox only. The head's registry of nodes whose daemon "registered" with the
# controller (what slurmctld, the Kubernetes API server or Ray's GCS would know). The
# stand-in sinfo / kubectl / ray read it; every sandbox root lives on one computer.
# SIM_REGISTRY overrides it: real nodes keep the kubelet stand-in's registry in /shared.
sim_registry() {
    if [ -n "${SIM_REGISTRY:-}" ]; then
        printf '%s' "$SIM_REGISTRY"
    else
        printf '%s/var/lib/runcrate-sim/%s/registered' "${RUNCRATE_SANDBOX_HEAD_ROOT:?}" "$1"
    fi
}

# This machine's own id (not its node name: a machine swapped in for a node takes the name).
sim_machine() {
    local id=""
    [ ! -s "$STATE_DIR/machine-id" ] || read -r id <"$STATE_DIR/machine-id"
    if [ -z "$id" ]; then
        read -r id </proc/sys/kernel/random/uuid
        write_file "$STATE_DIR/machine-id" 0644 <<<"$id"
    fi
    printf '%s' "$id"
}

# A registry entry: "index address gpus" (what the stand-ins read), then the machine's id.
sim_register() {
    local dir
    dir="$(sim_registry "$1")"
    mkdir -p "$dir"
    printf '%s %s %s\n%s\n' "$NODE_INDEX" "$RUNCRATE_PRIVATE_IP" "${RUNCRATE_GPUS_PER_NODE:-0}" "$(sim_machine)" \
        | write_file "$dir/$NODE_NAME" 0644
}

# Only this machine's own entry: a replaced machine stopping leaves its successor registered,
# as a real controller keeps the node once the new daemon has registered under its name.
sim_unregister() {
    local entry _line owner=""
    entry="$(sim_registry "$1")/$NODE_NAME"
    [ -f "$entry" ] || return 0
    { read -r _line; read -r owner || true; } <"$entry"
    if [ -z "$owner" ] || [ "$owner" = "$(sim_machine)" ]; then
        rm -f "$entry"
    fi
}

# sim_tool NAME SOFTWARE: write stdin as $ROOT/usr/local/bin/NAME, preceded by the
# variables it needs (registry path, cluster config). Stdin is a quoted heredoc.
# Sandbox only: stop's "daemon stopped" (standin_stop SOFTWARE).
standin_stop() {
    sim_unregister "$1"
}

# Sandbox only: health's report on a stand-in daemon, "running" while the node is in the
# registry of its software (standin_daemon SOFTWARE DAEMON).
standin_daemon() {
    if [ -f "$(sim_registry "$1")/$NODE_NAME" ]; then report "daemon $2 running"; else report "daemon $2 stopped"; fi
}

sim_tool() {
    local name="$1" software="$2"
    {
        printf '#!/usr/bin/env bash\n'
        printf '# shellcheck disable=SC2034 # not every stand-in uses every variable\n'
        printf '# runcrate sandbox stand-in for %s: prints real-format output derived from\n' "$name"
        printf '# the cluster config the install wrote and the nodes that registered.\n'
        printf 'set -euo pipefail\n'
        printf 'REGISTRY=%q\n' "$(sim_registry "$software")"
        printf 'ROOT=%q\n' "$ROOT"
        printf 'CLUSTER_ID=%q\n' "${RUNCRATE_CLUSTER_ID:-}"
        cat
    } | write_file "${SIM_TOOL_DIR:-$ROOT/usr/local/bin}/$name" 0755
}

# The stand-in tools' bodies (each run as a program: see sim_tool for the variables it gets).
standin_body() {
    case "$1" in
        sinfo)
            cat <<'FAKE'
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
            ;;
        ray)
            cat <<'FAKE'
if [ "${1:-}" != status ]; then
    echo "runcrate sandbox ray supports: ray status" >&2
    exit 1
fi
active=0 gpus=0
ids=""
for entry in $(find "$REGISTRY" -type f -printf '%f\n' 2>/dev/null | sort -t- -k2 -n); do
    read -r _index _address node_gpus <"$REGISTRY/$entry"
    ids="$ids $(printf '%s/%s' "$CLUSTER_ID" "$entry" | sha224sum | cut -c1-56)"
    active=$((active + 1))
    gpus=$((gpus + node_gpus))
done
printf '======== Autoscaler status: %s ========\n' "$(date '+%Y-%m-%d %H:%M:%S.%6N')"
printf 'Node status\n'
printf -- '---------------------------------------------------------------\n'
printf 'Active:\n'
for id in $ids; do
    printf ' 1 node_%s\n' "$id"
done
printf 'Idle:\n (no idle nodes)\n'
printf 'Pending:\n (no pending nodes)\n'
printf 'Recent failures:\n (no failures)\n\n'
printf 'Resources\n'
printf -- '---------------------------------------------------------------\n'
printf 'Usage:\n'
printf ' 0.0/%d.0 CPU\n' $((active * 32))
printf ' 0.0/%d.0 GPU\n' "$gpus"
printf ' 0B/%d.00GiB memory\n' $((active * 200))
printf ' 0B/%d.00GiB object_store_memory\n\n' $((active * 60))
printf 'Demands:\n (no resource demands)\n'
FAKE
            ;;
        kubectl)
            cat <<'FAKE'
nodes_json() {
    local first=1 name index address gpus role now
    now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '{\n    "apiVersion": "v1",\n    "items": ['
    for entry in $(find "$REGISTRY" -type f -printf '%f\n' 2>/dev/null | sort -t- -k2 -n); do
        read -r index address gpus <"$REGISTRY/$entry"
        name="$entry"
        role=""
        [ "$index" = 0 ] && role=', "node-role.kubernetes.io/control-plane": ""'
        [ "$first" = 1 ] || printf ','
        first=0
        cat <<JSON

        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "$name",
                "labels": {"kubernetes.io/hostname": "$name", "kubernetes.io/os": "linux"$role}
            },
            "spec": {"podCIDR": "10.244.$index.0/24"},
            "status": {
                "addresses": [
                    {"address": "$address", "type": "InternalIP"},
                    {"address": "$name", "type": "Hostname"}
                ],
                "allocatable": {"cpu": "32", "ephemeral-storage": "950000000000", "memory": "263000000Ki", "nvidia.com/gpu": "$gpus", "pods": "110"},
                "capacity": {"cpu": "32", "ephemeral-storage": "1000000000000", "memory": "264000000Ki", "nvidia.com/gpu": "$gpus", "pods": "110"},
                "conditions": [
                    {"lastHeartbeatTime": "$now", "lastTransitionTime": "$now", "message": "kubelet has sufficient memory available", "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"},
                    {"lastHeartbeatTime": "$now", "lastTransitionTime": "$now", "message": "kubelet has no disk pressure", "reason": "KubeletHasNoDiskPressure", "status": "False", "type": "DiskPressure"},
                    {"lastHeartbeatTime": "$now", "lastTransitionTime": "$now", "message": "kubelet is posting ready status", "reason": "KubeletReady", "status": "True", "type": "Ready"}
                ],
                "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.30.4", "operatingSystem": "linux"}
            }
        }
JSON
    done
    printf '\n    ],\n    "kind": "List",\n    "metadata": {"resourceVersion": ""}\n}\n'
}
nodes_table() {
    printf '%-10s %-7s %-14s %-5s %s\n' NAME STATUS ROLES AGE VERSION
    for entry in $(find "$REGISTRY" -type f -printf '%f\n' 2>/dev/null | sort -t- -k2 -n); do
        read -r index _address _gpus <"$REGISTRY/$entry"
        role='<none>'
        [ "$index" = 0 ] && role=control-plane
        printf '%-10s %-7s %-14s %-5s %s\n' "$entry" Ready "$role" 1m v1.30.4
    done
}
case "${1:-} ${2:-}" in
    "get nodes" | "get node")
        if [ "${3:-}" = "-o" ] && [ "${4:-}" = json ] || [ "${3:-}" = "-ojson" ] || [ "${3:-}" = "--output=json" ]; then
            nodes_json
        else
            nodes_table
        fi
        ;;
    *)
        echo "runcrate sandbox kubectl supports: get nodes [-o json]" >&2
        exit 1
        ;;
esac
FAKE
            ;;
    esac
}

# standin_install SOFTWARE: the software's status tool, and this node registered with the head.
standin_install() {
    local software="$1"
    case "$software" in
        slurm)
            standin_body sinfo | sim_tool sinfo slurm
            sim_register slurm
            ;;
        ray)
            standin_body ray | sim_tool ray ray
            sim_register ray
            ;;
        kubernetes)
            standin_kubelet_join
            step "sandbox-daemons"
            standin_body kubectl | sim_tool kubectl kubernetes
            sim_register kubernetes
            ;;
    esac
}

# standin_kubelet_join: on real nodes without a kubelet, what kubeadm init/join check.
standin_kubelet_join() {
    is_sandbox && return 0
    # Real nodes that no kubelet package can reach (real nodes on one computer): the CA,
    # the token and the pin are real; the kubelet's registration with the API server is
    # the stand-in, kept in /shared on the head (docs/nodeops.md).
    export SIM_REGISTRY=/shared/.runcrate-kubernetes/nodes SIM_TOOL_DIR="$STATE_DIR/bin"
    published=/shared/.runcrate-kubernetes
    step "control-plane-standin"
    if is_head; then
        install_ca
        mkdir -p "$published"
        cp /etc/kubernetes/pki/ca.crt "$published/ca.crt"
        # The bootstrap token, renewed for two hours whenever workers are about to join.
        printf '%s %s\n' "$TOKEN" "$(($(date +%s) + 7200))" | write_file "$published/token" 0600
    else
        is_reconfigure && exit 0
        # As `kubeadm join` does: fetch the cluster's CA and refuse one whose key is not pinned.
        [ "$(ca_hash "$published/ca.crt")" = "$CA_HASH" ] || die "the API server's CA does not match the pinned hash $CA_HASH"
        read -r published_token expires <"$published/token" || die "no bootstrap token published"
        [ "$published_token" = "$TOKEN" ] || die "the bootstrap token was not accepted"
        [ "$(date +%s)" -lt "$expires" ] || die "the bootstrap token has expired"
        mkdir -p /etc/kubernetes/pki
        cp "$published/ca.crt" /etc/kubernetes/pki/ca.crt
    fi
}

# sandbox_probe NAME: succeed when the sandbox peer answers by name.
sandbox_probe() {
    local name="$1" peer host="" port="" peer_root="" tunnel=""
    while read -r peer host port peer_root; do
        [ "$peer" = "$name" ] && break
        host=""
    done <"$STATE_DIR/sandbox-peers"
    case "$host" in
        127.*) ;;
        *) return 1 ;; # sandbox mode dials loopback only
    esac
    # The peer's machine answers (a loopback connect succeeds or is refused at once,
    # so no timeout process is needed) ...
    true 2>/dev/null 3<>"/dev/tcp/$host/$port" || return 1
    # ... and its tunnel came up: the sandbox stand-in for a packet crossing wg0.
    read -r tunnel 2>/dev/null <"$peer_root/etc/runcrate/network" || return 1
    [ "$tunnel" = up ]
}

# standin_reach_peers PEER…: fill `reached` as join_network's real path does, from the
# peers' tunnel state files.
standin_reach_peers() {
    local name
    # Every missing peer in each round (sandbox probes never block), not one peer until it
    # answers: the check lasts as long as the slowest peer, and WAIT once however many never
    # come up.
    deadline=$((SECONDS + WAIT))
    while :; do
        pending=0
        for name in "$@"; do
            [ -n "${reached[$name]:-}" ] && continue
            if sandbox_probe "$name"; then reached["$name"]=ok; else pending=1; fi
        done
        if [ "$pending" = 0 ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
        sleep "${RUNCRATE_PROBE_INTERVAL:-1}"
    done
}

# standin_mount_shared: a worker's /shared is the head's directory (one computer's disk).
standin_mount_shared() {
    local head_shared="${RUNCRATE_SANDBOX_HEAD_ROOT:?}/shared"
    if [ -d "$ROOT/shared" ] && [ ! -L "$ROOT/shared" ]; then
        rmdir "$ROOT/shared" 2>/dev/null \
            || die "$ROOT/shared is a non-empty directory; refusing to replace it"
    fi
    ln -sfn "$head_shared" "$ROOT/shared"
    log "sandbox: $ROOT/shared -> $head_shared (simulated NFS mount)"
}
