#!/usr/bin/env bash
# join_network: write this node's WireGuard config for the 10.77.0.0/24 mesh (every other
# node is a peer), bring wg0 up (real machines only), then check that every other node
# answers BY NAME. Prints one "REACH <peer> ok|fail" line per peer; the control plane
# pairs both directions up. Exit status is 0 whenever the checks ran.
#
# Sandbox mode never touches an interface or a 10.77.x address: names resolve through
# $ROOT/etc/runcrate/sandbox-peers to the peers' loopback SSH endpoints.
#
# RUNCRATE_JOIN_PHASE: "up" stops once wg0 is up, "reach" only checks the peers, "all" does
# both. The control plane brings every node's wg0 up before any node probes: a handshake
# sent to a peer whose tunnel is not up yet is retried only after WireGuard's 5-second
# REKEY_TIMEOUT, which would make every join wait that long.
set -euo pipefail

WAIT="${RUNCRATE_JOIN_WAIT:-120}"
PHASE="${RUNCRATE_JOIN_PHASE:-all}"

if [ "$PHASE" != reach ]; then
    step "wireguard-config"
    write_file "$ROOT/etc/wireguard/wg0.conf" 0600 <<<"${RUNCRATE_WG_CONF:?RUNCRATE_WG_CONF is not set}"

    if has_fault never_joins; then
        # Fault injection: this node's tunnel never comes up, so nobody reaches it.
        log "fault injected: never_joins; the tunnel stays down"
        write_file "$STATE_DIR/network" 0644 <<<never_joins
    else
        step "wireguard-up"
        if is_sandbox; then
            log "sandbox: wg0.conf written, no interface brought up"
        else
            apt_install wireguard-tools
            if ip link show wg0 >/dev/null 2>&1; then
                : # already up (a peer was added): only its peers change
            elif [ ! -d /sys/module/wireguard ] && ! modprobe wireguard 2>/dev/null; then
                # No kernel module (an older kernel, or one built without it): wg-quick runs
                # the userspace implementation over /dev/net/tun instead.
                apt_install wireguard-go
                export WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go
                export WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1
                log "no WireGuard kernel module: wg0 runs on wireguard-go"
            fi
            # Up without PersistentKeepalive: with it, wg0 greets every peer the moment it
            # comes up, and a greeting to a peer whose tunnel is not up yet is sent again
            # only after WireGuard's 5-second REKEY_TIMEOUT. The reach phase turns it on
            # once every tunnel is up.
            if ip link show wg0 >/dev/null 2>&1; then
                wg syncconf wg0 <(wg-quick strip wg0 | grep -v '^PersistentKeepalive')
            else
                mkdir -p "$STATE_DIR/wg-up"
                grep -v '^PersistentKeepalive' "$ROOT/etc/wireguard/wg0.conf" |
                    write_file "$STATE_DIR/wg-up/wg0.conf" 0600
                wg-quick up "$STATE_DIR/wg-up/wg0.conf"
                rm -f "$STATE_DIR/wg-up/wg0.conf"
            fi
            if has_systemd; then systemctl enable wg-quick@wg0 >/dev/null 2>&1 || true; fi
        fi
        write_file "$STATE_DIR/network" 0644 <<<up
    fi
fi
[ "$PHASE" != up ] || exit 0


# probe NAME: succeed when the peer answers by name.
probe() {
    local name="$1" peer host="" port="" peer_root="" tunnel=""
    if is_sandbox; then
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
    else
        ping -c 1 -W 2 "$name" >/dev/null 2>&1
    fi
}

# reach NAME: keep probing until the peer answers or WAIT seconds have passed.
reach() {
    local deadline=$((SECONDS + WAIT))
    until probe "$1"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep "${RUNCRATE_PROBE_INTERVAL:-1}"
    done
}

step "reach-peers"
declare -A reached=()
if has_fault never_joins; then
    :
elif is_sandbox; then
    # Every missing peer in each round (sandbox probes never block), not one peer until it
    # answers: the check lasts as long as the slowest peer, and WAIT once however many never
    # come up.
    deadline=$((SECONDS + WAIT))
    while :; do
        pending=0
        for entry in "${CLUSTER_NODES[@]}"; do
            name="${entry%% *}"
            [ "$name" = "$NODE_NAME" ] && continue
            [ -n "${reached[$name]:-}" ] && continue
            if probe "$name"; then reached[$name]=ok; else pending=1; fi
        done
        if [ "$pending" = 0 ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
        sleep "${RUNCRATE_PROBE_INTERVAL:-1}"
    done
else
    # Real peers may still be bringing their tunnel up: wait for all of them at once. The
    # node with the lower index greets first: when two peers start a handshake with each
    # other at the same instant, both are dropped, and WireGuard tries again only after
    # its 5-second REKEY_TIMEOUT.
    results="$(mktemp -d)"
    trap 'rm -rf "$results"' EXIT
    position=0
    for entry in "${CLUSTER_NODES[@]}"; do
        name="${entry%% *}"
        position=$((position + 1))
        [ "$name" = "$NODE_NAME" ] && continue
        if [ "$((position - 1))" -lt "$NODE_INDEX" ]; then
            (sleep 0.5; if reach "$name"; then : >"$results/$name"; fi) &
        else
            (if reach "$name"; then : >"$results/$name"; fi) &
        fi
    done
    wait
    # Every tunnel is up and greeted: the whole configuration, PersistentKeepalive included.
    ip link show wg0 >/dev/null 2>&1 && wg syncconf wg0 <(wg-quick strip wg0)
    for entry in "${CLUSTER_NODES[@]}"; do
        name="${entry%% *}"
        if [ -e "$results/$name" ]; then reached[$name]=ok; fi
    done
fi

for entry in "${CLUSTER_NODES[@]}"; do
    name="${entry%% *}"
    [ "$name" = "$NODE_NAME" ] && continue
    printf 'REACH %s %s\n' "$name" "${reached[$name]:-fail}"
done
