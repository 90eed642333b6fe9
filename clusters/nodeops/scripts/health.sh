#!/usr/bin/env bash
# health: one round of the periodic node health check (clusters.health), run on every node
# at once, one SSH session each. Prints one "::health:: <check> <subject> <value> ..." line
# per finding for clusters/nodeops/parsers.py (parse_health_report); the head also prints
# the software's own view of every node between ::begin-status:: and ::end-status::.
# Exits 0 whenever it ran: what is wrong is in the markers, not in the exit status.
#
#   ::health:: wg0 up|down            the node's WireGuard interface exists and is up
#   ::health:: wg-daemon running|stopped|kernel   wireguard-go (kernel: no daemon needed)
#   ::health:: peer <name> ok|fail    the peer's 10.77.0.x answered over wg0 (one fping for all peers)
#   ::health:: handshake <name> <seconds>|never   age of the latest handshake with the peer
#   ::health:: daemon <name> running|stopped      the software's daemon on this node
#   ::health:: status-exit <code>     the head's status command failed
set -euo pipefail

PING_WAIT="${RUNCRATE_HEALTH_PING_WAIT:-2}"
# Without fping, a handshake this recent (seconds) counts as the peer answering (WireGuard
# re-handshakes every 2 minutes while PersistentKeepalive keeps traffic flowing).
HANDSHAKE_FRESH=180

report() {
    printf '::health:: %s\n' "$*"
}

# daemon_state PIDFILE UNIT: running when the pid in PIDFILE is alive (or systemd says the
# unit is active); stopped otherwise.
daemon_state() {
    if service_running "$1"; then
        echo running
    elif has_systemd && systemctl is-active --quiet "$2" 2>/dev/null; then
        echo running
    else
        echo stopped
    fi
}

# process_runs NAME: a process whose command is exactly NAME runs (procfs: no pgrep fork).
process_runs() {
    local comm path
    for path in /proc/[0-9]*/comm; do
        read -r comm 2>/dev/null <"$path" || continue
        [ "$comm" = "$1" ] && return 0
    done
    return 1
}

sandbox_network() {
    local own="" tunnel peer peer_root
    read -r own 2>/dev/null <"$STATE_DIR/network" || own=""
    if [ "$own" = up ]; then report "wg0 up"; else report "wg0 down"; fi
    report "wg-daemon kernel"
    [ -f "$STATE_DIR/sandbox-peers" ] || return 0
    # Lines are "name host port root"; the sandbox dials nothing here.
    while read -r peer _ _ peer_root; do
        [ "$peer" = "$NODE_NAME" ] && continue
        # The sandbox stand-in for a ping crossing wg0 both ways: both tunnels are up.
        tunnel=""
        read -r tunnel 2>/dev/null <"$peer_root/etc/runcrate/network" || tunnel=""
        if [ "$own" = up ] && [ "$tunnel" = up ]; then report "peer $peer ok"; else report "peer $peer fail"; fi
    done <"$STATE_DIR/sandbox-peers"
}

# wg0_state: up (the interface exists and is administratively up), down (it exists but was
# set down: `ip link set wg0 down`), or missing. One `ip` call; no pipeline.
wg0_state() {
    local line
    line="$(ip -o link show wg0 2>/dev/null)" || line=""
    case "$line" in
        "") echo missing ;;
        *"<UP,"* | *",UP,"* | *",UP>"* | *"<UP>"*) echo up ;;
        *) echo down ;;
    esac
}

# probe_peers: one `fping` over every peer's 10.77.0.x at once (one process per node per
# round, however many peers: the round is linear in nodes), each target tried twice within
# PING_WAIT seconds. Prints the addresses that answered. The ping also makes WireGuard
# handshake with a peer it has not talked to lately.
probe_peers() {
    local wait_ms=$((PING_WAIT * 1000 / 2))
    [ "$wait_ms" -ge 100 ] || wait_ms=100
    fping -a -r 1 -B 1 -t "$wait_ms" -i 1 "$@" 2>/dev/null || true
}

# probe_ring: without fping (a machine that lost it), ping only the two ring neighbours
# (still two processes a node, whatever the size); every other peer is judged by the age
# of its latest WireGuard handshake, which the interface keeps anyway.
probe_ring() {
    local count=$# i previous next
    local -a targets=("$@")
    for ((i = 0; i < count; i++)); do
        [ "${PEER_INDEX[${targets[$i]}]}" -lt "$NODE_INDEX" ] && previous="$i"
        if [ -z "${next:-}" ] && [ "${PEER_INDEX[${targets[$i]}]}" -gt "$NODE_INDEX" ]; then next="$i"; fi
    done
    [ -n "${next:-}" ] || next=0
    [ -n "${previous:-}" ] || previous=$((count - 1))
    for i in $(printf '%s\n' "$previous" "$next" | sort -u); do
        (ping -c 1 -W "$PING_WAIT" "${targets[$i]}" >/dev/null 2>&1 && echo "${targets[$i]}") &
    done
    wait
}

