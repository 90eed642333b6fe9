#!/usr/bin/env bash
# join_network: write this node's WireGuard config for the 10.77.0.0/24 mesh (every other
# node is a peer), bring wg0 up (real machines only), then check that every other node
# answers BY NAME. Prints one "REACH <peer> ok|fail <how>" line per peer; the control
# plane pairs both directions up. Exit status is 0 whenever the checks ran.
#
# Sandbox mode never touches an interface or a 10.77.x address: names resolve through
# $ROOT/etc/runcrate/sandbox-peers to the peers' loopback SSH endpoints.
set -euo pipefail

WAIT="${RUNCRATE_JOIN_WAIT:-120}"

step "wireguard-config"
printf '%s\n' "${RUNCRATE_WG_CONF:?RUNCRATE_WG_CONF is not set}" \
    | write_file "$ROOT/etc/wireguard/wg0.conf" 0600

if has_fault never_joins; then
    # Fault injection: this node's tunnel never comes up, so nobody reaches it.
    log "fault injected: never_joins; the tunnel stays down"
    printf 'never_joins\n' | write_file "$STATE_DIR/network" 0644
else
    step "wireguard-up"
    if is_sandbox; then
        log "sandbox: wg0.conf written, no interface brought up"
    else
        command -v wg-quick >/dev/null 2>&1 || apt_install wireguard-tools
        if ip link show wg0 >/dev/null 2>&1; then
            wg syncconf wg0 <(wg-quick strip wg0)
        else
            wg-quick up wg0
        fi
        systemctl enable wg-quick@wg0 >/dev/null 2>&1 || true
    fi
    printf 'up\n' | write_file "$STATE_DIR/network" 0644
fi

# probe NAME: succeed when the peer answers by name within a couple of seconds.
probe() {
    local name="$1" host port
    if is_sandbox; then
        read -r host port < <(awk -v n="$name" '$1 == n { print $2, $3 }' "$STATE_DIR/sandbox-peers")
        case "${host:-}" in
            127.*) ;;
            *) return 1 ;;  # sandbox mode dials loopback only
        esac
        # shellcheck disable=SC2016 # expanded by the inner bash
        timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" 2>/dev/null
    else
        ping -c 1 -W 2 "$name" >/dev/null 2>&1
    fi
}

step "reach-peers"
results="$(mktemp -d)"
trap 'rm -rf "$results"' EXIT
while read -r name _address; do
    [ "$name" = "$NODE_NAME" ] && continue
    if has_fault never_joins; then
        echo fail >"$results/$name"
        continue
    fi
    (
        deadline=$((SECONDS + WAIT))
        until probe "$name"; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                echo fail >"$results/$name"
                exit 0
            fi
            sleep 1
        done
        echo ok >"$results/$name"
    ) &
done < <(cluster_nodes)
wait

while read -r name _address; do
    [ "$name" = "$NODE_NAME" ] && continue
    printf 'REACH %s %s\n' "$name" "$(cat "$results/$name" 2>/dev/null || echo fail)"
done < <(cluster_nodes)
