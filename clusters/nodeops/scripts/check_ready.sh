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
    idle=0
    for name in "${wanted[@]}"; do
        grep -qx "$name idle" <<<"$status" && idle=$((idle + 1))
    done
    if [ "$idle" = "${#wanted[@]}" ]; then
        printf '::begin-accept::\n'
        # -I: give up rather than queue if the nodes cannot be had within 30 s.
        timeout 90 srun -N "${#wanted[@]}" -w "$accept" -I30 hostname 2>&1 || printf 'srun exit status %s\n' "$?"
        printf '::end-accept::\n'
    fi
fi
