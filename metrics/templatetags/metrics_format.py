from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings

from metrics.services import TopRow, busy_percent, top

register = template.Library()


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


@register.filter
def bytes_short(value: float | None) -> str:
    if value is None:
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return "—"


@register.filter
def bits_short(value: float | None) -> str:
    if value is None:
        return "—"
    for unit in ("bit/s", "kbit/s", "Mbit/s", "Gbit/s"):
        if abs(value) < 1000 or unit == "Gbit/s":
            return f"{value:.0f} {unit}" if unit == "bit/s" else f"{value:.1f} {unit}"
        value /= 1000
    return "—"


@register.filter
def busy(row: TopRow) -> str:
    sample = row.sample
    if sample is None:
        return "no figures"
    if sample.gpu_percent is not None and (sample.gpu_percent or 0) >= (sample.cpu_percent or 0):
        return f"{sample.gpu_percent:.0f}% GPU"
    return f"{busy_percent(sample):.0f}% CPU"


@register.simple_tag
def idle_nodes(rows: list[TopRow]) -> list[str]:
    return [r.node for r in rows if r.sample is not None and r.sample.cpu_percent is not None
            and busy_percent(r.sample) < settings.IDLE_CPU_PERCENT]


@register.simple_tag(takes_context=True)
def metrics_top(context: Any, cluster: Any) -> list[TopRow]:
    return top(cluster)


@register.simple_tag
def metrics_interval() -> int:
    return settings.METRICS_INTERVAL_SECONDS


@register.simple_tag
def gpu_figures(rows: list[TopRow]) -> bool:
    """GPU columns only where some node reported GPUs (machines without nvidia-smi report none)."""
    return any(r.sample is not None and r.sample.gpu_count for r in rows)
