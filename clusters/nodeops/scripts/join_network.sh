#!/usr/bin/env bash
# join_network: write this node's WireGuard config for the 10.77.0.0/24 mesh (every other
# node is a peer), bring wg0 up (real machines only), then check this node's share of the
# pairs by their WireGuard handshakes (see "reach-peers"). Prints "REACH ok <peers…>" and "REACH fail <peers…>"
# for the peers it checked; the control plane puts the nodes' shares together. Exit status
# is 0 whenever the checks ran.
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

# wg_config: wg0.conf as `wg` reads it: wg-quick's own keys left out, as `wg-quick strip` does,
# and PersistentKeepalive too (see "wireguard-up"). Read by bash, not a grep pipeline.
wg_config() {
    local line key
    WG_CONFIG=""
    while IFS= read -r line || [ -n "$line" ]; do
        key="${line%%=*}" key="${key//[[:space:]]/}"
        case "$key" in
            Address | DNS | MTU | Table | PreUp | PostUp | PreDown | PostDown | SaveConfig | PersistentKeepalive) ;;
            *) WG_CONFIG+="$line"$'\n' ;;
        esac
    done <"$ROOT/etc/wireguard/wg0.conf"
}

if [ "$PHASE" != reach ]; then
    step "wireguard-config"
    write_file "$ROOT/etc/wireguard/wg0.conf" 0600 "${RUNCRATE_WG_CONF:?RUNCRATE_WG_CONF is not set}"$'\n'

    if has_fault never_joins; then
        # Fault injection: this node's tunnel never comes up, so nobody reaches it.
        log "fault injected: never_joins; the tunnel stays down"
        write_file "$STATE_DIR/network" 0644 $'never_joins\n'
    else
        step "wireguard-up"
        if is_sandbox; then
            log "sandbox: wg0.conf written, no interface brought up"
        else
            # Up without PersistentKeepalive: with it, wg0 greets every peer the moment it
            # comes up, and a greeting to a peer whose tunnel is not up yet is sent again
            # only after WireGuard's 5-second REKEY_TIMEOUT. The reach phase turns it on
            # for the pairs this node checked, once every tunnel is up.
            if [ -e /sys/class/net/wg0 ]; then
                tunnel=up # already up (a peer was added or replaced): only its peers change
            elif kernel_has wireguard; then
                tunnel=kernel
            else
                # No kernel module (an older kernel, or one built without it): the userspace
                # implementation over /dev/net/tun.
                tunnel=userspace
            fi
            # One apt_install (one read of dpkg's status file) for every package the step needs.
            packages=(wireguard-tools fping)
            [ "$tunnel" != userspace ] || packages+=(wireguard-go)
            apt_install "${packages[@]}"
            if [ "$tunnel" = kernel ]; then
                ip link add wg0 type wireguard
            elif [ "$tunnel" = userspace ]; then
                log "no WireGuard kernel module: wg0 runs on wireguard-go"
                WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wireguard-go wg0 >/dev/null
            fi
            # What wg-quick up does for this configuration (its peers' addresses all lie in
            # the interface's /24, so the address's own route carries them), without its
            # ~40 subprocesses: a 32-node join is CPU-bound on the nodes' side.
            wg_config
            wg syncconf wg0 <(printf '%s' "$WG_CONFIG")
            ip -batch - <<<"address replace $RUNCRATE_PRIVATE_IP/24 dev wg0
link set mtu 1420 up dev wg0"
            if has_systemd; then systemctl enable wg-quick@wg0 >/dev/null 2>&1 || true; fi
        fi
        write_file "$STATE_DIR/network" 0644 $'up\n'
    fi
fi
[ "$PHASE" != up ] || exit 0


step "reach-peers"
# Each pair is checked from one end: a handshake completed with the peer has crossed the
# link both ways (below).
# The checks go round the ring, so every node checks about half of the others by name: node
# p checks the next ⌊(N-1)/2⌋ nodes after it in the list (wrapping), and with an even N the
# node opposite it as well when p is in the first half. Only the checking end sends, so only
# it starts the pair's handshake: when both ends start one at the same instant, both are
# dropped (each side's handshake state is overwritten by the other's initiation) and
# WireGuard tries again only after its 5-second REKEY_TIMEOUT. Checking every pair from both
# ends doubled the work, and waiting for the other end's handshake before answering it made
# every node poll `wg show` (a dump of every peer) until the last of them had greeted: at 64
# nodes the reach round spent more CPU on that than on the handshakes themselves.
checked=() address_of=()
for ((position = 0; position < NODE_COUNT; position++)); do
    [ "${CLUSTER_NODES[position]%% *}" = "$NODE_NAME" ] && break
