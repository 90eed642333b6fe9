"""Real nodes on this computer: time to ready and what each node costs in memory.

For N = 2, 8, 32 and software none / Slurm (and Ray at 2 with --ray): boot N real nodes
(clusters.providers.local.realnodes), then run the node path exactly as the `local` provider does
(set_names, join_network over WireGuard, setup_shared, install, check_ready until ready,
Slurm's acceptance job included), and release them. Memory per node is the proportional set
size (PSS) of every process in the node's PID namespace once it is ready. Prints figures,
asserts nothing; skipped where this computer cannot run namespaces.

    .venv/bin/python bench/real_nodes_bench.py [--sizes 2,4,8] [--software none,slurm] [--ray] [--repeat 30]
        [--images base,pytorch]

`--images`: the machine images the nodes boot from (each must be built: `make images`); the
boot phase per node shows what an image costs a boot.

`--repeat N` boots and joins each size N times, each on fresh machines, and prints how many
runs failed (a join that named a pair, a node that never came up) with the times' spread.
"""

from __future__ import annotations

import argparse
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
from _support import ProcessStarts, machine_cpu_seconds

BOOT_THREADS = 16  # clusters.providers.local.provider.BOOT_THREADS (importing it needs Django)


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


# Programs a node may start from its boot to ready (issue 38): each phase one script run.
STARTS_GOAL = 40


# Workers get the head's /shared lent from this computer, as the local provider does (--sshfs: not).
LEND_SHARED = True
# The head's memory by program after the last run: {program: (processes, PSS KiB)}.
HEAD_MEMORY: dict[str, tuple[int, int]] = {}
# The CPU seconds the nodes' own processes used in each phase of the last run, all nodes
# together, from their cgroups (cpuacct): what the nodes cost whatever else this computer runs.
NODE_CPU: dict[str, float] = {}


def nodes_cpu_seconds(handles: list) -> float:
    total = 0
    for handle in handles:
        if handle.cgroup:
            try:
                total += int(Path("/sys/fs/cgroup/cpuacct/runcrate", handle.cgroup, "cpuacct.usage").read_text())
            except (OSError, ValueError):
                continue
    return total / 1e9


def _memory_by_program(pids: list[int]) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for pid in pids:
        try:
            program = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        processes, kib = found.get(program, (0, 0))
        found[program] = (processes + 1, kib + pss_kib([pid]))
    return dict(sorted(found.items(), key=lambda item: -item[1][1]))


