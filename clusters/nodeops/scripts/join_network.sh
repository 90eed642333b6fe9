#!/usr/bin/env bash
# join_network: write this node's WireGuard config for the 10.77.0.0/24 mesh (every other
# node is a peer), bring wg0 up (real machines only), then check that every other node
# answers BY NAME. Prints "REACH ok <peers…>" and "REACH fail <peers…>"; the control plane
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

# wg_config: wg0.conf as `wg` reads it: wg-quick's own keys left out, as `wg-quick strip` does.
wg_config() {
    grep -Ev '^[[:space:]]*(Address|DNS|MTU|Table|PreUp|PostUp|PreDown|PostDown|SaveConfig)[[:space:]]*=' \
        "$ROOT/etc/wireguard/wg0.conf"
}

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
            apt_install wireguard-tools fping
            # Up without PersistentKeepalive: with it, wg0 greets every peer the moment it
            # comes up, and a greeting to a peer whose tunnel is not up yet is sent again
            # only after WireGuard's 5-second REKEY_TIMEOUT. The reach phase turns it on
            # once every tunnel is up.
            if ip link show wg0 >/dev/null 2>&1; then
                : # already up (a peer was added or replaced): only its peers change
            elif [ -d /sys/module/wireguard ] || modprobe wireguard 2>/dev/null; then
                ip link add wg0 type wireguard
            else
                # No kernel module (an older kernel, or one built without it): the userspace
                # implementation over /dev/net/tun.
                apt_install wireguard-go
                log "no WireGuard kernel module: wg0 runs on wireguard-go"
                WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wireguard-go wg0 >/dev/null
            fi
            # What wg-quick up does for this configuration (its peers' addresses all lie in
            # the interface's /24, so the address's own route carries them), without its
            # ~40 subprocesses: a 32-node join is CPU-bound on the nodes' side.
            wg syncconf wg0 <(wg_config | grep -v '^PersistentKeepalive')
            ip -4 address replace "$RUNCRATE_PRIVATE_IP/24" dev wg0
            ip link set mtu 1420 up dev wg0
            if has_systemd; then systemctl enable wg-quick@wg0 >/dev/null 2>&1 || true; fi
        fi
        write_file "$STATE_DIR/network" 0644 <<<up
    fi
fi
[ "$PHASE" != up ] || exit 0


step "reach-peers"
declare -A reached=()
if has_fault never_joins; then
    :
elif is_sandbox; then
    standin_reach_peers  # the stand-in overlay: a sandbox has no wg0 to ping across
else
    # Of two peers only the one listed first greets (starts the handshake): when both start
    # one at the same instant, both are dropped (each side's handshake state is overwritten
    # by the other's initiation), and WireGuard tries again only after its 5-second
    # REKEY_TIMEOUT. So this node pings the peers after it at once, and each peer before it
    # once that peer's handshake has arrived (`wg show wg0 latest-handshakes`), over the
    # session it made. fping pings a batch of peers by name from one process, every 0.2 s
    # until each answers or the wait is over, and prints those that answered.
    answered="$(mktemp -d)"
    trap 'rm -rf "$answered"' EXIT
    deadline=$((SECONDS + WAIT))
    batches=0
    ping_peers() {
        local left=$((deadline - SECONDS))
        batches=$((batches + 1))
        fping -a -q -B 1 -i 1 -t 200 -r "$(((left > 1 ? left : 1) * 5))" "$@" >"$answered/$batches" 2>/dev/null &
    }
    read_wg_peers
    before=() after=() mine=false
    for entry in "${CLUSTER_NODES[@]}"; do
        name="${entry%% *}"
        if [ "$name" = "$NODE_NAME" ]; then mine=true; elif $mine; then after+=("$name"); else before+=("$name"); fi
    done
    [ "${#after[@]}" -eq 0 ] || ping_peers "${after[@]}"
    while [ "${#before[@]}" -gt 0 ]; do
        declare -A greeted=()
        while read -r key stamp; do
            [ "$stamp" = 0 ] || greeted[$key]=1
        done < <(wg show wg0 latest-handshakes 2>/dev/null || true)
        waiting=() ready=()
        for name in "${before[@]}"; do
            if [ -n "${greeted[${WG_KEY_OF[$name]:-none}]:-}" ]; then ready+=("$name"); else waiting+=("$name"); fi
        done
        [ "${#ready[@]}" -eq 0 ] || ping_peers "${ready[@]}"
        before=("${waiting[@]}")
        unset greeted
        # A peer that never greets could not reach this node: the pair fails whatever this
        # node's own ping would say.
        if [ "${#before[@]}" -eq 0 ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
        sleep 0.2
    done
    wait
    for ((batch = 1; batch <= batches; batch++)); do
        while read -r name; do
            [ -z "$name" ] || reached[$name]=ok
        done <"$answered/$batch"
    done
    # Every tunnel is up and greeted: the whole configuration, PersistentKeepalive included.
    ip link show wg0 >/dev/null 2>&1 && wg syncconf wg0 <(wg_config)
fi

# Two lines, not one per peer: at 64 nodes 63 lines a node (4,032 a join) filled every
# node's log tail and went through the control plane line by line.
ok="REACH ok" failed="REACH fail"
for entry in "${CLUSTER_NODES[@]}"; do
    name="${entry%% *}"
    [ "$name" = "$NODE_NAME" ] && continue
    if [ -n "${reached[$name]:-}" ]; then ok+=" $name"; else failed+=" $name"; fi
done
printf '%s\n%s\n' "$ok" "$failed"
