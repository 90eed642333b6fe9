"""Node metrics: record a round, roll fine samples up into coarse ones, drop what is past
retention, and read series, the latest figures ("top") and the Prometheus exposition.
See docs/metrics.md."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Avg, Max, QuerySet
from django.utils import timezone

from clusters.models import Cluster, Node, Status
from clusters.nodeops.metrics import NodeReading
from metrics.models import NodeSample, Resolution

# The figures a series carries, in the API, the charts and `runcrate clusters top`.
FIELDS = (
    "cpu_percent", "memory_percent", "memory_used_bytes", "memory_total_bytes", "root_percent", "shared_percent",
    "net_rx_bps", "net_tx_bps", "load1", "gpu_percent", "gpu_memory_used_bytes", "gpu_memory_total_bytes",
    "gpu_temperature_c", "gpu_errors",
)
AVERAGED = ("cpu_percent", "memory_used_bytes", "memory_total_bytes", "root_used_bytes", "root_total_bytes",
            "shared_used_bytes", "shared_total_bytes", "net_rx_bps", "net_tx_bps", "load1", "gpu_percent",
            "gpu_memory_used_bytes", "gpu_memory_total_bytes")


def _rate(now: float | None, before: float | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0 or now < before:
        return None  # a counter reset (the exporter or the machine restarted): skip one point
    return (now - before) / seconds


def sample_from(reading: NodeReading, previous: NodeSample | None, at: dt.datetime) -> NodeSample:
    """A fine sample: gauges as read, rates from this round's counters and the last one's."""
    counters: dict[str, Any] = {"at": at.timestamp()}
    busy_total = reading.cpu_busy_and_total
    if busy_total:
        counters["cpu_busy"], counters["cpu_total"] = busy_total
    if reading.net_rx_bytes is not None:
        counters["rx"], counters["tx"] = reading.net_rx_bytes, reading.net_tx_bytes
    sample = NodeSample(resolution=Resolution.FINE, at=at, counters=counters, load1=reading.load1,
                        memory_total_bytes=reading.memory_total_bytes)
    if reading.memory_total_bytes is not None and reading.memory_available_bytes is not None:
        sample.memory_used_bytes = reading.memory_total_bytes - reading.memory_available_bytes
    for mount, prefix in (("/", "root"), ("/shared", "shared")):
        if mount in reading.disks:
            size, available = reading.disks[mount]
            setattr(sample, f"{prefix}_total_bytes", size)
            setattr(sample, f"{prefix}_used_bytes", size - available)
    if previous is not None and previous.counters:
        before = previous.counters
        seconds = counters["at"] - float(before.get("at", 0))
        if "cpu_total" in counters and "cpu_total" in before:
            spent = counters["cpu_total"] - before["cpu_total"]
            busy = counters["cpu_busy"] - before["cpu_busy"]
            if spent > 0 and busy >= 0:
                sample.cpu_percent = round(min(100.0, 100.0 * busy / spent), 2)
        rx = _rate(counters.get("rx"), before.get("rx"), seconds)
        tx = _rate(counters.get("tx"), before.get("tx"), seconds)
        sample.net_rx_bps = None if rx is None else rx * 8
        sample.net_tx_bps = None if tx is None else tx * 8
    if reading.gpus:
        gpus = reading.gpus
        sample.gpu_count = len(gpus)
        utils = [g.utilization_percent for g in gpus if g.utilization_percent is not None]
        sample.gpu_percent = sum(utils) / len(utils) if utils else None
        used = [g.memory_used_bytes for g in gpus if g.memory_used_bytes is not None]
        total = [g.memory_total_bytes for g in gpus if g.memory_total_bytes is not None]
        sample.gpu_memory_used_bytes = sum(used) if used else None
        sample.gpu_memory_total_bytes = sum(total) if total else None
        temps = [g.temperature_c for g in gpus if g.temperature_c is not None]
        sample.gpu_temperature_c = max(temps) if temps else None
        errors = [g.uncorrected_errors for g in gpus if g.uncorrected_errors is not None]
        sample.gpu_errors = sum(errors) if errors else None
    return sample


def record_round(cluster: Cluster, nodes: list[Node], readings: dict[str, NodeReading], at: dt.datetime) -> list[NodeSample]:
    """One fine sample per node that answered; nodes that did not get no point (a gap)."""
    previous = {s.node_id: s for s in latest_samples(cluster.pk, Resolution.FINE, [n.pk for n in nodes])}
    samples = []
    for node in nodes:
        reading = readings.get(node.name)
        if reading is None or reading.error:
            continue
        sample = sample_from(reading, previous.get(node.pk), at)
        sample.cluster_id, sample.node_id = cluster.pk, node.pk
        samples.append(sample)
    NodeSample.objects.bulk_create(samples, ignore_conflicts=True)
    return samples


def latest_samples(cluster_id: int, resolution: str = Resolution.FINE, node_ids: list[int] | None = None) -> list[NodeSample]:
    """Each node's newest sample of that resolution (within retention)."""
    rows = NodeSample.objects.filter(cluster_id=cluster_id, resolution=resolution)
    if node_ids is not None:
        rows = rows.filter(node_id__in=node_ids)
    newest = rows.values("node_id").annotate(last=Max("at"))
    pairs = [(row["node_id"], row["last"]) for row in newest]
    if not pairs:
        return []
    found = rows.filter(node_id__in=[p[0] for p in pairs], at__in={p[1] for p in pairs})
    wanted = set(pairs)
    return [s for s in found if (s.node_id, s.at) in wanted]