def one_run(count: int, software: str, workdir: Path, image: str = realnodes.NODE_IMAGE,
            starts: ProcessStarts | None = None
            ) -> tuple[float, list[int], dict[str, tuple[float, float, float]], float, dict[str, float] | None]:
    """One boot → ready. With `starts` (recording), also the programs the nodes started, per
    node and phase ("phase": per node, "top:<program>": per node)."""
    run = workdir / f"{software}-{count}"
    run.mkdir(parents=True)
    windows: dict[str, tuple[float, float]] = {}
    node_namespaces: set[int] = set()
    public = write_ed25519_keypair(run / "client", "bench-control-plane")
    states = [run / f"m{i}" for i in range(count)]
    started = time.monotonic()
    cpu_started = time.process_time()
    phases: dict[str, tuple[float, float, float]] = {}
    mark, cpu_mark, own_mark = started, machine_cpu_seconds(), cpu_started
    handles: list = []
    NODE_CPU.clear()
    node_cpu_mark = 0.0  # a node's cgroup is new at its boot

    def lap(name: str) -> None:
        nonlocal mark, cpu_mark, own_mark, node_cpu_mark
        now, cpu_now, own_now = time.monotonic(), machine_cpu_seconds(), time.process_time()
        node_cpu_now = nodes_cpu_seconds(handles)
        NODE_CPU[name] = node_cpu_now - node_cpu_mark
        node_cpu_mark = node_cpu_now
        phases[name] = (now - mark, cpu_now - cpu_mark, own_now - own_mark)
        windows[name] = (mark, now)
        mark, cpu_mark, own_mark = now, cpu_now, own_now

    try:
        # At once, as the local provider boots a pass's machines (HostRuntimeProvider.boot_all).
        with ThreadPoolExecutor(max_workers=min(BOOT_THREADS, count)) as pool:
            handles[:] = list(pool.map(
                lambda state: realnodes.boot(run, state, key=state.name, hostname=state.name,
                                             authorized_keys=public + "\n", image_name=image),
                states,
            ))
        # As the local provider joins them: every machine's neighbours known to the switch, and
        # each worker lent the head's /shared (LocalProvider._lend_shared; --sshfs: the network
        # mount a worker on another computer gets).
        realnodes.pin_neighbours(handles)
        if LEND_SHARED:
            for worker in handles[1:]:
                realnodes.lend_shared(handles[0], worker)
        node_namespaces.update(ProcessStarts.namespace_of(h.pid) for h in handles)
        lap("boot")
        nodes = tuple(
            NodeTarget(name=f"node-{i}", index=i, host=h.address, port=22, user="root",
                       key_filename=str(run / "client"), root="", private_ip=private_ip(i),
                       proxy_command=h.proxy_command)
            for i, h in enumerate(handles)
        )
        spec = ClusterSpec(cluster_id=f"bench-{software}-{count}", software=software, machine_kind="vm",
                           gpus_per_machine=1, nodes=nodes, sandbox=False,
                           extra_env=(("RUNCRATE_SHARED_FROM_HOST", "1"),) if LEND_SHARED else ())
        secrets = operations.generate_secrets(spec)
        with NodeRunner(RetryPolicy(connect_timeout=5, attempts=5, backoff=0.2), keep_connections=True) as runner:
            for step in (operations.set_names, operations.join_network):
                result = step(spec, secrets=secrets, runner=runner, **({"wait_seconds": 20} if step is operations.join_network else {}))
                if not result.ok:
                    raise RuntimeError(result.summary())
                lap(step.__name__)
            for step in (operations.setup_shared,):
                result = step(spec, runner=runner)
                if not result.ok:
                    raise RuntimeError(result.summary())
            lap("setup_shared")
            result = operations.install_software(spec, secrets=secrets, runner=runner)
            if not result.ok:
                raise RuntimeError(result.summary())
            lap("install")
            deadline = time.monotonic() + 180
            while True:
                ready = operations.check_ready(spec, runner=runner)
                if ready.ready and not ready.rejected:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(ready.summary())
                time.sleep(0.5)
            lap("check_ready")
        seconds = time.monotonic() - started
        # What the control plane itself spent (SSH sessions, crypto, parsing), against the
        # wall time the nodes' own work takes on this computer's CPUs.
        control_plane_cpu = time.process_time() - cpu_started
        node_pids = [realnodes.processes_in({"pid": realnodes.namespaces(h)["pid"]}) for h in handles]
        memory = [pss_kib(pids) for pids in node_pids]
        HEAD_MEMORY.clear()
        HEAD_MEMORY.update(_memory_by_program(node_pids[0]))
    finally:
        if starts is not None:
            starts.stop()
        for state in states:
            realnodes.release(run, state)
        realnodes.Underlay(run).teardown()
    started_programs = None
    if starts is not None:
        per_phase, programs = starts.count(node_namespaces, windows)
        started_programs = {name: n / count for name, n in per_phase.items()}
        started_programs |= {f"top:{program}": n / count for program, n in programs.most_common(40)}
    return seconds, memory, phases, control_plane_cpu, started_programs


