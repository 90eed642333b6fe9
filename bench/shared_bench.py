"""/shared on real nodes: the head's own read and write speed beside a worker's, side by side.

Boots a head and two workers (clusters.providers.local.realnodes), runs the node path as the
`local` provider does up to setup_shared (the workers get the head's own /shared filesystem from
this computer, realnodes.lend_shared), then times, in alternating rounds, the same work on the
head's /shared (its own disk), on a worker's /shared, and on the head's /shared mounted on the
other worker with sshfs to the head's underlay address (what a worker on another computer
mounts, setup_shared.sh's options): writing a file of random bytes and `fsync`ing it, and
reading back a file that is in no cache (the head drops its pages with posix_fadvise; the
worker has never read it). With --wg0 it also times sshfs over wg0 with default options (the
mount before both). Prints medians, asserts nothing; skipped where this computer cannot run
namespaces.

    .venv/bin/python bench/shared_bench.py [--mib 256] [--rounds 5] [--wg0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusters.nodeops import operations
from clusters.nodeops.runner import NodeRunner, RetryPolicy
from clusters.nodeops.targets import ClusterSpec, NodeTarget, private_ip
from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import write_ed25519_keypair

# Run inside a node: time one write (random bytes from memory, then fsync) or one cold read of
# DIR/NAME and print MB/s. The source is made before the clock starts, so only /shared is timed.
MEASURE = r"""
import os, sys, time
action, directory, name, mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
path = os.path.join(directory, name)
block = 1 << 20
if action == "write":
    data = os.urandom(block * 16)
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for i in range(mib):
        offset = (i % 16) * block
        os.write(fd, data[offset:offset + block])
    os.fsync(fd)
    os.close(fd)
elif action == "drop":
    # The head's pages of the file, so the next read comes from its disk.
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    sys.exit(0)
else:
    started = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    while os.read(fd, block):
        pass
    os.close(fd)