real_network() {
    local entry name address key stamp now state
    local -A name_of=() reached=() age_of=()
    local -a addresses=()
    declare -gA PEER_INDEX=()
    state="$(wg0_state)"
    if [ "$state" != up ]; then
        report "wg0 down"
        if process_runs wireguard-go; then report "wg-daemon running"; else report "wg-daemon stopped"; fi
        return 0
    fi
    report "wg0 up"
    if [ -d /sys/module/wireguard ]; then
        report "wg-daemon kernel"
    elif process_runs wireguard-go; then
        report "wg-daemon running"
    else
        report "wg-daemon stopped"
    fi
    for entry in "${CLUSTER_NODES[@]}"; do
        name="${entry%% *}" address="${entry#* }"
        [ "$name" = "$NODE_NAME" ] && continue
        name_of[$address]="$name"
        PEER_INDEX[$address]="${name#node-}"
        addresses+=("$address")
    done
    # Handshakes, by peer name.
    read_wg_peers
    now="$(date +%s)"
    while read -r key stamp; do
        name="${WG_PEER_OF[$key]:-}"
        [ -n "$name" ] || continue
        if [ "$stamp" = 0 ]; then age_of[$name]=never; else age_of[$name]=$((now - stamp)); fi
    done < <(wg show wg0 latest-handshakes 2>/dev/null || true)
    [ "${#addresses[@]}" -gt 0 ] || return 0
    local probed=all
    if command -v fping >/dev/null 2>&1; then
        while read -r address; do reached[$address]=1; done < <(probe_peers "${addresses[@]}")
    else
        probed=ring
        while read -r address; do reached[$address]=1; done < <(probe_ring "${addresses[@]}")
    fi
    for address in "${addresses[@]}"; do
        name="${name_of[$address]}"
        if [ -n "${reached[$address]:-}" ]; then
            report "peer $name ok"
        elif [ "$probed" = ring ] && [ "${age_of[$name]:-never}" != never ] && [ "${age_of[$name]}" -le "$HANDSHAKE_FRESH" ]; then
            report "peer $name ok"
        else
            report "peer $name fail"
        fi
    done
    for name in "${!age_of[@]}"; do report "handshake $name ${age_of[$name]}"; done
}

# software_daemons: this node's daemons of the cluster's software.
software_daemons() {
    case "${RUNCRATE_SOFTWARE:?}" in
        slurm)
            if is_sandbox; then
                if [ -f "$(sim_registry slurm)/$NODE_NAME" ]; then report "daemon slurmd running"; else report "daemon slurmd stopped"; fi
                return 0
            fi
            report "daemon slurmd $(daemon_state /run/slurmd.pid slurmd)"
            if is_head; then report "daemon slurmctld $(daemon_state /run/slurmctld.pid slurmctld)"; fi
            ;;
        ray)
            if is_sandbox; then
                if [ -f "$(sim_registry ray)/$NODE_NAME" ]; then report "daemon raylet running"; else report "daemon raylet stopped"; fi
                return 0
            fi
            if process_runs raylet; then report "daemon raylet running"; else report "daemon raylet stopped"; fi
            if is_head; then
                if process_runs gcs_server; then report "daemon gcs_server running"; else report "daemon gcs_server stopped"; fi
            fi
            ;;
        kubernetes)
            if is_sandbox; then
                if [ -f "$(sim_registry kubernetes)/$NODE_NAME" ]; then report "daemon kubelet running"; else report "daemon kubelet stopped"; fi
            elif has_systemd && [ "${RUNCRATE_KUBELET_STANDIN:-0}" != 1 ]; then
                if systemctl is-active --quiet kubelet; then report "daemon kubelet running"; else report "daemon kubelet stopped"; fi
            fi
            ;;
        none) ;;
        *) die "unknown software $RUNCRATE_SOFTWARE" ;;
    esac
}

# software_status: on the head, the software's own view of every node.
software_status() {
    local code=0
    if [ "$RUNCRATE_SOFTWARE" = kubernetes ] && [ -f "$ROOT/etc/kubernetes/admin.conf" ]; then
        export KUBECONFIG="$ROOT/etc/kubernetes/admin.conf"
    fi
    [ ! -x /opt/ray/bin/ray ] || export PATH="$PATH:/opt/ray/bin"
    printf '::begin-status::\n'
    case "$RUNCRATE_SOFTWARE" in
        slurm) timeout 10 sinfo -N -h -o '%N %T' || code=$? ;;
        kubernetes) timeout 10 kubectl get nodes -o json || code=$? ;;
        ray) timeout 20 ray status || code=$? ;;
        *) ;;
    esac
    printf '::end-status::\n'
    [ "$code" = 0 ] || report "status-exit $code"
}

step "network"
if is_sandbox; then sandbox_network; else real_network; fi
step "software"
software_daemons
if is_head && [ "$RUNCRATE_SOFTWARE" != none ]; then software_status; fi