def print_starts(started: dict[str, float]) -> None:
    per_node = sum(n for name, n in started.items() if not name.startswith("top:"))
    print(" " * 11 + f"programs started per node: {per_node:.0f} (goal ≤ {STARTS_GOAL}: "
          f"{'met' if per_node <= STARTS_GOAL else 'NOT met'}); by phase: "
          + ", ".join(f"{name} {n:.1f}" for name, n in started.items() if not name.startswith("top:"))
          + "; most started: "
          + ", ".join(f"{name[4:]} {n:.1f}" for name, n in started.items() if name.startswith("top:")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8,32,64")
    parser.add_argument("--software", default="none,slurm")
    parser.add_argument("--ray", action="store_true", help="also Ray at 2 nodes (~1 GB)")
    parser.add_argument("--images", default=realnodes.NODE_IMAGE, help="comma-separated machine images to boot from")
    parser.add_argument("--no-starts", action="store_true",
                        help="do not count the programs the nodes start (perf record)")
    parser.add_argument("--sshfs", action="store_true",
                        help="workers mount /shared with sshfs instead of being lent the head's (as on another computer)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="boot and join each size this many times on fresh machines; prints how many failed")
    args = parser.parse_args()
    global LEND_SHARED
    LEND_SHARED = not args.sshfs
    can, why = realnodes.capability()
    if not can:
        print(f"real nodes bench: skipped ({why})")
        return
    runs = [(int(n), software, image) for image in args.images.split(",") for software in args.software.split(",")
            for n in args.sizes.split(",")]
    if args.ray:
        runs.append((2, "ray", realnodes.NODE_IMAGE))
    print(f"real nodes bench: boot to ready on this computer ({why})")
    print(f"{'image':>7} | {'software':>8} | {'N':>2} | {'to ready':>8} | {'per node':>8} | {'boot/node':>9} | "
          "memory per node (PSS, MiB): head, workers")
    print("-" * 106)
    with tempfile.TemporaryDirectory(prefix="rc-bench-") as workdir:
        for count, software, image in runs:
            times, joins, failures = [], [], []
            for attempt in range(args.repeat):
                starts = None
                if not args.no_starts and args.repeat == 1:
                    starts = ProcessStarts(Path(workdir))
                    if not starts.start():
                        print(f"{image:>7} | {software:>8} | {count:>2} | programs started: not counted ({starts.why})")
                        starts = None
                try:
                    seconds, memory, phases, control_plane_cpu, started = one_run(
                        count, software, Path(workdir) / f"{image}-{attempt}", image, starts)
                except RuntimeError as error:
                    print(f"{image:>7} | {software:>8} | {count:>2} | failed: {error}")
                    failures.append(str(error))
                    continue
                times.append(seconds)
                joins.append(phases["join_network"][0])
                if args.repeat > 1:
                    continue
                mib = [m / 1024 for m in memory]
                workers = sum(mib[1:]) / max(1, len(mib) - 1)
                print(f"{image:>7} | {software:>8} | {count:>2} | {seconds:7.1f}s | {seconds / count:7.2f}s | "
                      f"{phases['boot'][0] / count:8.2f}s | head {mib[0]:.0f}, workers {workers:.0f} (mean)")
                print(" " * 11 + "phases (wall / this computer's CPU / of it this process's): "
                      + ", ".join(f"{name} {wall:.1f}s / {cpu:.1f}s / {own:.1f}s"
                                  for name, (wall, cpu, own) in phases.items() if wall >= 0.05)
                      + f"; control plane CPU {control_plane_cpu:.1f}s")
                if NODE_CPU:
                    print(" " * 11 + f"the nodes' own CPU (their cgroups): {sum(NODE_CPU.values()):.1f}s; "
                          + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in NODE_CPU.items()))
                print(" " * 11 + "head's memory by program (processes, PSS MiB): " + ", ".join(
                    f"{program} {n} {kib / 1024:.1f}" for program, (n, kib) in list(HEAD_MEMORY.items())[:6]))
                if started is not None:
                    print_starts(started)
            if args.repeat > 1 and times:
                print(f"{image:>7} | {software:>8} | {count:>2} | {args.repeat} runs on fresh machines: {len(times)} ready, "
                      f"{len(failures)} failed; to ready median {statistics.median(times):.1f}s "
                      f"({min(times):.1f}–{max(times):.1f}s), join median {statistics.median(joins):.1f}s "
                      f"(max {max(joins):.1f}s)")


if __name__ == "__main__":
    main()
