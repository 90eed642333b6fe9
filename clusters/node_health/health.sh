#!/usr/bin/env bash
# health: one round of the periodic node health check (clusters.health), run on every node
# at once, one SSH session each. Prints one "::health:: <check> <subject> <value> ..." line
# per finding for clusters/nodeops/parsers.py (parse_health_report); the head also prints
# the software's own view of every node between ::begin-status:: and ::end-status::.
# Exits 0 whenever it ran: what is wrong is in the markers, not in the exit status.
#
#   ::health:: wg0 up|down            the node's WireGuard interface exists and is up
#   ::health:: wg-daemon running|stopped|kernel   wireguard-go (kernel: no daemon needed)
#   ::health:: peer <name> ok|fail    a ring neighbour (the nodes before and after this one by
#                                     index, RUNCRATE_HEALTH_RING): its 10.77.0.x answered a ping
#                                     over wg0 (one fping)
#   ::health:: peer <name> ok|fail handshake   any other peer, judged by the age of its latest
#                                     WireGuard handshake (PersistentKeepalive keeps it fresh)
#   ::health:: handshake <name> <seconds>|never   age of the latest handshake with the peer
#   ::health:: daemon <name> running|stopped      the software's daemon on this node
#   ::health:: status-exit <code>     the head's status command failed
set -euo pipefail

PING_WAIT="${RUNCRATE_HEALTH_PING_WAIT:-2}"
# A handshake this recent (seconds) counts as the peer answering: WireGuard re-handshakes
# every 2 minutes while PersistentKeepalive keeps traffic flowing (parsers.STALE_HANDSHAKE_SECONDS).
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

# process_runs NAME: a process whose command is exactly NAME runs (procfs: no pgrep fork). A
# process that is exiting (state Z or X, after `kill -9`, say) does not run any more.
process_runs() {
    local comm path stat state
    for path in /proc/[0-9]*/comm; do
        read -r comm 2>/dev/null <"$path" || continue
        [ "$comm" = "$1" ] || continue
        read -r stat 2>/dev/null <"${path%/comm}/stat" || continue
        state="${stat##*) }"
        case "${state%% *}" in Z | X) continue ;; *) return 0 ;; esac
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

# wg0_state: sets WG0_STATE to up (the interface exists and is administratively up), down
# (it exists but was set down: `ip link set wg0 down`), or missing. From the node's own sysfs
# (no process); with `ip` where it has none mounted.
wg0_state() {
    local flags="" line
    if [ -e /sys/class/net/lo ]; then
        if [ ! -e /sys/class/net/wg0 ]; then WG0_STATE=missing; return 0; fi
        read -r flags 2>/dev/null </sys/class/net/wg0/flags || flags=""
        if [ -n "$flags" ]; then
            if (( flags & 1 )); then WG0_STATE=up; else WG0_STATE=down; fi  # IFF_UP
            return 0
        fi
    fi
    line="$(ip -o link show wg0 2>/dev/null)" || line=""
    case "$line" in
        "") WG0_STATE=missing ;;
        *"<UP,"* | *",UP,"* | *",UP>"* | *"<UP>"*) WG0_STATE=up ;;
        *) WG0_STATE=down ;;
    esac
}

# probe ADDRESS...: the given addresses pinged over wg0, each tried twice within PING_WAIT
# seconds; prints those that answered. One fping for all of them; without fping (a machine
# that lost it) a ping each.
probe() {
    local wait_ms=$((PING_WAIT * 1000 / 2)) address
    [ "$wait_ms" -ge 100 ] || wait_ms=100
    if command -v fping >/dev/null 2>&1; then
        fping -a -r 1 -B 1 -t "$wait_ms" -i 1 "$@" 2>/dev/null || true
        return 0
    fi
    for address in "$@"; do
        (ping -c 1 -W "$PING_WAIT" "$address" >/dev/null 2>&1 && echo "$address") &
    done
    wait
}

# The peers' verdicts, from wg0.conf (each peer's name is in the comment above its key, as
# lib.sh's read_wg_peers reads it for join_network),
# then on stdin `wg show wg0 latest-handshakes` ("key stamp") and the ring neighbours that
# answered ("address"). One awk for every peer: the same loop in bash cost ~0.3 ms of the
# node's CPU per peer, every round.
# shellcheck disable=SC2016 # awk's own $1, $2
PEERS_AWK='
BEGIN {
    while ((getline line < conf) > 0) {
        split(line, word, " ")
        if (substr(line, 1, 7) == "# node-") name = substr(line, 3)
        else if (word[1] == "PublicKey" && name != "") { name_of[word[3]] = name; name = "" }
    }
}
NF == 2 { if ($1 in name_of) age[name_of[$1]] = ($2 == 0 ? "never" : now - $2); next }
NF == 1 { reached[$1] = 1 }
END {
    count = split(nodes, entries, ";")
    for (i = 1; i <= count; i++) {
        split(entries[i], field, " ")
        if (field[1] == me) continue
        if (index(" " ring " ", " " field[2] " ")) {
            printf "::health:: peer %s %s\n", field[1], (field[2] in reached ? "ok" : "fail")
        } else if ((field[1] in age) && age[field[1]] != "never" && age[field[1]] <= fresh) {
            printf "::health:: peer %s ok handshake\n", field[1]
        } else {
            printf "::health:: peer %s fail handshake\n", field[1]
        }
    }
    for (name in age) printf "::health:: handshake %s %s\n", name, age[name]
}'

real_network() {
    local now
    wg0_state
    if [ "$WG0_STATE" != up ]; then
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
    [ "$NODE_COUNT" -gt 1 ] || return 0
    printf -v now '%(%s)T' -1
    # RUNCRATE_HEALTH_RING: the addresses of the peers just before and just after this node
    # (operations.check_health). Every node pings these two only, so each link of the ring
    # is pinged from both of its ends and a node sends 2 echo requests whatever the size.
    # mawk where the machine has it (Debian's required awk): half of gawk's start-up CPU.
    local awk=awk
    if command -v mawk >/dev/null; then awk=mawk; fi
    # shellcheck disable=SC2086 # two addresses, split on purpose
    { wg show wg0 latest-handshakes 2>/dev/null || true; probe ${RUNCRATE_HEALTH_RING:?}; } |
        "$awk" -v now="$now" -v fresh="$HANDSHAKE_FRESH" -v me="$NODE_NAME" -v nodes="$RUNCRATE_NODES" \
            -v ring="$RUNCRATE_HEALTH_RING" -v conf="$ROOT/etc/wireguard/wg0.conf" "$PEERS_AWK"
}

# software_daemons: this node's daemons of the cluster's software.
software_daemons() {
    case "${RUNCRATE_SOFTWARE:?}" in
        slurm)
            if is_sandbox; then
                standin_daemon slurm slurmd  # the stand-in overlay: a sandbox runs no daemons
                return 0
            fi
            report "daemon slurmd $(daemon_state /run/slurmd.pid slurmd)"
            if is_head; then report "daemon slurmctld $(daemon_state /run/slurmctld.pid slurmctld)"; fi
            ;;
        ray)
            if is_sandbox; then
                standin_daemon ray raylet  # the stand-in overlay: a sandbox runs no daemons
                return 0
            fi
            if process_runs raylet; then report "daemon raylet running"; else report "daemon raylet stopped"; fi
            if is_head; then
                if process_runs gcs_server; then report "daemon gcs_server running"; else report "daemon gcs_server stopped"; fi
            fi
            ;;
        kubernetes)
            if is_sandbox; then
                standin_daemon kubernetes kubelet  # the stand-in overlay: a sandbox runs no daemons
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
