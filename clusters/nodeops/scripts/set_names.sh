#!/usr/bin/env bash
# set_names: this node's hostname, and /etc/hosts entries for node-0..node-N-1 on the
# private network. In sandbox mode also the name -> loopback endpoint map the join
# check uses instead of the private network.
set -euo pipefail

step "hostname"
write_file "$ROOT/etc/hostname" 0644 <<<"$NODE_NAME"
if ! is_sandbox; then
    if command -v hostnamectl >/dev/null 2>&1; then
        hostnamectl set-hostname "$NODE_NAME"
    else
        hostname "$NODE_NAME"
    fi
fi

step "hosts"
hosts=""
for entry in "${CLUSTER_NODES[@]}"; do
    hosts+="${entry#* }"$'\t'"${entry%% *}"$'\n'
done
managed_block "$ROOT/etc/hosts" cluster <<<"${hosts%$'\n'}"

if is_sandbox; then
    # "name host port root" per node; never a 10.77.x address.
    peers="${RUNCRATE_SANDBOX_PEERS:?}"
    write_file "$STATE_DIR/sandbox-peers" 0644 <<<"${peers//;/$'\n'}"
fi
log "hostname $NODE_NAME, $NODE_COUNT names in $ROOT/etc/hosts"
