"""A node's boot in one process: what `realnodes.boot` starts for each node (docs/nodeops.md,
"Isolated machines").

    python3 -I -S nodeboot.py INIT_NAME < plan.json

Started as this computer's root with the plan (`realnodes._boot_plan`, JSON) on stdin, it does
with system calls what a shell script did with ~50 programs (mkdir, losetup, mount, cp, chown,
mknod, hostname, ip…), so a node's boot starts three programs: `mkfs.ext4` for each of its
disks on this computer, then the node's own `bash` (its PID 1) and `sshd`.

Stage one, as this computer's root, in a mount namespace of its own:
- joins the node's cgroups (its devices cgroup last, once its disks are mounted: that one
  lets the node open only its own device nodes);
- makes the node's disks (an ext4 filesystem in a sparse file each, on a loop device that
  goes with the last mount of it) and mounts them in the node's directory;
- seeds the writable layer, mounts the image idmapped to the node's uid range (images.attach),
  then every mount the node gets from this computer (the plan's `mounts`: its cgroups
  read-only, /dev, /dev/shm, volumes) and makes the node's device nodes in its /dev (a user
  namespace cannot mknod): the plan's and those of the GPUs it is given (cdi.py);
- makes the node's user namespaces (userns.enter: owned by the node's uid, under an outer one
  holding its per-user limits) and its network, mount, UTS, IPC and PID namespaces, and forks
  the node's PID 1. This process waits for it and exits with its status.

Stage two, PID 1, as the node's root: the overlay root over the idmapped image, /dev, /shared,
volumes and the GPUs' files bound in, `pivot_root`, proc and sysfs, LXCFS's files, the node's
cgroups, the host's tree detached, /run, devpts, hostname and loopback; then it becomes the
image's bash, which starts sshd, prints the boot marker and reaps orphans for good.

Standard library only: it ships with the host runtime and runs before anything of the product
is importable.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import stat
import struct
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusters.providers.local import images, userns
else:  # run as a script, beside its sibling modules (the package's __init__ imports Django)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import images
    import userns

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "bind": MS_BIND,
         "rbind": MS_BIND | MS_REC}
MNT_DETACH = 2
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000, 0x04000000, 0x08000000, 0x20000000, 0x40000000)
# pivot_root has no C library wrapper; its number per architecture.
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_AUTOCLEAR, LO_FLAGS_DIRECT_IO = 4, 16
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.syscall.restype = ctypes.c_long


class BootError(RuntimeError):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise BootError(f"{what}: {os.strerror(number)}")


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)),
           f"mount {fstype or ''} {source or ''} on {target}".replace("  ", " "))


def bind(source: str, target: str, flags: int = 0, *, recursive: bool = False) -> None:
    """A bind mount; with `flags` (ro, nosuid…), remounted with them and with those the
    source's mount already has (a user namespace may not clear a locked flag)."""
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if flags:
        kept = os.statvfs(target).f_flag & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        mount(None, target, None, MS_REMOUNT | MS_BIND | flags | kept)


def _options(options: list[str]) -> tuple[int, str]:
    flags, data = 0, []
    for option in options:
        if option in FLAGS:
            flags |= FLAGS[option]
        else:
            data.append(option)
    return flags, ",".join(data)


def mount_entry(source: str, target: str, fstype: str, options: list[str]) -> None:
    """One of the plan's mounts (fstab's fields: `bind` and `ro`… as mount(8) takes them)."""
    os.makedirs(target, exist_ok=True)
    flags, data = _options(options)
    if flags & MS_BIND:
        bind(source, target, flags & ~(MS_BIND | MS_REC), recursive=bool(flags & MS_REC))
    else:
        mount(source, target, fstype, flags, data or None)


# -- stage one: this computer's root ----------------------------------------------------------


def join_cgroups(paths: list[str]) -> None:
    for path in paths:
        with open(path, "w") as procs:
            procs.write(str(os.getpid()))


