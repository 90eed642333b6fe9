#!/usr/bin/env bash
# Helpers shared by every node-side script. The runner sends this file to bash (runner.py
# REMOTE_COMMAND) ahead of the script itself, after `export` lines for RUNCRATE_ROOT, RUNCRATE_NODE_*, ...
#
# Every path a script touches is "$ROOT/<absolute path>": ROOT is "" on a real machine
# and a sandbox directory in tests and the `local` provider.
set -euo pipefail

ROOT="${RUNCRATE_ROOT:-}"
SANDBOX="${RUNCRATE_SANDBOX:-0}"
NODE_NAME="${RUNCRATE_NODE_NAME:?RUNCRATE_NODE_NAME is not set}"
NODE_INDEX="${RUNCRATE_NODE_INDEX:?RUNCRATE_NODE_INDEX is not set}"
STATE_DIR="$ROOT/etc/runcrate"
# $STATE_DIR/bin: the kubelet stand-in's kubectl on real nodes that cannot run a kubelet.
export PATH="$ROOT/usr/local/bin:$STATE_DIR/bin:$PATH"

log() {
    printf '[%s] %s\n' "$NODE_NAME" "$*"
}

step() {
    printf '::step:: %s\n' "$*"
}

die() {
    printf '[%s] error: %s\n' "$NODE_NAME" "$*" >&2
    exit "${2:-1}"
}

is_sandbox() {
    [ "$SANDBOX" = "1" ]
}

is_head() {
    [ "$NODE_INDEX" = "0" ]
}

# has_fault NAME: the caller wrote NAME into $ROOT/etc/runcrate/fault (tests, demos).
has_fault() {
    [ -f "$STATE_DIR/fault" ] && grep -qx "$1" "$STATE_DIR/fault"
}

# Sandbox nodes share one computer's CPUs, and real nodes run these scripts on every
# step: the helpers stay in bash builtins where they can (a fork+exec costs ~5 ms here).
SAVED_UMASK="$(umask)"

# The cluster's nodes, "name address" each, from RUNCRATE_NODES ("n a;n a;...").
IFS=';' read -r -a CLUSTER_NODES <<<"${RUNCRATE_NODES:?RUNCRATE_NODES is not set}"
# shellcheck disable=SC2034 # used by the scripts streamed after this file
NODE_COUNT="${#CLUSTER_NODES[@]}"

# write_file PATH MODE: write stdin to PATH atomically (readers never see half a file).
write_file() {
    local path="$1" mode="$2" tmp="$1.runcrate-tmp.$$"
    [ -d "${path%/*}" ] || mkdir -p "${path%/*}"
    [ ! -e "$tmp" ] || rm -f "$tmp"
    case "$mode" in
        0644) umask 022; cat >"$tmp"; umask "$SAVED_UMASK" ;;
        0600) umask 077; cat >"$tmp"; umask "$SAVED_UMASK" ;;
        *) cat >"$tmp"; chmod "$mode" "$tmp" ;;
    esac
    mv -f "$tmp" "$path"
}

# without_block FILE NAME: set KEPT to FILE's lines outside every "# BEGIN runcrate NAME" ..
# "# END runcrate NAME" block. A BEGIN without its END drops the rest of the file: what a
# half-written (or forged) block holds is never kept as if it were someone else's line.
without_block() {
    local file="$1" name="$2" line skipping=0
    KEPT=""
    [ -f "$file" ] || return 0
    while IFS= read -r line || [ -n "$line" ]; do
        if [ "$line" = "# BEGIN runcrate $name" ]; then
            skipping=1
        elif [ "$line" = "# END runcrate $name" ]; then
            skipping=0
        elif [ "$skipping" = 0 ]; then
            KEPT+="$line"$'\n'
        fi
    done <"$file"
}

# managed_block FILE NAME [TEXT]: replace the block between "# BEGIN runcrate NAME" and
# "# END runcrate NAME" in FILE with TEXT (stdin when no TEXT is given), keeping every other
# line. Idempotent. bash reads stdin from a pipe (a here-string) one byte per read(2): a
# block that grows with the cluster (64 nodes' host keys, 7 KB) goes as TEXT.
managed_block() {
    local file="$1" name="$2" block="${3-}"
    [ "$#" -ge 3 ] || IFS= read -r -d '' block || true
    block="${block%$'\n'}"
    # A marker inside the block would end it early on the next rewrite and leave the lines
    # after it outside, kept forever: refuse it rather than write it.
    case $'\n'"$block" in
        *$'\n# BEGIN runcrate '* | *$'\n# END runcrate '*) die "refusing a '$name' block for $file that holds a marker line" ;;
    esac
    without_block "$file" "$name"
    write_file "$file" 0644 <<<"$KEPT# BEGIN runcrate $name
$block
# END runcrate $name"
}

