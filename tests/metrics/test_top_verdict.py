"""The cluster page's one-line verdict over its nodes' latest figures."""

from __future__ import annotations

from django.template.loader import render_to_string

from metrics.models import NodeSample
from metrics.services import TopRow


def verdict(cpu: dict[str, float | None]) -> str:
    rows = [TopRow(node, None if value is None else NodeSample(cpu_percent=value)) for node, value in cpu.items()]
    html = render_to_string("clusters/_metrics_top.html", {"top_rows": rows})
    start = html.index('id="metrics-verdict">') + len('id="metrics-verdict">')
    return " ".join(html[start:html.index("</p>", start)].replace("<strong>", "").replace("</strong>", "").split())


def test_a_busy_node_is_named_with_the_idle_ones():
    assert verdict({"node-1": 72.0, "node-0": 1.0, "node-2": 0.0}) == "Busiest: node-1 (72% CPU). Idle: node-0, node-2."
    assert verdict({"node-0": 50.0, "node-1": 40.0}) == "Busiest: node-0 (50% CPU). No node is idle."


def test_a_cluster_doing_nothing_is_said_to_be_idle_not_busiest():
    assert verdict({"node-0": 0.4, "node-1": 0.0}) == "Every node is idle."
    assert verdict({"node-0": 0.4, "node-1": None}) == "Every node is idle (the others have no figures yet)."