print(f"{mib * block / (time.monotonic() - started) / 1e6:.0f}")
"""

# A worker on another computer than the head's: sshfs to the head's underlay address, with
# setup_shared.sh's options.
SSHFS_OPTIONS = ("allow_other,IdentityFile=/root/.ssh/id_ed25519,HostKeyAlias=node-0,StrictHostKeyChecking=yes,"
                 "GlobalKnownHostsFile=/etc/ssh/ssh_known_hosts,UserKnownHostsFile=/dev/null,"
                 "KexAlgorithms=curve25519-sha256,Ciphers=aes128-gcm@openssh.com,Compression=no,max_conns=4,"
                 "max_read=261120,max_write=261120")
# The first mount of all: sshfs over wg0 with default options.
WG0_OPTIONS = ("allow_other,IdentityFile=/root/.ssh/id_ed25519,HostKeyAlias=node-0,StrictHostKeyChecking=yes,"
               "GlobalKnownHostsFile=/etc/ssh/ssh_known_hosts,UserKnownHostsFile=/dev/null,KexAlgorithms=curve25519-sha256")


def in_node(handle: realnodes.NodeHandle, *command: str) -> str:
    result = realnodes.run_in(handle, list(command), timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)[:80]}: {result.stderr.strip()[-400:]}")
    return result.stdout.strip()


def measure(handle: realnodes.NodeHandle, action: str, directory: str, name: str, mib: int) -> float:
    return float(in_node(handle, "python3", "-c", MEASURE, action, directory, name, str(mib)))


def boot_cluster(run: Path, count: int) -> tuple[list[realnodes.NodeHandle], ClusterSpec]:
    public = write_ed25519_keypair(run / "client", "bench-control-plane")
    handles = [realnodes.boot(run, run / f"m{i}", key=f"m{i}", hostname=f"m{i}", authorized_keys=public + "\n")
               for i in range(count)]
    realnodes.pin_neighbours(handles)
    nodes = tuple(
        NodeTarget(name=f"node-{i}", index=i, host=h.address, port=22, user="root", key_filename=str(run / "client"),
                   root="", private_ip=private_ip(i), proxy_command=h.proxy_command)
        for i, h in enumerate(handles)
    )
    spec = ClusterSpec(cluster_id="bench-shared", software="none", machine_kind="vm", gpus_per_machine=1,
                       nodes=nodes, sandbox=False, extra_env=(("RUNCRATE_SHARED_FROM_HOST", "1"),))
    for worker in handles[1:]:
        realnodes.lend_shared(handles[0], worker)
    secrets = operations.generate_secrets(spec)
    with NodeRunner(RetryPolicy(connect_timeout=5, attempts=5, backoff=0.2), keep_connections=True) as runner:
        for result in (operations.set_names(spec, secrets=secrets, runner=runner),
                       operations.join_network(spec, secrets=secrets, runner=runner, wait_seconds=20),
                       operations.setup_shared(spec, runner=runner)):
            if not result.ok:
                raise RuntimeError(result.summary())
    return handles, spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="size of each file (MiB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wg0", action="store_true", help="also time the previous mount (sshfs over wg0)")
    args = parser.parse_args()
    can, why = realnodes.capability()
    if not can:
        print(f"shared bench: skipped ({why})")
        return
    with tempfile.TemporaryDirectory(prefix="rc-bench-shared-") as workdir:
        run = Path(workdir)
        handles: list[realnodes.NodeHandle] = []
        try:
            handles, spec = boot_cluster(run, 3)
            head, worker = handles[0], handles[1]
            places = {"head (its own disk)": (head, "/shared"), "worker (/shared)": (worker, "/shared")}
            in_node(handles[2], "bash", "-c", "mkdir -p /mnt/sshfs-shared && "
                    f"sshfs root@{head.address}:/shared /mnt/sshfs-shared -o {SSHFS_OPTIONS}")
            places["worker (sshfs to the underlay)"] = (handles[2], "/mnt/sshfs-shared")
            if args.wg0:
                in_node(handles[2], "bash", "-c", "mkdir -p /mnt/wg0-shared && "
                        f"sshfs root@{spec.head.private_ip}:/shared /mnt/wg0-shared -o {WG0_OPTIONS}")
                places["worker (sshfs over wg0)"] = (handles[2], "/mnt/wg0-shared")
            mount = in_node(worker, "bash", "-c", "grep ' /shared ' /proc/mounts | tail -n 1 | cut -d' ' -f1,3")
            figures: dict[str, dict[str, list[float]]] = {place: {"write": [], "read": []} for place in places}
            for round_number in range(args.rounds):
                for place, (handle, directory) in places.items():
                    name = f"bench-{round_number}-{handle.key}"
                    figures[place]["write"].append(measure(handle, "write", directory, name, args.mib))
                    # Read back from no cache: the head drops its pages, and a FUSE mount keeps
                    # none of a file across opens (sshfs without kernel_cache).
                    in_node(head, "python3", "-c", MEASURE, "drop", "/shared", name, "0")
                    figures[place]["read"].append(measure(handle, "read", directory, name, args.mib))
                    in_node(head, "rm", "-f", f"/shared/{name}")
            print(f"shared bench: {args.mib} MiB files, median of {args.rounds} rounds; the workers mount {mount}")
            head_figures = figures["head (its own disk)"]
            print(f"{'where':>32} | {'write MB/s':>10} | {'read MB/s':>9} | of the head's (write, read)")
            print("-" * 80)
            for place, measured in figures.items():
                write, read = statistics.median(measured["write"]), statistics.median(measured["read"])
                share = (f"{write / statistics.median(head_figures['write']):.0%}, "
                         f"{read / statistics.median(head_figures['read']):.0%}")
                print(f"{place:>32} | {write:>10.0f} | {read:>9.0f} | {share}")
        finally:
            for i in range(len(handles) or 3):
                realnodes.release(run, run / f"m{i}")
            realnodes.Underlay(run).teardown()


if __name__ == "__main__":
    main()
