"""In Debian's Chromium, under the page's Content-Security-Policy: the cluster page draws each
node's small multiples with the vendored uPlot, fits a phone, and takes a pushed round."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from accounts.models import Role
from clusters.nodeops.metrics import NodeReading
from clusters.services.create import create_cluster
from metrics import collection
from metrics import services as metrics
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.test_browser import CHROMIUM, PHONE, SCREENSHOTS, Stack, stack, watch_policy  # noqa: F401 - fixture
from tests.live.test_dashboard_rules import browse

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]


@pytest.fixture
def watched_cluster(db):
    workspace = WorkspaceFactory(name="Rules Lab", credit_balance=Decimal("1000.00"))
    user = UserFactory(username="rita")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    cluster = create_cluster(environment=workspace.default_environment, name="busy",
                                      machine_type=machine_type_with_hosts(3), machine_count=3)
    cluster.refresh_from_db()
    nodes = collection.collected_nodes(cluster)
    start = timezone.now() - dt.timedelta(minutes=2)
    for i in range(6):
        total = 100.0 * (i + 1)
        metrics.record_round(cluster, nodes, {
            n.name: NodeReading(exporter="up", cpu_seconds={"user": total * 0.2 * (n.index + 1), "idle": total},
                                memory_total_bytes=8 * 2**30, memory_available_bytes=3 * 2**30,
                                disks={"/": (100, 40), "/shared": (100, 90)})
            for n in nodes}, start + dt.timedelta(seconds=10 * i))
    return cluster


def test_the_charts_draw_on_a_phone_within_the_policy_and_take_a_pushed_round(watched_cluster, stack):
    violations: list[str] = []
    payload = json.dumps({"cluster": watched_cluster.pk, "points": [
        {"node": "node-0", "at": timezone.now().timestamp(), "cpu_percent": 77.0, "memory_percent": 50.0}]})

    def on_phone(page, context):
        watch_policy(context, violations)
        page.goto(watched_cluster.get_absolute_url())
        # A locator waits without evaluating a string in the page (the policy forbids eval).
        page.locator("#metrics-charts .metric-chart canvas").nth(8).wait_for(state="attached")
        assert page.locator("#metrics-charts .metric-chart canvas").count() == 9
        assert page.locator("#metrics-verdict").inner_text().startswith("Busiest: node-2")
        widths = page.evaluate("() => ({page: document.documentElement.scrollWidth, viewport: window.innerWidth})")
        assert widths["page"] <= widths["viewport"], "the charts fit the phone's width"
        # What htmx's out-of-band swap does with a pushed round: the element is replaced.
        page.evaluate("""(payload) => {
            const fresh = document.createElement('div');
            fresh.id = 'metrics-push'; fresh.hidden = true; fresh.dataset.payload = payload;
            document.getElementById('metrics-push').replaceWith(fresh);
        }""", payload)
        page.wait_for_selector("#metrics-charts[data-updated]")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#metrics-card").screenshot(path=str(SCREENSHOTS / "metrics-card-phone.png"))

    browse(stack, on_phone, **PHONE)
    assert violations == []


def test_a_longer_window_shows_the_five_minute_averages_of_hours_ago(watched_cluster, stack):
    nodes = collection.collected_nodes(watched_cluster)
    three_hours_ago = timezone.now() - dt.timedelta(hours=3)
    for i in range(12):
        total = 100.0 * (i + 1)
        metrics.record_round(watched_cluster, nodes, {
            n.name: NodeReading(exporter="up", cpu_seconds={"user": total * 0.5, "idle": total},
                                memory_total_bytes=8 * 2**30, memory_available_bytes=2**30)
            for n in nodes}, three_hours_ago + dt.timedelta(seconds=30 * i))
    assert metrics.roll_up(now=three_hours_ago + dt.timedelta(minutes=15)) > 0
    violations: list[str] = []

    def on_desktop(page, context):
        watch_policy(context, violations)
        page.goto(watched_cluster.get_absolute_url())
        page.wait_for_selector("#metrics-charts[data-loaded]")
        recent = int(page.locator("#metrics-charts").get_attribute("data-points"))
        assert page.locator("#metrics-resolution").inner_text() == ""
        page.get_by_role("button", name="24 hours").click()
        page.wait_for_selector('#metrics-charts[data-window="86400"]')
        assert page.get_by_role("button", name="24 hours").get_attribute("aria-pressed") == "true"
        assert page.get_by_role("button", name="15 min").get_attribute("aria-pressed") == "false"
        assert page.locator("#metrics-resolution").inner_text() == "5-minute averages"
        hours = int(page.locator("#metrics-charts").get_attribute("data-points"))
        assert recent > 0 and hours > 0 and hours != recent
        page.get_by_role("button", name="15 min").click()
        page.wait_for_selector('#metrics-charts[data-window="900"]')
        assert int(page.locator("#metrics-charts").get_attribute("data-points")) == recent

    browse(stack, on_desktop)
    assert violations == []


AXES = """() => Array.from(document.querySelectorAll('#metrics-charts .metric-chart')).map((cell) => {
    const plot = cell.plot, y = plot.axes[1];
    plot.ctx.font = y.font[0];
    const room = y._size - y.ticks.size - y.gap;
    return {
        span: plot.scales.x.max - plot.scales.x.min,
        x: plot.axes[0]._values || [],
        y: y._values || [],
        yMin: plot.scales.y.min,
        clipped: (y._values || []).filter((v) => plot.ctx.measureText(v).width / devicePixelRatio > room + 0.5),
        xClipped: xClipped(plot),
    };
    // The time labels, centred under their tick, that stick out of the chart's canvas ("12-06 00:0").
    function xClipped(plot) {
        const x = plot.axes[0], left = plot.bbox.left / devicePixelRatio;
        plot.ctx.font = x.font[0];
        return (x._splits || []).map((split, i) => [left + plot.valToPos(split, "x"), (x._values || [])[i]])
            .filter(([centre, v]) => {
                const half = v ? plot.ctx.measureText(v).width / devicePixelRatio / 2 : 0;
                return v && (centre + half > plot.width + 0.5 || centre - half < -0.5);
            })
            .map(([, v]) => v);
    }
})"""


@pytest.mark.parametrize("width", ["desktop", "phone"])
def test_the_chart_axes_span_the_window_fit_their_labels_and_read_24_hour_utc(watched_cluster, stack, width):
    import re

    # Tiny private-network traffic: the wg0 axis reads thousandths of a Mbit/s (".004" was cut).
    nodes = collection.collected_nodes(watched_cluster)
    start = timezone.now() - dt.timedelta(seconds=50)
    for i in range(2):
        metrics.record_round(watched_cluster, nodes, {
            n.name: NodeReading(exporter="up", cpu_seconds={"user": 10.0 * i, "idle": 100.0 * i},
                                memory_total_bytes=8 * 2**30, memory_available_bytes=3 * 2**30,
                                net_rx_bytes=1000 + 5000 * i, net_tx_bytes=1000 + 4000 * i)
            for n in nodes}, start + dt.timedelta(seconds=30 + 10 * i))
    seen: dict[str, list[dict]] = {}

    def check(page, context):
        page.goto(watched_cluster.get_absolute_url())
        page.wait_for_selector("#metrics-charts[data-loaded]")
        seen["15 min"] = page.evaluate(AXES)
        page.get_by_role("button", name="7 days").click()
        page.wait_for_selector('#metrics-charts[data-window="604800"]')
        seen["7 days"] = page.evaluate(AXES)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#metrics-card").screenshot(path=str(SCREENSHOTS / f"metrics-axes-{width}.png"))

    browse(stack, check, **({"viewport": {"width": 1280, "height": 900}} if width == "desktop" else PHONE))
    for window, seconds, label in (("15 min", 900, r"^\d\d:\d\d$"), ("7 days", 604800, r"^\d\d-\d\d \d\d:\d\d$")):
        charts = seen[window]
        assert len(charts) == 9, charts
        for chart in charts:
            assert abs(chart["span"] - seconds) < 1, (window, chart)
            assert chart["x"] and all(re.match(label, text) for text in chart["x"]), (window, chart["x"])
            assert chart["yMin"] == 0 and chart["clipped"] == [] and chart["xClipped"] == [], (window, chart)