# --- roll-up and retention (beat: metrics.tasks.roll_up_metrics) --------------------------


def bucket_start(moment: dt.datetime, step: int) -> dt.datetime:
    seconds = int(moment.timestamp())
    return dt.datetime.fromtimestamp(seconds - seconds % step, tz=dt.UTC)


def roll_up(now: dt.datetime | None = None, buckets: int = 6) -> int:
    """Average the fine samples of the last few completed coarse buckets into one coarse sample
    per node and bucket. Idempotent (a bucket's row is made once: the unique constraint), and
    a few buckets back, so a beat that missed some runs catches up."""
    now = now or timezone.now()
    step = settings.METRICS_COARSE_STEP_SECONDS
    current = bucket_start(now, step)
    made = 0
    for back in range(buckets, 0, -1):
        start = current - dt.timedelta(seconds=step * back)
        rows = (
            NodeSample.objects.filter(resolution=Resolution.FINE, at__gte=start, at__lt=start + dt.timedelta(seconds=step))
            .values("node_id", "cluster_id")
            .annotate(**{f: Avg(f) for f in AVERAGED}, gpu_temperature_c=Max("gpu_temperature_c"),
                      gpu_errors=Max("gpu_errors"), gpu_count=Max("gpu_count"))
        )
        done = set(NodeSample.objects.filter(resolution=Resolution.COARSE, at=start).values_list("node_id", flat=True))
        coarse = []
        for row in rows:
            if row["node_id"] in done:
                continue
            values: dict[str, Any] = {k: v for k, v in row.items() if k not in ("node_id", "cluster_id")}
            for key in ("memory_used_bytes", "memory_total_bytes", "root_used_bytes", "root_total_bytes",
                        "shared_used_bytes", "shared_total_bytes", "gpu_memory_used_bytes", "gpu_memory_total_bytes"):
                if values.get(key) is not None:
                    values[key] = int(values[key])
            values["gpu_count"] = values.get("gpu_count") or 0
            coarse.append(NodeSample(node_id=row["node_id"], cluster_id=row["cluster_id"], resolution=Resolution.COARSE,
                                     at=start, **values))
        made += len(NodeSample.objects.bulk_create(coarse, ignore_conflicts=True))
    return made


def prune(now: dt.datetime | None = None) -> int:
    now = now or timezone.now()
    fine = NodeSample.objects.filter(
        resolution=Resolution.FINE, at__lt=now - dt.timedelta(seconds=settings.METRICS_FINE_RETENTION_SECONDS))
    coarse = NodeSample.objects.filter(
        resolution=Resolution.COARSE, at__lt=now - dt.timedelta(seconds=settings.METRICS_COARSE_RETENTION_SECONDS))
    return fine.delete()[0] + coarse.delete()[0]


# --- reads --------------------------------------------------------------------------------


def value_of(sample: NodeSample, name: str) -> float | int | None:
    value = getattr(sample, name)
    return round(value, 2) if isinstance(value, float) else value


@dataclass(frozen=True)
class Series:
    resolution: str
    step: int
    since: dt.datetime
    nodes: dict[str, list[dict[str, Any]]]  # node name -> points, oldest first


def series(cluster: Cluster, *, since: dt.datetime | None = None, step: int | None = None) -> Series:
    """Every live node's points from `since` (default: the last 15 minutes): fine samples when
    `since` is within the fine retention and `step` under the coarse step, else coarse ones;
    points are averaged into `step`-second buckets when a step is asked for."""
    now = timezone.now()
    since = since or now - dt.timedelta(minutes=15)
    fine_from = now - dt.timedelta(seconds=settings.METRICS_FINE_RETENTION_SECONDS)
    coarse_step = settings.METRICS_COARSE_STEP_SECONDS
    use_fine = since >= fine_from - dt.timedelta(seconds=60) and (step or 0) < coarse_step
    resolution = Resolution.FINE if use_fine else Resolution.COARSE
    base_step = settings.METRICS_INTERVAL_SECONDS if use_fine else coarse_step
    step = max(step or base_step, base_step)
    names = {n.pk: n.name for n in cluster.nodes.filter(released_at__isnull=True).order_by("index")}
    points: dict[str, list[dict[str, Any]]] = {name: [] for name in names.values()}
    rows = (NodeSample.objects.filter(cluster_id=cluster.pk, resolution=resolution, at__gte=since, node_id__in=list(names))
            .defer("counters").order_by("at"))
    buckets: dict[tuple[int, dt.datetime], list[NodeSample]] = defaultdict(list)
    for sample in rows:
        key = bucket_start(sample.at, step) if step > base_step else sample.at
        buckets[(sample.node_id, key)].append(sample)
    for (node_id, at), group in buckets.items():
        point: dict[str, Any] = {"at": at}
        for name in FIELDS:
            values = [v for v in (value_of(s, name) for s in group) if v is not None]
            point[name] = (round(sum(values) / len(values), 2) if values else None) if name != "gpu_errors" else (
                max(values) if values else None)
        points[names[node_id]].append(point)
    for name in points:
        points[name].sort(key=lambda p: p["at"])
    return Series(resolution, step, since, points)


