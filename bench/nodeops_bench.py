"""How node steps scale with cluster size: the nodeops runner vs parallel-ssh.

For N = 1, 8, 32, 64 local sshd endpoints (loopback only) run the same representative
step, set_names (hostname + /etc/hosts for every node) followed by a check that reads the
result back, through

- the nodeops runner with a fresh SSH connection per node per step (what a lifecycle
  task does), "runner cold";
- the nodeops runner with connections kept open between steps, "runner warm";
- Debian's `parallel-ssh -p N` (OpenSSH client processes) sending the same script on
  stdin to `bash -s`.

Prints wall time (median of --repeat runs) and the ratio to N=1 for each; then what
join_network takes on 4 nodes of which two never join, with a 3 s join wait: the peers
are waited for together, so about 3 s, not 6.

    .venv/bin/python bench/nodeops_bench.py [--sizes 1,8,32,64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusters.nodeops import operations as ops
from clusters.nodeops.operations import write_fault
from clusters.nodeops.runner import NodeRunner, RetryPolicy, build_payload, load_script
from clusters.providers.local.sandbox import start_endpoints

CHECK = """\
set -euo pipefail
test "$(cat "$RUNCRATE_ROOT/etc/hostname")" = "$RUNCRATE_NODE_NAME"
grep -c 'node-' "$RUNCRATE_ROOT/etc/hosts"
"""


def runner_step(spec, runner: NodeRunner, check: str) -> None:
    names = ops.set_names(spec, runner=runner)
    assert names.ok, names.summary()
    checked = runner.run(spec.nodes, check, step="check", env={})
    assert all(result.ok for result in checked.values()), [r.stderr for r in checked.values() if not r.ok]


def pssh_payload(spec, script: str) -> str:
    """One payload for every host: each picks its own identity from $SSH_CONNECTION."""
    cases = "".join(
        f"    {node.host}:{node.port}) export RUNCRATE_ROOT={shlex.quote(node.root)} "
        f"RUNCRATE_NODE_NAME={node.name} RUNCRATE_NODE_INDEX={node.index} "
        f"RUNCRATE_PRIVATE_IP={node.private_ip} ;;\n"
        for node in spec.nodes
    )
    identity = (
        'read -r _ _ server_ip server_port <<<"$SSH_CONNECTION"\n'
        f'case "$server_ip:$server_port" in\n{cases}    *) echo "unknown endpoint" >&2; exit 9 ;;\nesac\n'
    )
    return build_payload(identity + script, ops.cluster_env(spec))


def pssh_step(spec, pssh: str, hosts_file: Path, key: str, payloads: list[str]) -> None:
    ssh_options = f"-i {key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
    for payload in payloads:
        result = subprocess.run(
            [pssh, "-h", str(hosts_file), "-p", str(len(spec.nodes)), "-t", "120", "-x", ssh_options, "-I", "bash -s"],
            input=payload,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"parallel-ssh failed:\n{result.stdout}\n{result.stderr}")


def timed(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,8,32,64")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kind", default="openssh", choices=["openssh", "asyncssh"])
    parser.add_argument(
        "--node-seconds",
        type=float,
        default=0.0,
        help="add this much waiting (sleep) to each node's check, standing in for node work "
        "that runs on the node's own hardware (apt, a network wait) rather than on this CPU",
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    pssh = shutil.which("parallel-ssh") or shutil.which("pssh")
    check = CHECK + (f"sleep {args.node_seconds}\n" if args.node_seconds else "")

    rows = []
    with tempfile.TemporaryDirectory(prefix="nodeops-bench-") as workdir:
        pool = start_endpoints(max(*sizes, 4), workdir, kind=args.kind)
        try:
            hosts_file = Path(workdir) / "hosts"
            for size in sizes:
                pool.reset_roots()
                spec = pool.spec(cluster_id="bench", count=size)
                policy = RetryPolicy(connect_timeout=10, attempts=2, backoff=0.2)
                with NodeRunner(policy) as cold:
                    runner_step(spec, cold, check)  # warm the page cache and sshd, not the connections
                    cold_time = timed(lambda: runner_step(spec, cold, check), args.repeat)
                with NodeRunner(policy, keep_connections=True) as warm:
                    runner_step(spec, warm, check)
                    warm_time = timed(lambda: runner_step(spec, warm, check), args.repeat)
                pssh_time = None
                if pssh and args.kind == "openssh":
                    hosts_file.write_text("".join(f"{n.user}@{n.host}:{n.port}\n" for n in spec.nodes))
                    payloads = [pssh_payload(spec, load_script("set_names.sh")), pssh_payload(spec, check)]
                    pssh_step(spec, pssh, hosts_file, pool.client_key, payloads)
                    pssh_time = timed(lambda: pssh_step(spec, pssh, hosts_file, pool.client_key, payloads), args.repeat)
                rows.append((size, cold_time, warm_time, pssh_time))
                print(f"  N={size}: cold {cold_time:.2f}s warm {warm_time:.2f}s pssh {pssh_time or 0:.2f}s", file=sys.stderr)
            join_time = join_with_absent_peers(pool)
        finally:
            pool.stop()

    base = rows[0]
    extra = f" + {args.node_seconds:g}s node-side wait" if args.node_seconds else ""
    print(f"\nnodeops bench: set_names + check{extra}, {args.kind} endpoints, {os.cpu_count()} CPUs, median of {args.repeat}")
    print(f"{'N':>4} | {'runner cold':>11} {'ratio':>6} | {'runner warm':>11} {'ratio':>6} | {'parallel-ssh':>12} {'ratio':>6}")
    print("-" * 72)
    for size, cold_time, warm_time, pssh_time in rows:
        pssh_cells = f"{pssh_time:>11.2f}s {pssh_time / base[3]:>5.2f}x" if pssh_time and base[3] else f"{'n/a':>12} {'':>6}"
        print(
            f"{size:>4} | {cold_time:>10.2f}s {cold_time / base[1]:>5.2f}x | "
            f"{warm_time:>10.2f}s {warm_time / base[2]:>5.2f}x | {pssh_cells}"
        )
    if not pssh:
        print("parallel-ssh not installed (apt-get install pssh): column skipped")
    print(f"\njoin_network, 4 nodes, 2 never join, 3 s join wait: {join_time:.2f}s (waited one after the other: over 6 s)")


def join_with_absent_peers(pool) -> float:
    pool.reset_roots()
    spec = pool.spec(cluster_id="bench-join", count=4)
    for index in (2, 3):
        write_fault(Path(spec.nodes[index].root), "never_joins")
    with NodeRunner(RetryPolicy(connect_timeout=10, attempts=2, backoff=0.2)) as runner:
        ops.set_names(spec, runner=runner)
        started = time.monotonic()
        ops.join_network(spec, runner=runner, wait_seconds=3)
        return time.monotonic() - started


if __name__ == "__main__":
    main()
