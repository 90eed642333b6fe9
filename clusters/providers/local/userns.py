"""A node's user namespaces, owned by the node's own uid of this computer; then exec a command.

Run by a node's boot (`nodeboot.py`, which calls `enter`) as this computer's root, in a fresh
interpreter (one thread: the fork below is safe), or on its own (`realnodes.capability` tries it):

    python3 -I -S userns.py BASE COUNT [max_user_namespaces=N ...] -- COMMAND ...

It makes two user namespaces, both owned by BASE (the node's uid range's first uid, an
unprivileged uid of this computer without a passwd entry):

- the **outer** one maps 0..COUNT-1 to BASE..BASE+COUNT-1 and carries the node's limits in its
  `/proc/sys/user` (the `name=value` arguments, written here before the node exists). No
  process of the node holds a capability in it, so the node cannot raise them;
- the **node's own**, inside it, maps the same ids one to one. Its root may raise what its own
  `/proc/sys/user` shows; the kernel checks every namespace above it as well.

The kernel charges what a process creates (user and other namespaces, inotify instances, …)
to (namespace, uid) at each level up the chain of namespace owners, each level against that
namespace's own limit. With BASE the owner at every level, nothing a node creates counts
against this computer's root or another node.

`newuidmap` refuses a uid without a passwd entry, so this computer's root writes the maps: a
child forked before the uid drop writes the outer namespace's maps from this computer's
namespace, then joins the outer namespace to write the node's (the kernel takes a map only
from a process in the namespace itself or in its parent).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys

CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
LIMIT = re.compile(r"^(max_[a-z_]+)=(\d+)$")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _await(fd: int) -> None:
    """Wait for the other process's go-ahead; its end closing means it stopped."""
    if os.read(fd, 1) != b"+":
        raise SystemExit("the node's user namespaces could not be made")


def _write_maps(pid: int, base: int, count: int, go: int, done: int) -> None:
    """The map writer, as this computer's root: the outer namespace's maps, then (from inside
    it) the node's."""
    _await(go)
    for name in ("uid_map", "gid_map"):
        _write(f"/proc/{pid}/{name}", f"0 {base} {count}\n")
    outer = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    _check(_libc.setns(outer, CLONE_NEWUSER), "joining the outer user namespace")
    os.close(outer)
    os.write(done, b"+")
    _await(go)
    for name in ("uid_map", "gid_map"):
        _write(f"/proc/{pid}/{name}", f"0 0 {count}\n")
    os.write(done, b"+")


def enter(base: int, count: int, limits: list[tuple[str, str]]) -> None:
    """Make the node's two user namespaces (the module's docstring) and move this process into
    the inner one, as its root, with the node's `limits` in the outer one's /proc/sys/user.
    This process must have no other threads (it forks the map writer)."""
    pid = os.getpid()
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    writer = os.fork()
    if writer == 0:
        os.close(go_write)
        os.close(done_read)
        status = 1
        try:
            _write_maps(pid, base, count, go_read, done_write)
            status = 0
        except (OSError, SystemExit) as error:
            print(f"user namespace maps: {error}", file=sys.stderr, flush=True)
        finally:
            os._exit(status)
    os.close(go_read)
    os.close(done_write)
    os.setgroups([])
    os.setresgid(base, base, base)
    os.setresuid(base, base, base)
    # A uid change makes the kernel mark this process undumpable, and its /proc files then
    # belong to this computer's root, which the writer, once in the outer namespace, cannot
    # open. Only processes of uid BASE outside the node could trace it, and there are none.
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl")
    _check(_libc.unshare(CLONE_NEWUSER), "making the outer user namespace")
    os.write(go_write, b"+")
    _await(done_read)
    for name, value in limits:
        _write(f"/proc/sys/user/{name}", value)
    _check(_libc.unshare(CLONE_NEWUSER), "making the node's user namespace")
    os.write(go_write, b"+")
    _await(done_read)
    _, status = os.waitpid(writer, 0)
    if status != 0:
        raise SystemExit("the node's user namespaces could not be mapped")
    for fd in (go_write, done_read):
        os.close(fd)


def parse_limits(items: list[str]) -> list[tuple[str, str]]:
    limits = []
    for item in items:
        matched = LIMIT.match(item)
        if not matched:
            raise SystemExit(f"not a /proc/sys/user limit: {item}")
        limits.append((matched.group(1), matched.group(2)))
    return limits


def main(argv: list[str]) -> None:
    split = argv.index("--")
    base, count = int(argv[0]), int(argv[1])
    limits = parse_limits(argv[2:split])
    command = argv[split + 1:]
    # Found now: once this process is the node's uid, this computer's Python library (under
    # root's home, say) may be closed to it.
    program = shutil.which(command[0])
    if program is None:
        raise SystemExit(f"{command[0]}: not found")
    enter(base, count, limits)
    os.execv(program, command)


if __name__ == "__main__":
    main(sys.argv[1:])
