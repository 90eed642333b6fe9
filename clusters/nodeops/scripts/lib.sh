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

# File operations go to one helper process per script run (`file_op`), not a process each: a
# step on a node used to start ~20 programs just to rename, chmod and chown the files it wrote
# (mv, cat, chmod, mkdir, base64), and a node's steps are a few dozen program starts in all
# (docs/scale.md, issue 38). The helper is perl, which every Debian and Ubuntu machine has
# (perl-base is Essential), reading one tab-separated request a line and answering "ok" or
# "error <why>":
#   rename SRC DST | chmod MODE PATH... | chown USER[:GROUP] PATH... | mkdir PATH... | rm PATH...
#   b64 TEXT (answers "ok <decoded>": one line of text, else an error; file_op returns 1)
#   b64file PATH TEXT (writes the decoded bytes to PATH atomically with mode 0400, answers
#   "ok same" when PATH held them already, else "ok changed")
# shellcheck disable=SC2016 # perl, not shell: its $ are perl's
FILE_HELPER_PROGRAM='
use strict; use warnings; use File::Path qw(make_path); $| = 1;
sub unb64 {
    my ($s) = @_;
    return undef if $s !~ m{^[A-Za-z0-9+/]*={0,2}$} || length($s) % 4;
    $s =~ s/=+$//; $s =~ tr{A-Za-z0-9+/}{ -_};
    return join("", map { unpack("u", chr(32 + int(length($_) * 3 / 4)) . $_) } $s =~ /(.{1,60})/gs);
}
sub owner {
    my ($user, $group) = split /:/, $_[0];
    my @user = $user =~ /^\d+$/ ? ($user, $user, $user, $user) : getpwnam($user);
    my $gid = !defined $group ? $user[3] : $group =~ /^\d+$/ ? $group : getgrnam($group);
    return ($user[2], $gid);
}
while (my $line = <STDIN>) {
    chomp $line;
    my ($op, @args) = split /\t/, $line, -1;
    my $error = "";
    if ($op eq "rename") { rename($args[0], $args[1]) or $error = "$!" }
    elsif ($op eq "chmod") { my $mode = oct(shift @args); chmod($mode, @args) == @args or $error = "$!" }
    elsif ($op eq "chown") {
        my ($uid, $gid) = owner(shift @args);
        if (!defined $uid || !defined $gid) { $error = "no such user or group" }
        else { chown($uid, $gid, @args) == @args or $error = "$!" }
    }
    elsif ($op eq "mkdir") { make_path(@args, { error => \my $failed }); $error = "cannot make the folder" if @$failed }
    elsif ($op eq "rm") { for (@args) { unlink($_) or $!{ENOENT} or $error = "$!" } }
    elsif ($op eq "b64") {
        my $text = unb64($args[0]);
        if (defined $text && $text !~ /[\n\0]/) { print "ok $text\n"; next }
        $error = "not valid base64";
    }
    elsif ($op eq "b64file") {
        my ($path, $bytes) = ($args[0], unb64($args[1]));
        if (!defined $bytes) { print "error not valid base64\n"; next }
        my $old;
        if (open(my $in, "<:raw", $path)) { local $/; $old = <$in>; close $in }
        if (defined $old && $old eq $bytes) { print "ok same\n"; next }
        my $tmp = "$path.runcrate-tmp.$$";
        unlink $tmp;
        if (open(my $out, ">:raw", $tmp) && chmod(0400, $tmp)) {
            print $out $bytes; close $out or $error = "$!";
            rename($tmp, $path) or $error = "$!" if $error eq "";
        } else { $error = "$!" }
        if ($error eq "") { print "ok changed\n"; next }
    }
    else { $error = "unknown operation $op" }
    print $error eq "" ? "ok\n" : "error $error\n";
}
'
FILE_REPLY=""

