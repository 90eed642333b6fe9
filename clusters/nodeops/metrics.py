"""Node metrics over the path the control plane already uses: scripts/metrics.sh on every
node at once (one SSH session each, on the kept connections of the health rounds), and the
parser of what it prints. No Django here, like the rest of clusters.nodeops.

The GPU part parses `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`. There are no
GPUs on the machines the tests run on: `parse_nvidia_smi` is tested on recorded output
(tests/nodeops/data/nvidia-smi-*.csv), and the script only runs nvidia-smi where it exists."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusters.nodeops.operations import _run, _Session
from clusters.nodeops.runner import ROUND_CONNECT_TIMEOUT, NodeRunner, RetryPolicy
from clusters.nodeops.targets import ClusterSpec

# A round is bounded: a node that has not answered in this long is reported without figures.
# It holds to this on the health rounds' kept connections too (their own deadline is longer),
# and reads back at most what a node's exporter lines take, with room to spare.
METRICS_POLICY = RetryPolicy(connect_timeout=ROUND_CONNECT_TIMEOUT, attempts=1, backoff=0.0, command_timeout=20.0,
                             max_output=1024 * 1024)

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class GpuReading:
    index: int
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    uncorrected_errors: int | None


@dataclass
class NodeReading:
    """What one node reported in one round: raw counters (rates are the caller's, from two
    rounds) and gauges. A field is None when the node could not say."""

    exporter: str = "missing"  # up | down | missing
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # mode -> seconds, summed over CPUs
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    load1: float | None = None
    net_rx_bytes: int | None = None  # on wg0, the private network
    net_tx_bytes: int | None = None
    disks: dict[str, tuple[int, int]] = field(default_factory=dict)  # mountpoint -> (size, available)
    gpus: list[GpuReading] = field(default_factory=list)
    error: str = ""

    @property
    def cpu_busy_and_total(self) -> tuple[float, float] | None:
        if not self.cpu_seconds:
            return None
        total = sum(self.cpu_seconds.values())
        idle = self.cpu_seconds.get("idle", 0.0) + self.cpu_seconds.get("iowait", 0.0)
        return total - idle, total


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition lines as (name, labels, value); comments and junk skipped."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return samples


def _number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text.lower() in ("n/a", "[n/a]", "[not supported]"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[GpuReading]:
    """index, utilization.gpu [%], memory.used [MiB], memory.total [MiB], temperature.gpu [C],
    ecc.errors.uncorrected.volatile.total — CSV without header or units."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        used, total = _number(cells[2]), _number(cells[3])
        errors = _number(cells[5])
        gpus.append(GpuReading(
            index=int(cells[0]), utilization_percent=_number(cells[1]),
            memory_used_bytes=None if used is None else int(used * 1024 * 1024),
            memory_total_bytes=None if total is None else int(total * 1024 * 1024),
            temperature_c=_number(cells[4]), uncorrected_errors=None if errors is None else int(errors),
        ))
    return gpus


def _between(text: str, begin: str, end: str) -> str:
    if begin not in text:
        return ""
    return text.split(begin, 1)[1].split(end, 1)[0]


def parse_metrics_report(stdout: str) -> NodeReading:
    reading = NodeReading()
    for line in stdout.splitlines():
        if not line.startswith("::metrics:: "):
            continue
        words = line.split()[1:]
        if words[:1] == ["exporter"] and len(words) == 3:
            reading.exporter = words[2]
        elif words[:1] == ["disk"] and len(words) == 4 and words[2].isdigit() and words[3].isdigit():
            reading.disks[words[1]] = (int(words[2]), int(words[3]))
    for name, labels, value in parse_exposition(_between(stdout, "::begin-exposition::", "::end-exposition::")):
        if name == "node_cpu_seconds_total" and "mode" in labels:
            reading.cpu_seconds[labels["mode"]] = reading.cpu_seconds.get(labels["mode"], 0.0) + value
        elif name == "node_memory_MemTotal_bytes":
            reading.memory_total_bytes = int(value)
        elif name == "node_memory_MemAvailable_bytes":
            reading.memory_available_bytes = int(value)
        elif name == "node_load1":
            reading.load1 = value
        elif name == "node_network_receive_bytes_total" and labels.get("device") == "wg0":
            reading.net_rx_bytes = int(value)
        elif name == "node_network_transmit_bytes_total" and labels.get("device") == "wg0":
            reading.net_tx_bytes = int(value)
    reading.gpus = parse_nvidia_smi(_between(stdout, "::begin-gpu::", "::end-gpu::"))
    return reading


@dataclass(frozen=True)
class MetricsRound:
    readings: dict[str, NodeReading]
    bytes_received: int  # what the round carried back over SSH, for the bench


def collect_metrics(spec: ClusterSpec, *, runner: NodeRunner | None = None, stop: bool = False) -> MetricsRound:
    """metrics.sh on every node at once; each node's reading (an unreachable node's has only
    `error`). stop=True stops the exporters instead (tests; stop.sh does it on terminate)."""
    with _Session(runner or NodeRunner(METRICS_POLICY), owned=runner is None) as session:
        results = _run(spec, spec.nodes, "metrics.sh", "metrics", session, None,
                       extra_env={"RUNCRATE_METRICS_STOP": "1" if stop else "0"}, policy=METRICS_POLICY)
    readings: dict[str, NodeReading] = {}
    carried = 0
    for name, result in results.items():
        carried += len(result.stdout.encode())
        reading = parse_metrics_report(result.stdout) if result.ok else NodeReading()
        if not result.ok:
            reading.error = (result.error or f"exit {result.exit_code}")[:255]
        readings[name] = reading
    return MetricsRound(readings, carried)
