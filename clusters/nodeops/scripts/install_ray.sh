#!/usr/bin/env bash
# install_ray: Ray on every node; node-0 starts the head (GCS on 10.77.0.1:6379), workers
# join it over the private network. Run on the head first, then workers.
set -euo pipefail

GPUS="${RUNCRATE_GPUS_PER_NODE:?}"
HEAD_IP="${RUNCRATE_HEAD_IP:?}"
RAY_VERSION="${RUNCRATE_RAY_VERSION:-2.60.0}"
step "check"
check_install_fault ray

step "config"
write_file "$ROOT/etc/runcrate/ray.env" 0644 <<ENV
RAY_ADDRESS=$HEAD_IP:6379
RAY_NODE_IP=$RUNCRATE_PRIVATE_IP
RAY_NUM_GPUS=$GPUS
ENV

if is_sandbox; then
    step "sandbox-daemons"
    standin_install ray
    log "sandbox: raylet registered with the node-0 GCS"
    exit 0
fi

if is_reconfigure; then
    # A worker was added: it joins the running head itself; live nodes keep their jobs.
    log "ray keeps running; the new worker joins the head at $HEAD_IP:6379"
    exit 0
fi

step "packages"
# One virtualenv per machine; a machine image (or `make` on one computer) may bring it.
if [ ! -x /opt/ray/bin/ray ]; then
    apt_install python3-venv
    python3 -m venv /opt/ray
    /opt/ray/bin/pip install -q "ray[default]==$RAY_VERSION"
fi
# `ray` on PATH in every shell comes from /etc/runcrate/env.sh (setup_shared); the old
# login-only hook put Ray's python ahead of the system's, which has mpi4py.
rm -f /etc/profile.d/ray.sh

step "start"
# Ray finds the machine's GPUs itself. Never `ray stop` here: a node that already runs Ray keeps its jobs.
# Ray's processes run with Ray's Python first on PATH: a submitted job's `python job.py` (`ray job
# submit`) and a task's subprocess find the Python that has ray, as in an activated virtualenv.
export PATH="/opt/ray/bin:$PATH"
if is_head; then
    if /opt/ray/bin/ray status --address="$HEAD_IP:6379" >/dev/null 2>&1; then
        log "ray head already running"
    else
        /opt/ray/bin/ray start --head --node-ip-address="$HEAD_IP" --port=6379 \
            --include-dashboard=true --dashboard-host="$HEAD_IP" --dashboard-port=8265 --disable-usage-stats
    fi
else
    if pgrep -x raylet >/dev/null; then
        log "raylet already running"
    else
        /opt/ray/bin/ray start --address="$HEAD_IP:6379" --node-ip-address="$RUNCRATE_PRIVATE_IP" \
            --disable-usage-stats
    fi
fi
log "ray installed"
