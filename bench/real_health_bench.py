"""What one node health round costs on real nodes, at 8 and 64 nodes.

N real nodes (clusters.providers.local.realnodes: namespaces, their own sshd, wireguard-go) are booted
and joined to the private network as the `local` provider does, then health rounds
(clusters.node_health.node.check_health) run as the beat's per-cluster task runs them: a cold round on a
fresh runner (a new SSH connection per node) and warm rounds over kept connections.

For each round: wall time; CPU, counted as the control plane's own (this process, every
thread) plus the nodes' (every process in each node's PID namespace, with the CPU of the
children it reaped: the shells and pings a round starts end up there); and the verdicts that
were not healthy (on an idle, healthy cluster every one of them is false). The sandbox's
health bench (bench/health_bench.py) cannot show this: its `ping` is a stand-in.

`--script FILE` runs another health.sh (e.g. the previous one, `git show <rev>:clusters/node_health/
health.sh > /tmp/old-health.sh`) for a before/after in one run. Prints figures,
asserts nothing; skipped where this computer cannot run namespaces.

    .venv/bin/python bench/real_health_bench.py [--sizes 8,64] [--rounds 3] [--script FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusters.node_health import node as health_node
from clusters.nodeops import operations
from clusters.nodeops import runner as runner_module
from clusters.nodeops.runner import NodeRunner, RetryPolicy
from clusters.nodeops.targets import ClusterSpec, NodeTarget, private_ip
from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import write_ed25519_keypair

BOOT_THREADS = 16  # clusters.providers.local.provider.BOOT_THREADS (importing it needs Django)
TICK = os.sysconf("SC_CLK_TCK")


def namespace_cpu(pid_namespaces: list[str]) -> Counter[str]:
    """Seconds of CPU every process of these PID namespaces has used, its reaped children's
    included (utime + stime + cutime + cstime), by command name."""
    wanted = set(pid_namespaces)
    total: Counter[str] = Counter()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "ns" / "pid") not in wanted:
                continue
            comm, fields = (proc / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        total[comm.split("(", 1)[1]] += sum(int(value) for value in fields.split()[11:15]) / TICK
    return total


def use_script(path: str | None) -> None:
    if path is None:
        return
    original = runner_module.load_script
    text = Path(path).read_text()

    def load(script: str | Path, **options: bool) -> str:
        if script == health_node.SCRIPT:
            return (runner_module.SCRIPTS_DIR / "lib.sh").read_text() + "\n" + text
        return original(script, **options)

    operations.load_script = load  # type: ignore[assignment]


def one_size(count: int, rounds: int, workdir: Path) -> list[tuple[Any, ...]]:
    run = workdir / f"health-{count}"
    run.mkdir(parents=True)
    public = write_ed25519_keypair(run / "client", "bench-control-plane")
    states = [run / f"m{i}" for i in range(count)]
    rows = []
    try:
        with ThreadPoolExecutor(max_workers=min(BOOT_THREADS, count)) as pool:
            handles = list(pool.map(
                lambda state: realnodes.boot(run, state, key=state.name, hostname=state.name,
                                             authorized_keys=public + "\n"),
                states,
            ))
        realnodes.pin_neighbours(handles)
        pid_namespaces = [realnodes.namespaces(h)["pid"] for h in handles]
        nodes = tuple(
            NodeTarget(name=f"node-{i}", index=i, host=h.address, port=22, user="root",
                       key_filename=str(run / "client"), root="", private_ip=private_ip(i),
                       proxy_command=h.proxy_command)
            for i, h in enumerate(handles)
        )
        spec = ClusterSpec(cluster_id=f"health-{count}", software="none", machine_kind="vm",
                           gpus_per_machine=1, nodes=nodes, sandbox=False)
        secrets = operations.generate_secrets(spec)
        with NodeRunner(RetryPolicy(connect_timeout=5, attempts=5, backoff=0.2), keep_connections=True) as setup:
            for step in (operations.set_names, operations.join_network):
                result = step(spec, secrets=secrets, runner=setup,
                              **({"wait_seconds": 20} if step is operations.join_network else {}))
                if not result.ok:
                    raise RuntimeError(result.summary())
        time.sleep(1)
        by_command: dict[str, Counter[str]] = {"cold": Counter(), "warm": Counter()}

        def measured(label: str, runner: NodeRunner) -> None:
            nodes_before, own_before, started = namespace_cpu(pid_namespaces), time.process_time(), time.monotonic()
            result = health_node.check_health(spec, runner=runner)
            wall = time.monotonic() - started
            own = time.process_time() - own_before
            spent = namespace_cpu(pid_namespaces)
            spent.subtract(nodes_before)
            by_command[label].update(spent)
            bad = [f"{v.name} {v.health}: {v.detail}" for v in result.health.values() if v.health != "healthy"]
            for line in bad:
                print(f"      {count} nodes, {label} round, false verdict: {line}")
            rows.append((label, wall, own, sum(spent.values()), len(bad)))

        with NodeRunner(health_node.HEALTH_POLICY) as cold:
            measured("cold", cold)
        with NodeRunner(health_node.HEALTH_POLICY, keep_connections=True) as warm:
            health_node.check_health(spec, runner=warm)  # opens the kept connections
            for _ in range(rounds):
                measured("warm", warm)
                time.sleep(0.5)
        warm_rounds = sum(1 for row in rows if row[0] == "warm")
        top = ", ".join(f"{name} {seconds / warm_rounds:.2f}s" for name, seconds in by_command["warm"].most_common(4))
        rows.append(("where", 0.0, 0.0, 0.0, 0, top))  # type: ignore[arg-type]
        return rows
    finally:
        for state in states:
            realnodes.release(run, state)
        realnodes.Underlay(run).teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--script", help="another health.sh to run instead of the shipped one")
    args = parser.parse_args()
    can, why = realnodes.capability()
    if not can:
        print(f"real health bench: skipped ({why})")
        return
    use_script(args.script)
    print(f"real health bench: one health round on real nodes ({args.script or 'shipped health.sh'})")
    print(f"{'N':>3} | {'round':>5} | {'wall':>7} | {'CPU total':>9} | {'control plane':>13} | {'nodes':>7} | not healthy")
    print("-" * 78)
    with tempfile.TemporaryDirectory(prefix="rc-bench-") as workdir:
        for count in (int(n) for n in args.sizes.split(",")):
            try:
                rows = one_size(count, args.rounds, Path(workdir))
            except RuntimeError as error:
                print(f"{count:>3} | failed: {error}")
                continue
            for label in ("cold", "warm"):
                mine = [row for row in rows if row[0] == label]
                wall = statistics.median(r[1] for r in mine)
                own = statistics.median(r[2] for r in mine)
                nodes = statistics.median(r[3] for r in mine)
                bad = max(r[4] for r in mine)
                print(f"{count:>3} | {label:>5} | {wall:6.2f}s | {own + nodes:8.2f}s | {own:12.2f}s | {nodes:6.2f}s | {bad}")
            print(" " * 6 + "nodes' CPU in a warm round by command: " + rows[-1][5])


if __name__ == "__main__":
    main()