@dataclass(frozen=True)
class TopRow:
    node: str
    sample: NodeSample | None

    def get(self, name: str) -> float | int | None:
        return None if self.sample is None else value_of(self.sample, name)


def top(cluster: Cluster) -> list[TopRow]:
    """Each live node's latest figures, busiest first (CPU, or GPU where there are GPUs)."""
    nodes = list(cluster.nodes.filter(released_at__isnull=True).order_by("index"))
    latest = {s.node_id: s for s in latest_samples(cluster.pk, Resolution.FINE, [n.pk for n in nodes])}
    rows = [TopRow(n.name, latest.get(n.pk)) for n in nodes]
    return sorted(rows, key=lambda r: -busy_percent(r.sample) if r.sample else 1.0)


def busy_percent(sample: NodeSample | None) -> float:
    if sample is None:
        return 0.0
    return max(sample.cpu_percent or 0.0, sample.gpu_percent or 0.0)


def is_idle(sample: NodeSample) -> bool:
    return (sample.cpu_percent is not None and sample.cpu_percent < settings.IDLE_CPU_PERCENT
            and (sample.gpu_percent is None or sample.gpu_percent < settings.IDLE_GPU_PERCENT))


# --- Prometheus exposition (one workspace, API-key auth: api/endpoints/metrics.py) ----------

PROMETHEUS_METRICS = (
    ("runcrate_node_cpu_percent", "cpu_percent", "CPU busy, percent of every CPU."),
    ("runcrate_node_memory_used_bytes", "memory_used_bytes", "Memory in use (total minus available)."),
    ("runcrate_node_memory_total_bytes", "memory_total_bytes", "Memory of the machine."),
    ("runcrate_node_root_used_bytes", "root_used_bytes", "Bytes used on /."),
    ("runcrate_node_root_size_bytes", "root_total_bytes", "Size of /."),
    ("runcrate_node_shared_used_bytes", "shared_used_bytes", "Bytes used on /shared."),
    ("runcrate_node_shared_size_bytes", "shared_total_bytes", "Size of /shared."),
    ("runcrate_node_network_receive_bits_per_second", "net_rx_bps", "Received on the private network (wg0)."),
    ("runcrate_node_network_transmit_bits_per_second", "net_tx_bps", "Sent on the private network (wg0)."),
    ("runcrate_node_load1", "load1", "1-minute load average."),
    ("runcrate_node_gpu_utilization_percent", "gpu_percent", "Mean GPU utilisation."),
    ("runcrate_node_gpu_memory_used_bytes", "gpu_memory_used_bytes", "GPU memory in use, all GPUs."),
    ("runcrate_node_gpu_temperature_celsius", "gpu_temperature_c", "The hottest GPU."),
    ("runcrate_node_gpu_uncorrected_errors", "gpu_errors", "Uncorrected ECC errors, all GPUs."),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(clusters: QuerySet[Cluster]) -> str:
    """The latest sample of every live node of these clusters, in the text exposition format,
    with the sample's own timestamp (a scrape never invents a fresher figure)."""
    lines: list[str] = []
    found: list[tuple[Cluster, Node, NodeSample]] = []
    for cluster in clusters.filter(status=Status.READY).select_related("environment").order_by("pk"):
        nodes = {n.pk: n for n in cluster.nodes.filter(released_at__isnull=True)}
        for sample in sorted(latest_samples(cluster.pk, Resolution.FINE, list(nodes)), key=lambda s: nodes[s.node_id].index):
            found.append((cluster, nodes[sample.node_id], sample))
    for metric, field, help_text in PROMETHEUS_METRICS:
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        for cluster, node, sample in found:
            value = getattr(sample, field)
            if value is None:
                continue
            labels = (f'cluster="{_label(cluster.name)}",cluster_id="{cluster.pk}",'
                      f'environment="{_label(cluster.environment.name)}",node="{node.name}"')
            lines.append(f"{metric}{{{labels}}} {float(value):.6g} {int(sample.at.timestamp() * 1000)}")
    return "\n".join(lines) + "\n"


def push_payload(cluster: Cluster, samples: list[NodeSample], names: dict[int, str]) -> str:
    """The round's points as JSON, for the charts (static/js/metrics.js)."""
    return json.dumps({
        "cluster": cluster.pk,
        "points": [{"node": names[s.node_id], "at": s.at.timestamp(),
                    **{f: value_of(s, f) for f in FIELDS}} for s in samples],
    }, separators=(",", ":"))
