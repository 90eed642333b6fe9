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

step "ssh-keys"
# The customer's public keys, in a block of their own so the operator's keys stay.
login_home="${RUNCRATE_LOGIN_HOME:-/root}"
keys="${RUNCRATE_SSH_KEYS:-}"
[ -d "$ROOT$login_home/.ssh" ] || { mkdir -p "$ROOT$login_home/.ssh"; chmod 0700 "$ROOT$login_home/.ssh"; }
managed_block "$ROOT$login_home/.ssh/authorized_keys" customer <<<"${keys//;/$'\n'}"
chmod 0600 "$ROOT$login_home/.ssh/authorized_keys"

if is_sandbox; then
    # "name host port root" per node; never a 10.77.x address.
    peers="${RUNCRATE_SANDBOX_PEERS:?}"
    write_file "$STATE_DIR/sandbox-peers" 0644 <<<"${peers//;/$'\n'}"
fi
key_count=0
[ -z "$keys" ] || { IFS=';' read -r -a key_list <<<"$keys"; key_count="${#key_list[@]}"; }
log "hostname $NODE_NAME, $NODE_COUNT names in $ROOT/etc/hosts, $key_count customer SSH key(s)"