class _LoopInfo64(ctypes.Structure):
    _fields_ = [("lo_device", ctypes.c_uint64), ("lo_inode", ctypes.c_uint64), ("lo_rdevice", ctypes.c_uint64),
                ("lo_offset", ctypes.c_uint64), ("lo_sizelimit", ctypes.c_uint64), ("lo_number", ctypes.c_uint32),
                ("lo_encrypt_type", ctypes.c_uint32), ("lo_encrypt_key_size", ctypes.c_uint32),
                ("lo_flags", ctypes.c_uint32), ("lo_file_name", ctypes.c_uint8 * 64),
                ("lo_crypt_name", ctypes.c_uint8 * 64), ("lo_encrypt_key", ctypes.c_uint8 * 32),
                ("lo_init", ctypes.c_uint64 * 2)]


class _LoopConfig(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_uint32), ("block_size", ctypes.c_uint32), ("info", _LoopInfo64),
                ("reserved", ctypes.c_uint64 * 8)]


def loop_device(image: str) -> str:
    """A free loop device backed by `image` (direct I/O), detached by the kernel when its last
    user goes (the mount made on it next)."""
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(64):  # another boot may take the free one first
            number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                config = _LoopConfig(fd=backing)
                config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO
                try:
                    fcntl.ioctl(fd, LOOP_CONFIGURE, bytes(config))
                except OSError as error:
                    if error.errno == 16:  # EBUSY: taken meanwhile
                        continue
                    if error.errno == 22:  # EINVAL: direct I/O refused by the backing filesystem
                        config.info.lo_flags = LO_FLAGS_AUTOCLEAR
                        fcntl.ioctl(fd, LOOP_CONFIGURE, bytes(config))
                    else:
                        raise
                return device
            finally:
                # Autoclear: the device stays while it is open or mounted; the mount keeps it.
                _pending_loops.append(fd)
        raise BootError("no free loop device")
    finally:
        os.close(control)
        os.close(backing)


_pending_loops: list[int] = []


def make_disks(disks: list[list], base: int) -> None:
    """The node's disks: image, size (MiB), mount point. No journal (the disk lives and dies
    with the node), direct I/O (its blocks are not cached twice), `discard` (what the node
    deletes goes back to this computer's disk)."""
    for image, size, target in disks:
        os.makedirs(target, exist_ok=True)
        with open(image, "wb") as disk:
            disk.truncate(int(size) << 20)
        made = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E",
                               f"root_owner={base}:{base}", image], capture_output=True, text=True)
        if made.returncode != 0:
            raise BootError(f"mkfs.ext4: {made.stderr.strip()}")
        mount(loop_device(image), target, "ext4", MS_NODEV, "discard")
        os.rmdir(os.path.join(target, "lost+found"))
    for fd in _pending_loops:
        os.close(fd)
    _pending_loops.clear()


def copy_seed(seed: str, upper: str, base: int) -> None:
    """The writable layer's first files (boot's seed: modes kept, owned by the node's root)."""
    for directory, _, files in os.walk(seed):
        relative = os.path.relpath(directory, seed)
        target = os.path.normpath(os.path.join(upper, relative))
        os.makedirs(target, exist_ok=True)
        os.chmod(target, stat.S_IMODE(os.stat(directory).st_mode))
        os.chown(target, base, base)
        for name in files:
            with open(os.path.join(directory, name), "rb") as source:
                content = source.read()
                mode = stat.S_IMODE(os.fstat(source.fileno()).st_mode)
            path = os.path.join(target, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
            try:
                os.write(fd, content)
                os.fchmod(fd, mode)
                os.fchown(fd, base, base)
            finally:
                os.close(fd)


def make_devices(dev: str, base: int, devices: list[dict], links: list[list[str]]) -> None:
    """The node's /dev: its device nodes (this computer's root makes them: a user namespace
    cannot), owned by the node's root, and the usual links."""
    for name in ("pts", "net"):
        os.makedirs(os.path.join(dev, name), exist_ok=True)
        os.chown(os.path.join(dev, name), base, base)
    for device in devices:
        path = os.path.join(dev, device["path"])
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent)
            os.chown(parent, base, base)
        kind = stat.S_IFBLK if device.get("type") == "b" else stat.S_IFCHR
        mode = int(device.get("mode", 0o666))
        os.mknod(path, mode | kind, os.makedev(int(device["major"]), int(device["minor"])))
        os.chmod(path, mode)  # past the umask
        os.chown(path, base + int(device.get("uid", 0)), base + int(device.get("gid", 0)))
    for name, target in links:
        os.symlink(target, os.path.join(dev, name))
        os.lchown(os.path.join(dev, name), base, base)
    os.chown(dev, base, base)
    os.chmod(dev, 0o755)


