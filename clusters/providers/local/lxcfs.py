"""A node's own size in its /proc: LXCFS (docs/nodeops.md, "A node's own size").

LXCFS (Debian's `lxcfs`) is one FUSE daemon on this computer, mounted on /var/lib/lxcfs, whose
`proc/meminfo`, `proc/cpuinfo`, `proc/stat`, `proc/uptime`, `proc/loadavg`, `proc/diskstats`,
`proc/swaps`, `proc/slabinfo` and `sys/devices/system/cpu` answer each reader with the figures of
the reader's own cgroup (memory limit, cpuset), its own PID 1's start (uptime) and its own
processes' load. A node's PID 1 binds them over its /proc and /sys/devices/system/cpu at boot
(nodeboot.py), as LXC's lxcfs hook does, so `free`, `top`, `uptime`, `nproc`, Ray and PyTorch's
dataloaders see the node, not this computer.

If the daemon dies, every read of those files in every node fails with ENOTCONN ("Transport
endpoint is not connected": `free` and `top` stop working). The runtime checks it at every boot
and every health round (`ensure`): a dead daemon's mount is taken away and a new daemon started,
and its files are bound again into every running node's mount namespace (`rebind`: a mount made
here, moved there with the new mount API), in a process of its own (setns needs a single thread).

This file imports nothing but the standard library and runs as a script:

    python3 lxcfs.py rebind PID      # bind the live daemon's files into the node of PID 1 `PID`
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

MOUNT = Path(os.environ.get("RUNCRATE_LXCFS_MOUNT", "/var/lib/lxcfs"))
# The files LXC's hook binds (lxcfs's own list, read from the mount: a newer LXCFS may serve more).
PROC_DIR = "proc"
CPU_DIR = "sys/devices/system/cpu"
START_WAIT = 10.0

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
CLONE_NEWNS = 0x00020000
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: object) -> int:
    result = _libc.syscall(number, *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def available() -> bool:
    return shutil.which("lxcfs") is not None


def alive() -> bool:
    """True when a live LXCFS answers on MOUNT."""
    try:
        (MOUNT / PROC_DIR / "uptime").read_bytes()
    except OSError:
        return False
    return _mounted()


def _mounted() -> bool:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if fields[4] == str(MOUNT) and "fuse" in line.split(" - ", 1)[1].split()[0]:
                return True
    return False


def _files(registry: Path) -> tuple[Path, Path, Path]:
    """The lock, pid file and log of the daemon serving this mount namespace's MOUNT. A mount
    namespace of its own (a lab host of this computer) has a MOUNT of its own and so a daemon
    of its own: one shared pid file would let one daemon's lock keep the other from starting."""
    namespace = os.readlink("/proc/self/ns/mnt").strip("mnt:[]")
    return (registry / f".lxcfs-{namespace}.lock", registry / f"lxcfs-{namespace}.pid",
            registry / f"lxcfs-{namespace}.log")


@contextlib.contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(registry: Path) -> bool:
    """A live LXCFS on MOUNT: the one running, or a new one started now (a dead one's mount is
    taken away first). Returns True when it started one (running nodes need `rebind`)."""
    if alive():
        return False
    lock_file, pid_file, log = _files(registry)
    with _locked(lock_file):
        if alive():
            return False
        if _mounted():  # the daemon died: its mount answers ENOTCONN until it goes
            subprocess.run(["umount", "-l", str(MOUNT)], capture_output=True)
        MOUNT.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as output:
            # `setsid -f`: a session of its own whose parent exits at once, so this computer's
            # init reaps it, not the runtime (a worker's child would stay a zombie, and die
            # with the worker's process group). -l: each node's own load average;
            # --enable-pidfd: a pid it tracks cannot be confused with a reused one.
            started = subprocess.run(
                ["setsid", "-f", "lxcfs", "-f", "-l", "--enable-pidfd", "-p", str(pid_file),
                 str(MOUNT)],
                stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            )
        deadline = time.monotonic() + START_WAIT
        while not alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive():
            raise RuntimeError(f"LXCFS did not start on {MOUNT} (status {started.returncode}; {log})")
        return True


def pid_of_daemon(registry: Path) -> int | None:
    """The pid of the LXCFS the runtime started here (tests end it to check it comes back)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(_files(registry)[1].read_text().split()[0])
        if Path(f"/proc/{pid}/exe").resolve().name == "lxcfs":
            return pid
    return None


def rebind(pid: int) -> None:
    """Bind the live daemon's files into the mount namespace of the node whose PID 1 is `pid`,
    over the ones a dead daemon left there. Run in a process of its own (`main`): it enters the
    node's mount namespace for good."""
    names = sorted(entry.name for entry in (MOUNT / PROC_DIR).iterdir())
    trees = {}
    for relative in [f"{PROC_DIR}/{name}" for name in names] + [CPU_DIR]:
        trees[relative] = _syscall(SYS_OPEN_TREE, -100, str(MOUNT / relative).encode(),
                                   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    # This process's own /proc entry, opened before it leaves: in the node's mount namespace
    # /proc is the node's, where this process has no pid.
    own = os.open("/proc/self", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    namespace = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(namespace, CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(namespace)
    os.chdir("/")
    for relative, tree in trees.items():
        target = f"/{relative}"
        # Every stale layer (a dead daemon's file answers ENOTCONN even to stat, so the mount
        # table says what is there, not the file).
        for _ in range(8):
            if _mount_point_of(own, target) != target:
                break
            if _libc.umount2(target.encode(), MNT_DETACH) != 0:
                raise OSError(ctypes.get_errno(), f"umount {target}")
        try:
            _syscall(SYS_MOVE_MOUNT, tree, b"", -100, target.encode(), MOVE_MOUNT_F_EMPTY_PATH)
        except FileNotFoundError:  # a file this node's kernel does not have
            continue


def _mount_point_of(own: int, path: str) -> str:
    """The innermost mount point at `path` or above it, in this process's mount namespace."""
    with open(os.open("mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=own)) as mountinfo:
        points = [line.split()[4] for line in mountinfo.read().splitlines()]
    candidates = [point for point in points if path == point or path.startswith(point.rstrip("/") + "/")]
    return max(candidates, key=len) if candidates else "/"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "rebind":
        print("usage: lxcfs.py rebind PID", file=sys.stderr)
        return 2
    rebind(int(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
