#!/usr/bin/env bash
# network_test: measure what the private network really carries between this node and
# another, one action per run (the control plane decides the rounds, docs/nodeops.md):
#
#   RUNCRATE_NETTEST_ACTION=serve    start an iperf3 server bound to this node's private
#                                    address; print "PROBE gpus=<n> nccl_tests=<path|none>"
#   RUNCRATE_NETTEST_ACTION=measure  ping, then iperf3 to RUNCRATE_NETTEST_TARGET ("name
#                                    address"); print the outputs between markers
#   RUNCRATE_NETTEST_ACTION=stop     stop the server
#   RUNCRATE_NETTEST_ACTION=nccl     head only: all_reduce_perf across every node with mpirun
#
# Real machines measure over wg0 (10.77.0.x). Sandbox nodes have no wg0: they measure
# between their loopback addresses, which is what this computer really carries, if iperf3
# is installed; without it the action fails with a clear message (numbers are never made up).
set -euo pipefail

ACTION="${RUNCRATE_NETTEST_ACTION:?RUNCRATE_NETTEST_ACTION is not set}"
PORT="${RUNCRATE_NETTEST_PORT:-5201}"
SECONDS_PER_PAIR="${RUNCRATE_NETTEST_SECONDS:-2}"
PIDFILE="$STATE_DIR/iperf3.pid"

# sandbox_address NAME: a sandbox node's loopback address (it has no 10.77.0.x).
sandbox_address() {
    local peer host _rest
    while read -r peer host _rest; do
        if [ "$peer" = "$1" ]; then
            printf '%s' "$host"
            return
        fi
    done <<<"${RUNCRATE_SANDBOX_PEERS//;/$'\n'}"
    die "sandbox: no node named $1"
}

# own_address: where this node's iperf3 server listens and its client sends from.
own_address() {
    if is_sandbox; then
        sandbox_address "$NODE_NAME"
    else
        printf '%s' "${RUNCRATE_PRIVATE_IP:?}"
    fi
}

# bounded SECONDS COMMAND...: run COMMAND, killed after SECONDS where `timeout` exists.
bounded() {
    local limit="$1"
    shift
    if command -v timeout >/dev/null 2>&1; then
        timeout "$limit" "$@"
    else
        "$@"
    fi
}

# server_running: iperf3 writes its pidfile without a newline, which `read` (service_running)
# reports as end of file.
server_running() {
    local pid=""
    [ -f "$PIDFILE" ] && pid="$(<"$PIDFILE")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

need_iperf3() {
    if command -v iperf3 >/dev/null 2>&1; then
        return
    fi
    if is_sandbox; then
        die "iperf3 is not installed on this computer: the network cannot be measured (install iperf3)" 4
    fi
    apt_install iperf3
}

case "$ACTION" in
    serve)
        step "iperf3-server"
        need_iperf3
        address="$(own_address)"
        if server_running; then
            log "iperf3 server already listening on $address:$PORT"
        else
            rm -f "$PIDFILE"
            iperf3 -s -D -B "$address" -p "$PORT" --pidfile "$PIDFILE"
            waited=0
            until server_running; do
                [ "$waited" -lt 50 ] || die "iperf3 server did not start on $address:$PORT"
                sleep 0.1
                waited=$((waited + 1))
            done
            log "iperf3 server listening on $address:$PORT"
        fi
        gpus=0
        if command -v nvidia-smi >/dev/null 2>&1; then
            gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
        fi
        nccl_tests="$(command -v all_reduce_perf 2>/dev/null || true)"
        printf 'PROBE gpus=%s nccl_tests=%s mpirun=%s\n' "${gpus:-0}" "${nccl_tests:-none}" \
            "$(command -v mpirun >/dev/null 2>&1 && echo yes || echo no)"
        ;;
    measure)
        target="${RUNCRATE_NETTEST_TARGET:?RUNCRATE_NETTEST_TARGET is not set}"
        target_name="${target%% *}"
        if is_sandbox; then
            target_address="$(sandbox_address "$target_name")"
        else
            target_address="${target#* }"
            # Over the private network only: the route to the peer must leave through wg0.
            route="$(ip route get "$target_address" 2>/dev/null || true)"
            case "$route" in
                *" dev wg0 "*) ;;
                *) die "the route to $target_name ($target_address) does not go through wg0: ${route:-none}" ;;
            esac
        fi
        address="$(own_address)"
        need_iperf3
        step "ping $target_name"
        printf '::begin-ping %s::\n' "$target_name"
        bounded 10 ping -c 3 -i 0.2 -W 2 -q -I "$address" "$target_address" 2>&1 || true
        printf '::end-ping::\n'
        step "iperf3 $target_name"
        printf '::begin-iperf3 %s::\n' "$target_name"
        # --json prints the error inside the JSON when the run fails; the exit status says so too.
        bounded $((SECONDS_PER_PAIR + 15)) iperf3 -c "$target_address" -B "$address" -p "$PORT" -t "$SECONDS_PER_PAIR" --connect-timeout 3000 \
            --json 2>&1 || true
        printf '::end-iperf3::\n'
        ;;
    stop)
        step "iperf3-stop"
        if server_running; then
            kill "$(<"$PIDFILE")" 2>/dev/null || true
        fi
        rm -f "$PIDFILE"
        ;;
    nccl)
        step "all_reduce_perf"
        is_head || die "all_reduce_perf is started from the head node"
        command -v all_reduce_perf >/dev/null 2>&1 || die "nccl-tests' all_reduce_perf is not installed on $NODE_NAME" 4
        command -v mpirun >/dev/null 2>&1 || die "mpirun (OpenMPI) is not installed on $NODE_NAME" 4
        hostfile="/shared/hostfile"
        env_file="/shared/nccl.env"
        if [ "${RUNCRATE_MACHINE_KIND:-vm}" = container ]; then
            hostfile="/etc/runcrate/hostfile"
            env_file="/etc/runcrate/nccl.env"
        fi
        [ -f "$ROOT$env_file" ] || die "$env_file is missing: run the network setup first"
        exports=()
        while IFS='=' read -r key _; do
            key="${key#export }"
            case "$key" in
                NCCL_* | GLOO_*) exports+=(-x "$key") ;;
                *) ;;
            esac
        done <"$ROOT$env_file"
        set -a
        # shellcheck disable=SC1090 # written by setup_shared.sh
        . "$ROOT$env_file"
        set +a
        world=$((NODE_COUNT * ${RUNCRATE_GPUS_PER_NODE:-1}))
        printf '::begin-nccl::\n'
        mpirun --allow-run-as-root -np "$world" --hostfile "$hostfile" \
            --mca btl_tcp_if_include wg0 --mca oob_tcp_if_include wg0 "${exports[@]}" \
            all_reduce_perf -b 8 -e "${RUNCRATE_NCCL_MAX_BYTES:-1G}" -f 2 -g 1 2>&1
        printf '::end-nccl::\n'
        ;;
    *)
        die "unknown network test action $ACTION"
        ;;
esac
