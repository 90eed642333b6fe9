#!/usr/bin/env bash
# set_names: this node's hostname, and /etc/hosts entries for node-0..node-N-1 on the
# private network. In sandbox mode also the name -> loopback endpoint map the join
# check uses instead of the private network.
set -euo pipefail

step "hostname"
write_file "$ROOT/etc/hostname" 0644 <<<"$NODE_NAME"
if ! is_sandbox; then
    if has_systemd; then
        hostnamectl set-hostname "$NODE_NAME"
    else
        # A machine booted under its node's name keeps it without a process.
        current=""
        read -r current </proc/sys/kernel/hostname || true
        [ "$current" = "$NODE_NAME" ] || hostname "$NODE_NAME"
    fi
fi

step "hosts"
hosts=""
for entry in "${CLUSTER_NODES[@]}"; do
    hosts+="${entry#* }"$'\t'"${entry%% *}"$'\n'
done
managed_block "$ROOT/etc/hosts" cluster "${hosts%$'\n'}"

step "ssh-keys"
# The customer's public keys, in a block of their own so the operator's keys stay. Each key
# arrives base64-encoded on its own (RUNCRATE_SSH_KEYS="b64 b64 ..."), so no character in a
# key can split it into two lines, and each decoded line must still be one plain key: no
# options, no second key, nothing a shell or sshd would read.
login_home="${RUNCRATE_LOGIN_HOME:-/root}"
plain_key='^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) [A-Za-z0-9+/]+={0,2}( [A-Za-z0-9@._+=:,/() -]{1,100})?$'
keys=""
key_count=0
read -r -a encoded_keys <<<"${RUNCRATE_SSH_KEYS:-}"
for encoded in "${encoded_keys[@]}"; do
    file_op b64 "$encoded" || die "an SSH key is not valid base64"
    key="$FILE_REPLY"
    [[ "$key" =~ $plain_key ]] || die "refusing SSH key $((key_count + 1)): not one plain public key line"
    keys+="$key"$'\n'
    key_count=$((key_count + 1))
done
[ -d "$ROOT$login_home/.ssh" ] || { file_op mkdir "$ROOT$login_home/.ssh"; file_op chmod 0700 "$ROOT$login_home/.ssh"; }
managed_block "$ROOT$login_home/.ssh/authorized_keys" customer "${keys%$'\n'}"
file_op chmod 0600 "$ROOT$login_home/.ssh/authorized_keys"

step "cluster-key"
# One key per cluster, so nodes reach each other as root (mpirun, the /shared mount).
if [ -n "${RUNCRATE_CLUSTER_SSH_KEY:-}" ]; then
    write_file "$ROOT$login_home/.ssh/id_ed25519" 0600 "$RUNCRATE_CLUSTER_SSH_KEY"$'\n'
    managed_block "$ROOT$login_home/.ssh/authorized_keys" cluster "${RUNCRATE_CLUSTER_SSH_PUBLIC_KEY:?}"
    file_op chmod 0600 "$ROOT$login_home/.ssh/authorized_keys"
fi

step "known-hosts"
# Every node's host key under its name, its private address and its underlay address, so
# `ssh node-2`, a loop over the hostfile and mpirun's daemons never prompt. The control plane
# read each key off its own SSH connection to the node and sends the whole list on every
# set_names: a worker added or a machine swapped in under a node's name rewrites it on every
# node. RUNCRATE_KNOWN_HOSTS="names type key;..."
known=""
host_line='^[A-Za-z0-9.,:_-]+ (ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) [A-Za-z0-9+/]+={0,2}$'
IFS=';' read -r -a host_keys <<<"${RUNCRATE_KNOWN_HOSTS:-}"
for line in "${host_keys[@]}"; do
    [[ "$line" =~ $host_line ]] || die "refusing a host key line that is not 'names type key'"
    known+="$line"$'\n'
done
if [ -n "$known" ]; then
    managed_block "$ROOT/etc/ssh/ssh_known_hosts" cluster "${known%$'\n'}"
fi
# The cluster's own key for every node, checked against the managed file only: a stale line
# in ~/.ssh/known_hosts (a machine that once held the name) must not turn into "host key
# changed". Root logs in, as the cluster key allows (docs/nodeops.md "Shells and users").
write_file "$ROOT/etc/ssh/ssh_config.d/runcrate.conf" 0644 <<CONFIG
# Written by Runcrate: the cluster's nodes by name, without prompts.
Host node-* ${RUNCRATE_NETWORK_GLOB:-10.77.0.*}
    User root
    IdentityFile ${login_home}/.ssh/id_ed25519
    StrictHostKeyChecking yes
    GlobalKnownHostsFile /etc/ssh/ssh_known_hosts
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    # WireGuard encrypts wg0 already; the post-quantum exchange costs ~40 ms of CPU a connection.
    KexAlgorithms curve25519-sha256
CONFIG

if is_sandbox; then
    # "name host port root" per node; never a 10.77.x address.
    peers="${RUNCRATE_SANDBOX_PEERS:?}"
    write_file "$STATE_DIR/sandbox-peers" 0644 <<<"${peers//;/$'\n'}"
fi
log "hostname $NODE_NAME, $NODE_COUNT names in $ROOT/etc/hosts, ${#host_keys[@]} host keys, $key_count customer SSH key(s)"
