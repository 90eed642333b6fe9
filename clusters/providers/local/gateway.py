"""A node's SSH gateway: a loopback port of this computer that forwards each connection into
the node's sshd, for as long as the node runs and not a moment longer.

Started by `realnodes.start_gateway`, which hands it two descriptors: the listening socket
(bound there, so a port that cannot be had fails at once and nothing waits for this program
to start listening) and a pidfd of the node's PID 1, opened and checked to be that very
process before it was handed over: a pidfd names one process, never a pid that gets reused.
When PID 1 exits (the node's root can end it, through ptrace for one), the pidfd turns
readable, and the gateway closes its port and ends every connection it forwards.

Each connection runs `nsenter --net=<the node's netns bind mount> socat - TCP:127.0.0.1:22`
with the connection as its stdin and stdout: it enters the node's network namespace by its
mount under /run/netns, which stays that node's namespace until release deletes it (a dead
node's namespace has nothing listening: the connection is refused). It never enters a
namespace by a pid.

Run with `python -I -S`: the standard library only, no Django, no site packages.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import socket
import sys


def _forward(connection: socket.socket, netns: str, nsenter: str, socat: str) -> None:
    """One connection into the node's sshd, in a process of its own (reaped by the kernel:
    SIGCHLD is ignored)."""
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = connection.fileno()
    try:
        os.posix_spawn(
            nsenter, [nsenter, f"--net={netns}", socat, "-", "TCP:127.0.0.1:22,nodelay"],
            {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, 0), (os.POSIX_SPAWN_DUP2, fd, 1)],
            setsigdef=(signal.SIGCHLD,),
        )
    except OSError as error:
        print(f"gateway: could not forward a connection: {error}", file=sys.stderr, flush=True)
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", required=True, help="the node's state directory (names this gateway)")
    parser.add_argument("--netns", required=True, help="the node's network namespace bind mount")
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--pidfd", type=int, required=True)
    args = parser.parse_args(argv)
    nsenter, socat = shutil.which("nsenter"), shutil.which("socat")
    if not nsenter or not socat:
        print("gateway: nsenter and socat are needed", file=sys.stderr, flush=True)
        return 1
    # Neither descriptor goes to the forwarding processes.
    for fd in (args.listen_fd, args.pidfd):
        os.set_inheritable(fd, False)
    listener = socket.socket(fileno=args.listen_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    poller = select.poll()
    poller.register(listener.fileno(), select.POLLIN)
    poller.register(args.pidfd, select.POLLIN)
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        if any(fd == args.pidfd for fd, _ in events):
            break
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            continue
        _forward(connection, args.netns, nsenter, socat)
    print("gateway: the machine stopped; its gateway is closed", file=sys.stderr, flush=True)
    listener.close()
    # Every connection still forwarded (they are in this process group, a session of its own)
    # ends with the gateway.
    os.killpg(0, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