def stage_one(plan: dict, init_name: str) -> int:
    base, node_dir = int(plan["base"]), plan["node_dir"]
    join_cgroups(plan["cgroups"])
    _check(_libc.unshare(CLONE_NEWNS), "a mount namespace")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    make_disks(plan["disks"], base)
    layer = os.path.join(node_dir, "layer")
    for path in ("layer/upper", "layer/work", "image", "root"):
        os.makedirs(os.path.join(node_dir, path), exist_ok=True)
    copy_seed(plan["seed"], os.path.join(layer, "upper"), base)
    for path in (layer, os.path.join(layer, "upper"), os.path.join(layer, "work")):
        os.chown(path, base, base)
    images.attach(Path(plan["image"]), Path(node_dir, "image"), base, int(plan["range"]))
    for source, target, fstype, options in plan["mounts"]:
        mount_entry(source, target, fstype, options)
    make_devices(os.path.join(node_dir, "dev"), base, plan["devices"], plan["links"])
    # From here on the node opens only the device nodes it was given (v1's devices cgroup).
    join_cgroups(plan["devices_cgroup"])
    os.chdir(node_dir)
    userns.enter(base, int(plan["range"]), [(name, str(value)) for name, value in plan["user_limits"].items()])
    _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID),
           "the node's namespaces")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            stage_two(plan, init_name)
        except (BootError, OSError) as error:
            print(f"boot stage two: {error}", file=sys.stderr, flush=True)
        os._exit(1)
    # This process only waits for PID 1 (release kills it) and reaps it: this computer's init
    # may not. It becomes perl's `wait` (~0.4 MiB, where this interpreter holds ~10 MiB, charged
    # to the node's memory for as long as it runs); what it prints is nothing of the node's.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    perl = "/usr/bin/perl"
    if os.access(perl, os.X_OK):
        os.execve(perl, ["perl", "-e", "wait; exit($? & 127 ? 1 : $? >> 8)"], plan["environment"])
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


# -- stage two: the node's PID 1, as the node's root ------------------------------------------


def _ensure_target(path: str, like: str) -> None:
    """A mount point at `path` in the node's root for the host path `like` (a file or a folder)."""
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.isdir(like):
        os.makedirs(path, exist_ok=True)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


# What PID 1 becomes: the image's bash starts sshd (-r: no re-exec per connection, ~10 ms of CPU
# each; its stdio the node's own from the start), moves to the node's own /dev/null and only
# then prints the boot marker (once it is read, nothing of the pipe is left at PID 1's stdio),
# and reaps orphans (bash's SIGCHLD handler reaps every child) while it waits on a pipe nobody
# writes to (fd 3, read with `-u`: its stdin stays /dev/null; it holds the write end, 4, itself).
PID1 = r"""
if [ -f /etc/runcrate/boot-fault ]; then
    echo "boot fault injected: sshd is not started" >&2
else
    /usr/sbin/sshd -r -f /etc/ssh/sshd_config -E /var/log/sshd.log </dev/null >/dev/null 2>>/var/log/sshd.log 3<&- 4<&- \
        || { echo "sshd did not start: $(tail -n 5 /var/log/sshd.log)" >&2; exit 1; }
fi
exec 5>&1 </dev/null >/dev/null 2>&1
echo "%(booted)s" >&5
exec 5>&-
trap '' TERM
while :; do read -r -u 3 _ || :; done
"""


