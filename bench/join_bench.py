"""The join's two rounds on real nodes, at two sizes: wg0 up on every node, then the every-pair
proof (join_network.sh "reach-peers": each pair's WireGuard handshake, read from `wg show`).
Boots N real nodes as the local provider does, names them, joins them, and prints each
round's wall time, the wireguard-go CPU the join cost (its handshakes) and the ratio of the
larger size to the smaller: the pairs grow with the square of the nodes, the goal is that the
rounds do not (≤ 2.2× from 32 to 64 machines). Prints figures; asserts nothing; skipped
where this computer cannot run namespaces.

    .venv/bin/python bench/join_bench.py [--sizes 32,64] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusters.nodeops import operations
from clusters.nodeops.runner import NodeRunner, RetryPolicy
from clusters.nodeops.targets import ClusterSpec, NodeTarget, private_ip
from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import write_ed25519_keypair

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import machine_cpu_seconds, median, table

BOOT_THREADS = 16  # clusters.providers.local.provider.BOOT_THREADS (importing it needs Django)
GOAL = 2.2


def wireguard_cpu(handles: list[realnodes.NodeHandle]) -> float:
    """CPU seconds every node's wireguard-go has used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for handle in handles:
        for pid in realnodes.processes_in({"pid": realnodes.namespaces(handle)["pid"]}):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
            if name == "wireguard-go":
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def one_join(count: int, workdir: Path) -> dict[str, float]:
    workdir.mkdir(parents=True)
    public = write_ed25519_keypair(workdir / "client", "bench-join")
    states = [workdir / f"m{i}" for i in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=min(BOOT_THREADS, count)) as pool:
            handles = list(pool.map(lambda state: realnodes.boot(
                workdir, state, key=state.name, hostname=state.name, authorized_keys=public + "\n"), states))
        realnodes.pin_neighbours(handles)
        spec = ClusterSpec(
            cluster_id=f"join-bench-{count}", software="none", machine_kind="vm", gpus_per_machine=1, sandbox=False,
            nodes=tuple(NodeTarget(name=f"node-{i}", index=i, host=h.address, port=22, user="root",
                                   key_filename=str(workdir / "client"), root="", private_ip=private_ip(i),
                                   proxy_command=h.proxy_command) for i, h in enumerate(handles)),
        )
        secrets = operations.generate_secrets(spec)
        with NodeRunner(RetryPolicy(connect_timeout=10, attempts=5, backoff=0.2), keep_connections=True) as runner:
            if not operations.set_names(spec, secrets=secrets, runner=runner).ok:
                raise RuntimeError("set_names failed")
            cpu = machine_cpu_seconds()
            joined = operations.join_network(spec, secrets=secrets, runner=runner, wait_seconds=60)
            cpu = machine_cpu_seconds() - cpu
        if not joined.joined:
            raise RuntimeError(f"{len(joined.failed_pairs)} pairs not joined: {joined.summary()[:300]}")
        return {"up": joined.rounds["up"], "reach": joined.rounds["reach"], "wireguard": wireguard_cpu(handles),
                "cpu": cpu}
    finally:
        for state in states:
            realnodes.release(workdir, state)
        realnodes.Underlay(workdir).teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="32,64")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    can, why = realnodes.capability()
    if not can:
        print(f"join bench: skipped ({why})")
        return
    small, large = (int(n) for n in args.sizes.split(","))
    figures: dict[int, list[dict[str, float]]] = {small: [], large: []}
    with tempfile.TemporaryDirectory(prefix="rc-join-") as workdir:
        for attempt in range(args.repeat):
            for count in (small, large):
                try:
                    figures[count].append(one_join(count, Path(workdir) / f"{count}-{attempt}"))
                except RuntimeError as error:
                    print(f"join of {count}: failed: {error}")
    if not figures[small] or not figures[large]:
        return

    def mid(count: int, key: str) -> float:
        return median([run[key] for run in figures[count]])

    rows = []
    for key, label in (("up", "WireGuard-up round"), ("reach", "every-pair round")):
        ratio = mid(large, key) / mid(small, key)
        rows.append((f"{label}, {large} vs {small} machines", f"{mid(large, key):.2f} s vs {mid(small, key):.2f} s "
                     f"({ratio:.2f}×)", f"≤ {GOAL}×", ratio <= GOAL))
    rows.append((f"wireguard-go CPU of the join, {large} vs {small}",
                 f"{mid(large, 'wireguard'):.2f} s vs {mid(small, 'wireguard'):.2f} s "
                 f"({mid(large, 'wireguard') / max(mid(small, 'wireguard'), 0.01):.2f}×; pairs "
                 f"{large * (large - 1) // 2} vs {small * (small - 1) // 2})", "", True))
    rows.append((f"this computer's CPU during the join, {large} vs {small}",
                 f"{mid(large, 'cpu'):.1f} s vs {mid(small, 'cpu'):.1f} s", "", True))
    print(f"join bench: real nodes, median of {statistics.median([len(figures[small]), len(figures[large])]):.0f} "
          f"run(s) a size ({time.strftime('%H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f})")
    print(table(rows))


if __name__ == "__main__":
    main()
