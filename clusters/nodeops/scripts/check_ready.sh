#!/usr/bin/env bash
# check_ready: run on the head; prints the software's own view of every node between
# markers for the control plane to parse (clusters/nodeops/parsers.py). Slurm also runs
# an acceptance job once every node is idle: `srun -N<n> hostname` on the nodes being
# accepted (RUNCRATE_ACCEPT_NODES, default every node) must print each of their names.
set -euo pipefail

if [ "${RUNCRATE_SOFTWARE:?}" = kubernetes ] && [ -f "$ROOT/etc/kubernetes/admin.conf" ]; then
    export KUBECONFIG="$ROOT/etc/kubernetes/admin.conf"
fi
# Where install_ray.sh puts Ray (after the stand-ins a sandbox root may hold).
[ ! -x /opt/ray/bin/ray ] || export PATH="$PATH:/opt/ray/bin"

printf '::begin-status::\n'
case "$RUNCRATE_SOFTWARE" in
    slurm) status="$(sinfo -N -h -o '%N %T')"; printf '%s\n' "$status" ;;
    kubernetes) kubectl get nodes -o json ;;
    ray) ray status ;;
    none) ;;
    *) die "unknown software $RUNCRATE_SOFTWARE" ;;
esac
printf '::end-status::\n'

if [ "$RUNCRATE_SOFTWARE" = slurm ] && ! is_sandbox; then
    accept="${RUNCRATE_ACCEPT_NODES:-$(joined 1 ,)}"
    IFS=',' read -r -a wanted <<<"$accept"
    # Matched by bash, not a grep per node: at 64 nodes that was 64 programs a check.
    declare -A is_idle=()
    while read -r name state; do
        [ "$state" != idle ] || is_idle[$name]=1
    done <<<"$status"
    idle=0
    for name in "${wanted[@]}"; do
        [ -z "${is_idle[$name]:-}" ] || idle=$((idle + 1))
    done
    if [ "$idle" = "${#wanted[@]}" ]; then
        printf '::begin-accept::\n'
        # -I: give up rather than queue if the nodes cannot be had within 30 s. srun sends its
        # stdin to every task; this script's is /dev/null, and on a busy node Slurm 22.05 can
        # lose the step to that empty stdin's end ("io error with slurmstepd", docs/nodeops.md
        # "Slurm"). An open pipe that stays empty sends nothing.
        exec {empty}< <(exec sleep 100 2>/dev/null)
        writer=$!
        # Its name marks it as the product's in the customer's `sacct`.
        timeout 90 srun -N "${#wanted[@]}" -w "$accept" -I30 --job-name=runcrate-readiness-check hostname <&"$empty" 2>&1 \
            || printf 'srun exit status %s\n' "$?"
        exec {empty}<&-
        kill "$writer" 2>/dev/null || true
        printf '::end-accept::\n'
    fi
fi
