#!/usr/bin/env bash
# drain: the node RUNCRATE_DRAIN_NODE is about to be replaced. Run on the head: the software
# gives it no new work while its successor comes up; what runs on it keeps running until the
# new machine takes the name. Prints "::job:: <id> <name>" for each job still running there.
# RUNCRATE_DRAIN_ACTION=resume (the swap was given up) runs on the head and on the node itself.
set -euo pipefail

DRAIN="${RUNCRATE_DRAIN_NODE:?}"
case "${RUNCRATE_SOFTWARE:-none}" in
    slurm)
        is_head || exit 0
        if is_sandbox; then
            log "sandbox: $DRAIN drained"
            exit 0
        fi
        if [ "${RUNCRATE_DRAIN_ACTION:-drain}" = resume ]; then
            # The swap did not happen: the old machine is the node again and takes work.
            step "resume"
            if scontrol show node "$DRAIN" | grep -q 'Reason=being replaced'; then
                scontrol update NodeName="$DRAIN" State=RESUME
            fi
            log "$DRAIN takes jobs again"
            exit 0
        fi
        step "drain"
        # "being replaced" is how install_slurm.sh on the new machine knows to resume the node.
        scontrol update NodeName="$DRAIN" State=DRAIN Reason="being replaced"
        squeue -h -w "$DRAIN" -t RUNNING,COMPLETING -o '::job:: %i %j' || true
        log "$DRAIN drained in Slurm"
        ;;
    ray)
        if is_sandbox; then
            log "sandbox: $DRAIN drained"
            exit 0
        fi
        # shellcheck source=/dev/null
        . "$ROOT/etc/runcrate/ray.env"
        if [ "${RUNCRATE_DRAIN_ACTION:-drain}" = resume ]; then
            # Ray cannot take a drain back: a drained raylet finishes what it runs and leaves
            # once idle. The node's raylet starts again, as install_ray.sh starts it, as soon
            # as the drained one has left (at once if it has), without ending a running task.
            [ "$NODE_NAME" = "$DRAIN" ] || exit 0
            step "resume"
            # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
            setsid nohup bash -c 'while pgrep -x raylet >/dev/null; do sleep 1; done
                exec /opt/ray/bin/ray start --address="$1" --node-ip-address="$2" --disable-usage-stats' \
                resume "$RAY_ADDRESS" "$RAY_NODE_IP" </dev/null >/dev/null 2>&1 &
            log "$DRAIN takes Ray tasks again once its drained raylet has left"
            exit 0
        fi
        is_head || exit 0
        step "drain"
        address="$(getent hosts "$DRAIN" | awk '{ print $1; exit }')"
        [ -n "$address" ] || die "$DRAIN has no address in /etc/hosts"
        # Preemption, as a cloud's spot reclaim does: the GCS gives the node no new tasks or
        # actors; what runs there finishes, and the raylet leaves once the node is idle.
        ids="$(/opt/ray/bin/python - "$RAY_ADDRESS" "$address" <<'PY'
import sys

import ray

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
for node in ray.nodes():
    if node["Alive"] and node["NodeManagerAddress"] == sys.argv[2]:
        print(node["NodeID"])
PY
)"
        for id in $ids; do
            /opt/ray/bin/ray drain-node --address="$RAY_ADDRESS" --node-id="$id" \
                --reason=DRAIN_NODE_REASON_PREEMPTION --reason-message="$DRAIN is being replaced"
        done
        log "$DRAIN drained in Ray"
        ;;
    *)
        is_head || exit 0
        log "nothing to drain for ${RUNCRATE_SOFTWARE:-none}"
        ;;
esac
