#!/usr/bin/env bash
# drain: the node RUNCRATE_DRAIN_NODE is about to be replaced. Run on the head: the software
# gives it no new work while its successor comes up; what runs on it keeps running until the
# new machine takes the name. Prints "::job:: <id> <name>" for each job still running there.
set -euo pipefail

DRAIN="${RUNCRATE_DRAIN_NODE:?}"
case "${RUNCRATE_SOFTWARE:-none}" in
    slurm)
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
    *)
        log "nothing to drain for ${RUNCRATE_SOFTWARE:-none}"
        ;;
esac
