#!/usr/bin/env bash
# stop: stop the cluster software and leave the private network, before the provider
# releases the machine. Best effort throughout: every command that can fail runs under
# `attempt`, which logs it and carries on, so one failure never leaves the rest undone.
set -uo pipefail

# In a subshell: a helper that gives up with `die` (lib.sh) exits that subshell, never stop.sh.
attempt() {
    ( "$@" ) || log "warning: '$*' failed (exit $?), continuing"
}

# RUNCRATE_STOP_PHASE: "software" stops everything but the private network, "network" only
# leaves it, "all" (the default) does both. The control plane stops the software on every
# node before any node leaves the network: a daemon still talking to a node whose wg0 is
# already gone waits out its timeout (slurmd forwards messages from node to node and
# slurmctld's shutdown waits on its own; Slurm's MessageTimeout is 10 s), and a worker's
# /shared is unmounted while the head still serves it.
PHASE="${RUNCRATE_STOP_PHASE:-all}"

if [ "$PHASE" != network ]; then
    step "ssh-keys"
    # First, and on every machine: the customer's keys leave with the customer, so a machine
    # handed to the next tenant (a reused `ssh`-provider host) lets none of them in.
    authorized_keys="$ROOT${RUNCRATE_LOGIN_HOME:-/root}/.ssh/authorized_keys"
    attempt remove_block "$authorized_keys" customer 0600
    # The cluster's own node-to-node key too: its private half was on machines the tenant had root on.
    attempt remove_block "$authorized_keys" cluster 0600

    step "network-test"
    # An iperf3 server left by a network test that never finished (its worker died).
    if [ -s "$STATE_DIR/iperf3.pid" ]; then
        kill "$(<"$STATE_DIR/iperf3.pid")" 2>/dev/null || true
        attempt rm -f "$STATE_DIR/iperf3.pid"
    fi

    step "metrics"
    # The node exporter clusters/nodeops/scripts/metrics.sh started.
    if [ -s "$STATE_DIR/node-exporter.pid" ]; then
        kill "$(<"$STATE_DIR/node-exporter.pid")" 2>/dev/null || true
        attempt rm -f "$STATE_DIR/node-exporter.pid" "$STATE_DIR/node-exporter.port"
    fi

    step "software"
    if is_sandbox; then
        for software in slurm kubernetes ray; do
            attempt standin_stop "$software"  # the stand-in overlay: out of its registry
        done
    else
        case "${RUNCRATE_SOFTWARE:-none}" in
            slurm)
                attempt service_stop slurmd /run/slurmd.pid
                if is_head; then
                    attempt service_stop slurmctld /run/slurmctld.pid
                    attempt service_stop slurmdbd /run/slurmdbd/slurmdbd.pid
                    attempt service_stop mariadb /run/mysqld/mysqld.pid
                fi
                ;;
            kubernetes)
                if has_systemd; then attempt systemctl stop kubelet; fi
                ;;
            ray)
                if [ -x /opt/ray/bin/ray ]; then attempt /opt/ray/bin/ray stop --force; fi
                ;;
            *) ;;
        esac
    fi

    step "shared"
    if ! is_sandbox; then
        # Read the mount table, never stat /shared: once the head or the tunnel is gone (a
        # replaced machine, the head stopping at the same time) the sshfs mount no longer
        # answers, and a stat waits for it for as long as a minute. Lazily and without
        # canonicalising the path, for the same reason.
        if ! is_head && grep -qs ' /shared ' /proc/mounts; then
            attempt umount -l -c /shared
        fi
        # Whether or not it is mounted now: a line left in fstab would mount the departed head's
        # /shared at the machine's next boot.
        if ! is_head; then
            attempt remove_block "$ROOT/etc/fstab" shared
        fi
        if is_head && command -v exportfs >/dev/null 2>&1; then
            attempt exportfs -ua
        fi
    fi
fi
[ "$PHASE" != software ] || exit 0

step "network"
if ! is_sandbox && ip link show wg0 >/dev/null 2>&1; then
    attempt wg-quick down wg0
fi
attempt write_file "$STATE_DIR/state" 0644 <<<stopped
log "stopped"