def _hold_pipe(read_fd: int, write_fd: int) -> None:
    """A pipe at `read_fd` and `write_fd` that the program this process becomes keeps open."""
    ends = os.pipe()
    for end, wanted in zip(ends, (read_fd, write_fd), strict=True):
        if end != wanted:
            os.dup2(end, wanted)
        os.set_inheritable(wanted, True)
    for end in ends:
        if end not in (read_fd, write_fd):
            os.close(end)


def stage_two(plan: dict, init_name: str) -> None:
    node = plan["node"]
    root = "root"
    # Paths relative to the node's directory (this process's working directory): overlay's
    # records go to user.* attributes (`userxattr`), the only ones the node's root may write.
    mount("node-root", root, "overlay", 0, "lowerdir=image,upperdir=layer/upper,workdir=layer/work,userxattr")
    bind("dev", f"{root}/dev", recursive=True)
    os.makedirs(f"{root}/shared", exist_ok=True)
    bind("shared", f"{root}/shared")
    for index, node_path in enumerate(node["volumes"]):
        target = root + node_path
        os.makedirs(target, exist_ok=True)
        bind(f"volumes/{index}", target)
    for entry in node["host_mounts"]:  # a GPU's driver files (cdi.py): read-only
        target = root + entry["container_path"]
        _ensure_target(target, entry["host_path"])
        flags, _ = _options(entry["options"])
        bind(entry["host_path"], target, (flags & ~(MS_BIND | MS_REC)) | MS_NOSUID | MS_NODEV)
    for link, target in node["links"]:
        path = root + link
        if not os.path.lexists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(target, path)
    os.chdir(root)
    os.makedirs(".host", exist_ok=True)
    _check(_libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b".host"), "pivot_root")
    os.chdir("/")
    node_dir = plan["node_dir"]
    # A proc and a sysfs (of the node's own network namespace) are mounted only where one is
    # fully visible: before the old root goes.
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    lxcfs = node["lxcfs"]
    if lxcfs:  # the node's own size and load in /proc and /sys/devices/system/cpu (lxcfs.py)
        files = f"/.host{lxcfs['mount']}"
        try:
            names = os.listdir(f"{files}/{lxcfs['proc_dir']}")
        except OSError:
            names = []  # no daemon now: a health round binds them once it runs again
        for name in names:
            if os.path.exists(f"/proc/{name}"):
                bind(f"{files}/{lxcfs['proc_dir']}/{name}", f"/proc/{name}")
        if names:
            bind(f"{files}/{lxcfs['cpu_dir']}", f"/{lxcfs['cpu_dir']}")
    mount("node-cgroup", "/sys/fs/cgroup", "tmpfs", 0, "mode=0755,size=64k")
    cgroups = f"/.host{node_dir}/cgroup"
    for controller in sorted(os.listdir(cgroups)) if os.path.isdir(cgroups) else ():
        os.mkdir(f"/sys/fs/cgroup/{controller}")
        bind(f"{cgroups}/{controller}", f"/sys/fs/cgroup/{controller}")
    _check(_libc.umount2(b"/.host", MNT_DETACH), "detaching this computer's tree")
    os.rmdir("/.host")
    mount("node-run", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=256m")
    for path in ("/run/sshd", "/run/munge", "/run/wireguard", "/run/lock", *node["dirs"]):
        os.makedirs(path, exist_ok=True)
    with open("/etc/hostname", "w") as hostname:
        hostname.write(plan["hostname"] + "\n")
    mount("devpts", "/dev/pts", "devpts", 0, "newinstance,ptmxmode=0666,mode=0620")
    name = plan["hostname"].encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    _loopback_up()
    _hold_pipe(3, 4)
    os.execve("/bin/bash", ["bash", "-c", PID1 % {"booted": plan["booted"]}, init_name], plan["environment"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: nodeboot.py INIT_NAME < plan.json", file=sys.stderr)
        return 2
    plan = json.load(sys.stdin)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        return stage_one(plan, argv[0])
    except (BootError, OSError, images.ImageError) as error:
        print(f"boot stage one: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