done
check() {
    local entry="${CLUSTER_NODES[$1]}"
    checked+=("${entry%% *}") address_of+=("${entry#* }")
}
for ((hop = 1; hop <= (NODE_COUNT - 1) / 2; hop++)); do
    check $(((position + hop) % NODE_COUNT))
done
if ((NODE_COUNT % 2 == 0 && position < NODE_COUNT / 2)); then
    check $((position + NODE_COUNT / 2))
fi
declare -A reached=()
if has_fault never_joins; then
    :
elif is_sandbox; then
    standin_reach_peers "${checked[@]}"  # the stand-in overlay: a sandbox has no wg0 to ping across
elif [ "${#checked[@]}" -gt 0 ]; then
    # The proof is WireGuard's own evidence: a completed handshake with the peer's key needs
    # this node's greeting to reach the machine holding that key at the peer's endpoint and
    # its answer to come back, so it proves the pair both ways. One datagram to each checked
    # peer's private address over wg0 starts its handshake (bash's /dev/udp: no process per
    # peer); WireGuard greets again every 5 s (REKEY_TIMEOUT) while the datagram waits. Then
    # `wg show wg0 latest-handshakes` is read, backing off, until every checked peer has one
    # or the wait is over: one `wg` a read. An echo to every peer and back (fping, with its
    # retries) cost wireguard-go a packet each way per peer on top of the handshake.
    read_wg_peers
    started=$(printf '%(%s)T' -1)
    for address in "${address_of[@]}"; do
        { printf 'runcrate join\n' >"/dev/udp/$address/9"; } 2>/dev/null || true
    done
    # A handshake counts if it is fresh: one within 3 minutes of the start (a session kept
    # alive from an earlier join, re-keyed every 2 minutes, is one), none at all is not.
    declare -A key_wanted=()
    for name in "${checked[@]}"; do key_wanted[${WG_KEY_OF[$name]:-none}]=$name; done
    # A read before the first pause would find no handshake done yet, and each read makes
    # wireguard-go write out every peer: the pauses come first and grow from 100 ms to 1 s;
    # `read -t` on a pipe nobody writes waits without a `sleep` process per pause.
    exec {pause_fd}<> <(:)
    pause=100 waited=0
    while ((${#reached[@]} < ${#checked[@]} && waited < WAIT * 1000)); do
        printf -v seconds '%d.%03d' $((pause / 1000)) $((pause % 1000))
        read -r -t "$seconds" -u "$pause_fd" _ || true
        waited=$((waited + pause)) pause=$((pause * 2 > 1000 ? 1000 : pause * 2))
        while read -r key stamp; do
            name="${key_wanted[$key]:-}"
            if [ -n "$name" ] && [ "$stamp" -gt 0 ] && [ "$stamp" -ge $((started - 180)) ]; then
                reached[$name]=ok
            fi
        done < <(wg show wg0 latest-handshakes 2>/dev/null || true)
    done
    exec {pause_fd}>&-
    # The pairs this node checked have a session now: keep them alive (PersistentKeepalive,
    # as wg0.conf says). The pairs the other end checks are kept alive from there: turning it
    # on here could greet a peer whose own check is starting its handshake.
    keepalive=()
    for name in "${!reached[@]}"; do
        keepalive+=(peer "${WG_KEY_OF[$name]}" persistent-keepalive 25)
    done
    [ "${#keepalive[@]}" -eq 0 ] || wg set wg0 "${keepalive[@]}"
fi

# Two lines, not one per peer: at 64 nodes 63 lines a node (4,032 a join) filled every
# node's log tail and went through the control plane line by line.
ok="REACH ok" failed="REACH fail"
for name in "${checked[@]}"; do
    if [ -n "${reached[$name]:-}" ]; then ok+=" $name"; else failed+=" $name"; fi
done
printf '%s\n%s\n' "$ok" "$failed"
