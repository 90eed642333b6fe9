"""A minimal SSH server for machines without OpenSSH: runs each exec request with bash.

Started by `sandbox.start_endpoints(kind="asyncssh")` as its own process (so its event
loop never competes with the control plane for the GIL). Standalone on purpose: no
package imports, runnable as `python _asyncssh_server.py --host-key K --authorized-keys A
127.1.0.1:2222 127.1.0.2:2222 ...`. Listens on loopback addresses only.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
from collections.abc import Callable

import asyncssh


async def _pump(
    reader: asyncio.StreamReader, write: Callable[[bytes], object], close: Callable[[], object] | None = None,
) -> None:
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        write(chunk)
    if close is not None:
        close()


async def handle_process(process: asyncssh.SSHServerProcess) -> None:
    command = process.command
    if command is None:
        process.stderr.write(b"runcrate sandbox: interactive shells are not supported\n")
        process.exit(1)
        return
    shell = os.environ.get("SHELL") or "/bin/bash"
    child = await asyncio.create_subprocess_exec(
        shell,
        "-c",
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=os.path.expanduser("~"),
        start_new_session=True,
    )
    # PIPE for all three: the streams exist.
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    stdin = child.stdin

    async def feed_stdin() -> None:
        try:
            while True:
                data = await process.stdin.read(65536)
                if not data:
                    break
                stdin.write(data)
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError, asyncssh.BreakReceived):
            pass
        finally:
            if not stdin.is_closing():
                stdin.close()

    stdin_task = asyncio.create_task(feed_stdin())
    await asyncio.gather(
        _pump(child.stdout, process.stdout.write),
        _pump(child.stderr, process.stderr.write),
    )
    code = await child.wait()
    stdin_task.cancel()
    process.exit(code)


async def serve(host_key: str, authorized_keys: str, listen: list[str]) -> None:
    servers = []
    for address in listen:
        host, _, port = address.rpartition(":")
        if not ipaddress.ip_address(host).is_loopback:
            raise SystemExit(f"refusing to listen on non-loopback address {host}")
        servers.append(
            await asyncssh.create_server(
                asyncssh.SSHServer,
                host,
                int(port),
                server_host_keys=[host_key],
                authorized_client_keys=authorized_keys,
                process_factory=handle_process,
                encoding=None,
                sftp_factory=True,
                allow_scp=True,
                password_auth=False,
                kbdint_auth=False,
            )
        )
    print("READY", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host-key", required=True)
    parser.add_argument("--authorized-keys", required=True)
    parser.add_argument("listen", nargs="+", help="host:port (loopback only)")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host_key, args.authorized_keys, args.listen))


if __name__ == "__main__":
    main()
