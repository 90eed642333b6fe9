#!/usr/bin/env bash
# set_names: this node's hostname, and /etc/hosts entries for node-0..node-N-1 on the
# private network. In sandbox mode also the name -> loopback endpoint map the join
# check uses instead of the private network.
set -euo pipefail

step "hostname"
printf '%s\n' "$NODE_NAME" | write_file "$ROOT/etc/hostname" 0644
if ! is_sandbox; then
    if command -v hostnamectl >/dev/null 2>&1; then
        hostnamectl set-hostname "$NODE_NAME"
    else
        hostname "$NODE_NAME"
    fi
fi

step "hosts"
cluster_nodes | while read -r name address; do
    printf '%s\t%s\n' "$address" "$name"
done | managed_block "$ROOT/etc/hosts" cluster

if is_sandbox; then
    # "name host port root" per node; never a 10.77.x address.
    printf '%s\n' "${RUNCRATE_SANDBOX_PEERS:?}" | tr ';' '\n' | sed '/^$/d' \
        | write_file "$STATE_DIR/sandbox-peers" 0644
fi
log "hostname $NODE_NAME, $(node_count) names in $ROOT/etc/hosts"
