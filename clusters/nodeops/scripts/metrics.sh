#!/usr/bin/env bash
# metrics: one collection round of the node metrics (clusters/metrics.py), run on every node
# at once over the control plane's kept SSH connection. Starts the node's exporter if it is
# not running (Debian's prometheus-node-exporter, listening on the node's own loopback
# only: nothing is opened to the world), reads it once, and prints for
# clusters/nodeops/metrics.py (parse_metrics_report):
#
#   ::metrics:: exporter <address> up|down|missing
#   ::begin-exposition:: ... ::end-exposition::   the exporter's lines we keep, CPU summed by mode
#   ::metrics:: disk <mountpoint> <size bytes> <available bytes>     for / and /shared
#   ::begin-gpu:: ... ::end-gpu::                 nvidia-smi --query-gpu CSV, on GPU machines
#
# RUNCRATE_METRICS_STOP=1 stops the exporter instead. Exits 0 whenever it ran.
set -euo pipefail

PIDFILE="$STATE_DIR/node-exporter.pid"
PORTFILE="$STATE_DIR/node-exporter.port"
EXPORTER="${RUNCRATE_NODE_EXPORTER:-prometheus-node-exporter}"

report() {
    printf '::metrics:: %s\n' "$*"
}

stop_exporter() {
    if service_running "$PIDFILE"; then
        kill "$(<"$PIDFILE")" 2>/dev/null || true
    fi
    rm -f "$PIDFILE" "$PORTFILE"
}

# A real node has a loopback of its own: the exporter's usual port. Sandbox machines share
# this computer's loopback, so each picks a port from its root's path (the next one if taken).
first_port() {
    if is_sandbox; then
        local sum
        sum="$(printf '%s' "$ROOT" | cksum)"
        echo $((20000 + ${sum%% *} % 20000))
    else
        echo 9100
    fi
}

# fetch PORT: the exporter's /metrics over bash's /dev/tcp (no curl needed on the node),
# bounded by `timeout`.
fetch() {
    # shellcheck disable=SC2016 # $1 is the inner bash's argument
    timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 && cat <&3' _ "$1" 2>/dev/null
}

start_exporter() {
    local port attempt waited
    port="$(first_port)"
    for attempt in 1 2 3; do
        # Only the collectors the charts read, and none of the exporter's own Go metrics.
        nohup "$EXPORTER" --web.listen-address="127.0.0.1:$port" --web.disable-exporter-metrics \
            --collector.disable-defaults --collector.cpu --collector.meminfo --collector.loadavg \
            --collector.netdev --log.level=warn \
            >"$STATE_DIR/node-exporter.log" 2>&1 </dev/null &
        echo $! | write_file "$PIDFILE" 0644
        waited=0
        while [ "$waited" -lt 20 ]; do
            if ! service_running "$PIDFILE"; then
                break  # the port was taken: try the next
            fi
            if fetch "$port" >/dev/null; then
                echo "$port" | write_file "$PORTFILE" 0644
                return 0
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
        stop_exporter
        port=$((port + attempt))
    done
    return 1
}

if [ "${RUNCRATE_METRICS_STOP:-0}" = "1" ]; then
    stop_exporter
    exit 0
fi

# exporter_port: the port of a running exporter that answers, starting one when there is none
# (or the one there died: a dead process whose parent never reaped it still has a pid).
exporter_port() {
    local port=""
    if service_running "$PIDFILE"; then
        read -r port 2>/dev/null <"$PORTFILE" || port=""
        if [ -n "$port" ] && fetch "$port" >/dev/null; then
            echo "$port"
            return 0
        fi
        stop_exporter
    fi
    start_exporter || return 1
    read -r port <"$PORTFILE"
    echo "$port"
}

if ! command -v "$EXPORTER" >/dev/null 2>&1; then
    report "exporter - missing"
elif ! port="$(exporter_port)"; then
    report "exporter - down"
elif body="$(fetch "$port")" && [ -n "$body" ]; then
    report "exporter 127.0.0.1:$port up"
    printf '::begin-exposition::\n'
    # A container machine (a node whose memory cgroup is no larger than the computer it runs
    # on): its CPU time and memory are its cgroup's, exact, whether its /proc shows the
    # computer's figures or, through LXCFS, its own (then MemTotal is the cgroup's limit). Its
    # load is the exporter's: its own through LXCFS.
    cg_cpu="" cg_limit="" cg_used=""
    if limit="$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)" \
        && usage="$(cat /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null)" \
        && cpu_ns="$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null)"; then
        inactive="$(awk '$1 == "total_inactive_file" { print $2 }' /sys/fs/cgroup/memory/memory.stat 2>/dev/null)"
        cg_cpu="$cpu_ns" cg_limit="$limit" cg_used=$((usage - ${inactive:-0}))
    fi
    # CPU seconds summed over the CPUs per mode: a 64-core node sends 8 lines, not 512.
    printf '%s\n' "$body" | awk -v cg_cpu="$cg_cpu" -v cg_limit="$cg_limit" -v cg_used="$cg_used" '
        /^node_cpu_seconds_total\{/ { match($0, /mode="[a-z]+"/); mode = substr($0, RSTART + 6, RLENGTH - 7); cpu[mode] += $NF; next }
        /^node_memory_MemTotal_bytes / { total = $NF; next }
        /^node_memory_MemAvailable_bytes / { available = $NF; next }
        /^node_load1 / { print }
        /^node_network_(receive|transmit)_bytes_total\{device="wg0"\} / { print }
        END {
            if (cg_limit != "" && cg_limit + 0 <= total + 0) {
                # The node used cg_cpu of every CPU-second this computer had: the rest is idle to it.
                all = 0; for (mode in cpu) all += cpu[mode]
                printf "node_cpu_seconds_total{mode=\"user\"} %.2f\n", cg_cpu / 1e9
                printf "node_cpu_seconds_total{mode=\"idle\"} %.2f\n", all - cg_cpu / 1e9
                printf "node_memory_MemTotal_bytes %s\nnode_memory_MemAvailable_bytes %s\n", cg_limit, cg_limit - cg_used
            } else {
                for (mode in cpu) printf "node_cpu_seconds_total{mode=\"%s\"} %.2f\n", mode, cpu[mode]
                if (total != "") printf "node_memory_MemTotal_bytes %s\n", total
                if (available != "") printf "node_memory_MemAvailable_bytes %s\n", available
            }
        }'
    printf '::end-exposition::\n'
else
    report "exporter 127.0.0.1:$port down"
fi

for mount in / /shared; do
    [ -d "$ROOT$mount" ] || continue
    # `timeout`: an sshfs /shared whose head is gone must not hold the round up.
    if line="$(timeout 3 df -P -B1 "$ROOT$mount" 2>/dev/null | tail -n 1)"; then
        read -r _ size _ avail _ <<<"$line"
        report "disk $mount $size $avail"
    fi
done

if command -v nvidia-smi >/dev/null 2>&1; then
    printf '::begin-gpu::\n'
    timeout 5 nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu,ecc.errors.uncorrected.volatile.total \
        --format=csv,noheader,nounits 2>/dev/null || true
    printf '::end-gpu::\n'
fi