# managed_block_first FILE NAME [TEXT]: managed_block, but the block goes first in FILE.
# Startup files such as /etc/bash.bashrc return early for non-interactive shells
# ("[ -z "$PS1" ] && return"), so what every shell must see has to come before that line.
managed_block_first() {
    local file="$1" name="$2" block="${3-}"
    [ "$#" -ge 3 ] || IFS= read -r -d '' block || true
    block="${block%$'\n'}"
    managed_block "$file" "$name" "$block"
    without_block "$file" "$name"
    write_file "$file" 0644 <<<"# BEGIN runcrate $name
$block
# END runcrate $name
${KEPT%$'\n'}"
}

# remove_block FILE NAME [MODE]: drop the block managed_block wrote, keeping every other line.
remove_block() {
    local file="$1" name="$2" mode="${3:-0644}"
    [ -f "$file" ] || return 0
    without_block "$file" "$name"
    if [ -z "$KEPT" ]; then
        write_file "$file" "$mode" </dev/null
    else
        write_file "$file" "$mode" <<<"${KEPT%$'\n'}"
    fi
}

# joined FIELD SEPARATOR: field 1 (names) or 2 (addresses) of every node, joined.
joined() {
    local field="$1" separator="$2" entry value out=""
    for entry in "${CLUSTER_NODES[@]}"; do
        if [ "$field" = 1 ]; then value="${entry%% *}"; else value="${entry#* }"; fi
        out="${out:+$out$separator}$value"
    done
    printf '%s' "$out"
}

# read_wg_peers: WG_PEER_OF[public key]=name and WG_KEY_OF[name]=public key, from wg0.conf
# (join_network writes each peer's name in the comment above its key).
# shellcheck disable=SC2034 # read by the scripts streamed after this file
read_wg_peers() {
    declare -gA WG_PEER_OF=() WG_KEY_OF=()
    local line name=""
    while IFS= read -r line; do
        case "$line" in
            "# node-"*) name="${line#\# }" ;;
            "PublicKey = "*)
                if [ -n "$name" ]; then
                    WG_PEER_OF["${line#PublicKey = }"]="$name"
                    WG_KEY_OF["$name"]="${line#PublicKey = }"
                fi
                name=""
                ;;
        esac
    done <"$ROOT/etc/wireguard/wg0.conf"
}

# has_systemd: systemd is PID 1 (the test sd_booted(3) makes). Daemons are started with
# systemctl then, and directly otherwise (containers, real nodes on one computer).
has_systemd() {
    [ -d /run/systemd/system ]
}

# apt_install PKG...: install only the packages dpkg does not have installed, so a machine
# that comes with them (an image, real nodes prepared by `make`) never needs the network.
apt_install() {
    local package status missing=()
    local -A installed=()
    # One dpkg-query for them all: each call parses dpkg's whole status file (~7 ms), and
    # every node runs this on every step.
    while read -r package status; do
        [ "$status" != ii ] || installed[$package]=1
    done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)
    for package in "$@"; do
        [ -n "${installed[$package]:-}" ] || missing+=("$package")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    log "installing ${missing[*]}"
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -q
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# service_running PIDFILE: the daemon whose pid is in PIDFILE is alive.
service_running() {
    local pid=""
    read -r pid 2>/dev/null <"$1" || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# service_start UNIT PIDFILE COMMAND...: start a daemon unless it runs: `systemctl` when
# systemd is PID 1, else COMMAND (which daemonizes and writes PIDFILE).
service_start() {
    local unit="$1" pidfile="$2"
    shift 2
    if has_systemd; then
        systemctl enable --now "$unit"
    elif ! service_running "$pidfile"; then
        "$@"
    fi
}

# service_stop UNIT PIDFILE: stop a daemon and wait until it is gone.
service_stop() {
    local unit="$1" pidfile="$2" pid="" waited=0
    if has_systemd; then
        systemctl stop "$unit"
        return
    fi
    service_running "$pidfile" || return 0
    read -r pid <"$pidfile"
    kill "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 100 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -9 "$pid" 2>/dev/null || true
}

# service_restart UNIT PIDFILE COMMAND...
service_restart() {
    local unit="$1" pidfile="$2"
    if has_systemd; then
        systemctl enable "$unit" >/dev/null 2>&1 || true
        systemctl restart "$unit"
        return
    fi
    service_stop "$unit" "$pidfile"
    service_start "$@"
}

# is_reconfigure: this node already runs the software and only takes the new node list
# (a worker was added); it must not restart anything that runs jobs.
is_reconfigure() {
    [ "${RUNCRATE_RECONFIGURE:-0}" = "1" ]
}

# Install fault injection: `install_fails` in the fault file fails the install clearly.
check_install_fault() {
    if has_fault install_fails; then
        die "install of $1 failed (fault injected: install_fails in $STATE_DIR/fault)" 3
    fi
}