# file_op OP ARG...: one request to the helper (started on first use); FILE_REPLY holds what
# it answered after "ok". In a subshell (a pipeline, `$(...)`) the helper's pipes are not
# there, and the plain commands do the work.
file_op() {
    local op="$1" request
    shift
    if [ "$BASHPID" != "$$" ]; then
        file_op_command "$op" "$@"
        return
    fi
    if [ -z "${FILE_HELPER_PID:-}" ]; then
        coproc FILE_HELPER { exec perl -e "$FILE_HELPER_PROGRAM"; }
    fi
    printf -v request '%s\t' "$op" "$@"
    printf '%s\n' "${request%$'\t'}" >&"${FILE_HELPER[1]}"
    IFS= read -r FILE_REPLY <&"${FILE_HELPER[0]}" || die "the file helper ended"
    case "$FILE_REPLY" in
        ok) FILE_REPLY="" ;;
        "ok "*) FILE_REPLY="${FILE_REPLY#ok }" ;;
        *)
            # A bad base64 text is the caller's to report, in its own words.
            [ "$op" != b64 ] || return 1
            die "$op ${1:-}: ${FILE_REPLY#error }"
            ;;
    esac
}

# file_op_command OP ARG...: file_op's requests as the usual commands.
file_op_command() {
    local op="$1"
    shift
    case "$op" in
        rename) mv -f "$1" "$2" ;;
        chmod | chown) "$op" "$@" ;;
        mkdir) mkdir -p "$@" ;;
        rm) rm -f "$@" ;;
        b64) FILE_REPLY="$(base64 -d <<<"$1" 2>/dev/null)" ;;
        b64file)
            if [ "$(base64 -w0 "$1" 2>/dev/null || true)" = "$2" ]; then
                FILE_REPLY=same
            else
                (umask 077 && base64 -d <<<"$2" >"$1.runcrate-tmp.$$" && chmod 0400 "$1.runcrate-tmp.$$" \
                    && mv -f "$1.runcrate-tmp.$$" "$1") || die "cannot write $1"
                FILE_REPLY=changed
            fi
            ;;
        *) die "unknown file operation $op" ;;
    esac
}

# write_file PATH MODE [TEXT]: write TEXT (stdin when no TEXT is given) to PATH atomically
# (readers never see half a file). Text only: bash variables hold no NUL byte.
write_file() {
    local path="$1" mode="$2" tmp="$1.runcrate-tmp.$$" content="${3-}"
    [ "$#" -ge 3 ] || IFS= read -r -d '' content || true
    [ -d "${path%/*}" ] || file_op mkdir "${path%/*}"
    [ ! -e "$tmp" ] || file_op rm "$tmp"
    if [ "$mode" = 0644 ]; then umask 022; else umask 077; fi
    printf '%s' "$content" >"$tmp"
    umask "$SAVED_UMASK"
    case "$mode" in
        0644 | 0600) ;;
        *) file_op chmod "$mode" "$tmp" ;;
    esac
    file_op rename "$tmp" "$path"
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
    local package missing=()
    # dpkg keeps a file list per installed package: a test of it is no process (dpkg-query
    # parsed dpkg's whole status file, ~7 ms), and every node runs this on every step.
    for package in "$@"; do
        [ -e "/var/lib/dpkg/info/$package.list" ] || [ -e "/var/lib/dpkg/info/$package:amd64.list" ] \
            || [ -e "/var/lib/dpkg/info/$package:arm64.list" ] || missing+=("$package")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    log "installing ${missing[*]}"
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -q
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# kernel_has NAME: the kernel knows the filesystem or module NAME, or can load it. Read from
# /proc and /sys (no process); modprobe only where this machine has modules for its kernel
# (a container has none).
kernel_has() {
    local line release=""
    while read -r line; do
        [ "${line##*[[:space:]]}" != "$1" ] || return 0
    done </proc/filesystems
    [ ! -d "/sys/module/$1" ] || return 0
    read -r release </proc/sys/kernel/osrelease || true
    [ -d "/lib/modules/$release" ] && modprobe "$1" 2>/dev/null
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
