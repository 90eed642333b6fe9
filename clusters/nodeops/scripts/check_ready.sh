#!/usr/bin/env bash
# check_ready: run on the head; prints the software's own view of every node between
# markers for the control plane to parse (clusters/nodeops/parsers.py).
set -euo pipefail

if [ "${RUNCRATE_SOFTWARE:?}" = kubernetes ] && [ -f "$ROOT/etc/kubernetes/admin.conf" ]; then
    export KUBECONFIG="$ROOT/etc/kubernetes/admin.conf"
fi

printf '::begin-status::\n'
case "$RUNCRATE_SOFTWARE" in
    slurm) sinfo -N -h -o '%N %T' ;;
    kubernetes) kubectl get nodes -o json ;;
    ray) ray status ;;
    none) ;;
    *) die "unknown software $RUNCRATE_SOFTWARE" ;;
esac
printf '::end-status::\n'
