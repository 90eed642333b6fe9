"""Samples from readings, the roll-up and retention, series, top, the Prometheus text, the
API and the idle notice — from NodeReadings as metrics.sh reports them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db.models import F
from django.utils import timezone

from api.keys import create_api_key
from clusters.nodeops.metrics import GpuReading, NodeReading
from metrics import idle, services
from metrics.models import IdleState, NodeSample, Resolution
from notifications.models import Notification
from tests.api.conftest import ApiClient, drive, error_of, make_cluster

pytestmark = pytest.mark.django_db


def reading(busy: float, total: float, *, rx: int = 0, tx: int = 0, available: int = 6 * 2**30,
            gpus: list[GpuReading] | None = None) -> NodeReading:
    return NodeReading(exporter="up", cpu_seconds={"user": busy, "idle": total - busy},
                       memory_total_bytes=16 * 2**30, memory_available_bytes=available, load1=0.5,
                       net_rx_bytes=rx, net_tx_bytes=tx, disks={"/": (1000, 250), "/shared": (2000, 1500)},
                       gpus=gpus or [])


@pytest.fixture
def cluster(environment, machine_type, owner):
    made = make_cluster(environment, machine_type)
    drive(made)
    assert made.status == "ready"
    return made


def record(cluster, at, **readings):
    nodes = list(cluster.nodes.order_by("index"))
    return services.record_round(cluster, nodes, readings, at)


def test_rates_come_from_two_rounds_and_gauges_from_one(cluster):
    t0 = timezone.now() - dt.timedelta(seconds=30)
    first = record(cluster, t0, **{"node-0": reading(100, 1000, rx=0, tx=0), "node-1": reading(10, 1000)})
    assert first[0].cpu_percent is None and first[0].net_rx_bps is None  # nothing to compare with yet
    assert first[0].memory_percent == pytest.approx(62.5) and first[0].root_percent == 75.0
    second = record(cluster, t0 + dt.timedelta(seconds=10),
                    **{"node-0": reading(180, 1100, rx=1_250_000, tx=125_000), "node-1": reading(11, 1100)})
    node0 = next(s for s in second if s.node.name == "node-0")
    assert node0.cpu_percent == 80.0
    assert node0.net_rx_bps == 1_000_000 and node0.net_tx_bps == 100_000  # bits per second over 10 s
    assert node0.shared_percent == 25.0


def test_a_node_that_did_not_answer_leaves_a_gap(cluster):
    at = timezone.now()
    samples = record(cluster, at, **{"node-0": reading(1, 10), "node-1": NodeReading(error="timed out")})
    assert [s.node.name for s in samples] == ["node-0"]


def test_a_counter_reset_gives_no_rate_rather_than_a_negative_one(cluster):
    t0 = timezone.now() - dt.timedelta(seconds=20)
    record(cluster, t0, **{"node-0": reading(500, 5000, rx=10_000)})
    [sample] = record(cluster, t0 + dt.timedelta(seconds=10), **{"node-0": reading(5, 50, rx=100)})
    assert sample.net_rx_bps is None and sample.cpu_percent is None


def test_gpus_are_averaged_hottest_and_errors_summed(cluster):
    gpus = [GpuReading(0, 90, 70 * 2**30, 80 * 2**30, 70, 0), GpuReading(1, 10, 2**30, 80 * 2**30, 45, 3)]
    [sample] = record(cluster, timezone.now(), **{"node-0": reading(1, 10, gpus=gpus)})
    assert (sample.gpu_count, sample.gpu_percent, sample.gpu_temperature_c, sample.gpu_errors) == (2, 50, 70, 3)
    assert sample.gpu_memory_total_bytes == 160 * 2**30


def test_fine_samples_roll_up_into_coarse_buckets_and_both_are_dropped_past_retention(cluster, settings):
    step = settings.METRICS_COARSE_STEP_SECONDS
    now = timezone.now()
    bucket = services.bucket_start(now, step) - dt.timedelta(seconds=step)
    busy = 0.0
    for i in range(3):
        busy += 50 + 20 * i
        record(cluster, bucket + dt.timedelta(seconds=10 * i), **{"node-0": reading(busy, 100.0 * (i + 1))})
    assert services.roll_up(now) == 1
    assert services.roll_up(now) == 0  # once per node and bucket
    coarse = NodeSample.objects.get(resolution=Resolution.COARSE)
    assert coarse.at == bucket and coarse.cpu_percent == pytest.approx(80.0)  # (70 + 90) / 2: the first has no rate
    NodeSample.objects.filter(resolution=Resolution.FINE).update(at=F("at") - dt.timedelta(hours=1, minutes=10))
    NodeSample.objects.filter(resolution=Resolution.COARSE).update(at=now - dt.timedelta(days=6))
    assert services.prune(now) == 3
    NodeSample.objects.filter(resolution=Resolution.COARSE).update(at=now - dt.timedelta(days=7, seconds=1))
    assert services.prune(now) == 1 and not NodeSample.objects.exists()


def test_the_api_series_top_and_prometheus_say_the_same(cluster, owner, workspace):
    t0 = timezone.now() - dt.timedelta(seconds=20)
    record(cluster, t0, **{"node-0": reading(0, 100), "node-1": reading(0, 100)})
    record(cluster, t0 + dt.timedelta(seconds=10), **{"node-0": reading(90, 200), "node-1": reading(2, 200)})
    api = ApiClient(create_api_key(workspace=workspace, created_by=owner, name="k")[1])
    status, body = api.get(f"/clusters/{cluster.pk}/metrics", since="600")
    assert status == 200, body
    data = body["data"]
    assert data["resolution"] == "fine" and [n["node"] for n in data["nodes"]] == ["node-0", "node-1"]
    assert data["nodes"][0]["points"][-1]["cpu_percent"] == 90.0
    assert [row.node for row in services.top(cluster)] == ["node-0", "node-1"]
    response = api.client.get("/api/v1/metrics/prometheus", headers={"Authorization": f"Bearer {api.key}"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert (f'runcrate_node_cpu_percent{{cluster="train",cluster_id="{cluster.pk}",environment="default",'
            f'node="node-0"}} 90 ') in text
    assert "# TYPE runcrate_node_memory_used_bytes gauge" in text
    assert api.client.get("/api/v1/metrics/prometheus").status_code == 401


@pytest.mark.parametrize("params, field", [({"since": "yesterday"}, "since"), ({"since": "9999999"}, "since"),
                                           ({"step": "0"}, "step"), ({"step": "x"}, "step")])
def test_bad_metrics_queries_are_400_on_their_field(cluster, owner, workspace, params, field):
    api = ApiClient(create_api_key(workspace=workspace, created_by=owner, name="k")[1])
    status, body = api.get(f"/clusters/{cluster.pk}/metrics", **params)
    assert status == 400 and field in error_of(body)["details"]


def test_another_workspace_cannot_read_the_metrics(cluster):
    from accounts.models import Role
    from tests.factories import MembershipFactory

    other = MembershipFactory(role=Role.OWNER)
    api = ApiClient(create_api_key(workspace=other.workspace, created_by=other.user, name="o")[1])
    assert api.get(f"/clusters/{cluster.pk}/metrics")[0] == 404
    record(cluster, timezone.now(), **{"node-0": reading(1, 10)})
    response = api.client.get("/api/v1/metrics/prometheus", headers={"Authorization": f"Bearer {api.key}"})
    assert "train" not in response.content.decode()


def rounds_of(cluster, start, minutes: int, busy_percent: float) -> None:
    nodes = list(cluster.nodes.order_by("index"))
    for i in range(minutes):
        at = start + dt.timedelta(minutes=i)
        total = at.timestamp()  # counters that keep growing across calls, as a node's do
        samples = record(cluster, at, **{n.name: reading(busy_percent / 100 * total, total) for n in nodes})
        idle.check(cluster, nodes, samples, at)


def test_an_idle_cluster_gets_one_notice_and_again_only_a_day_later(cluster, environment):
    start = timezone.now() - dt.timedelta(hours=30)
    rounds_of(cluster, start, 119, busy_percent=1)  # not yet 2 h
    assert not Notification.objects.filter(kind="cluster_idle").exists()
    rounds_of(cluster, start + dt.timedelta(minutes=119), 200, busy_percent=1)
    [notice] = Notification.objects.filter(kind="cluster_idle")
    assert notice.context["price_per_hour"] == "5.00" and notice.context["idle_seconds"] >= 7200
    rounds_of(cluster, start + dt.timedelta(minutes=319), 24 * 60 - 200, busy_percent=1)
    assert Notification.objects.filter(kind="cluster_idle").count() == 1  # a day has not passed
    rounds_of(cluster, start + dt.timedelta(hours=24, minutes=119), 5, busy_percent=1)
    assert Notification.objects.filter(kind="cluster_idle").count() == 2


def test_a_busy_round_ends_the_idle_stretch_and_an_environment_can_turn_the_notice_off(cluster, environment):
    start = timezone.now() - dt.timedelta(hours=5)
    rounds_of(cluster, start, 100, busy_percent=1)
    rounds_of(cluster, start + dt.timedelta(minutes=100), 1, busy_percent=60)
    assert IdleState.objects.get(cluster=cluster).idle_since is None
    rounds_of(cluster, start + dt.timedelta(minutes=101), 60, busy_percent=1)
    assert not Notification.objects.filter(kind="cluster_idle").exists()  # 1 h idle since the busy round
    type(environment).objects.filter(pk=environment.pk).update(idle_notice_hours=0)
    cluster.environment.refresh_from_db()
    rounds_of(cluster, start + dt.timedelta(minutes=161), 120, busy_percent=1)
    assert not Notification.objects.filter(kind="cluster_idle").exists()


def test_the_idle_email_names_the_cluster_its_price_and_the_terminate_link(cluster):
    from notifications.rendering import render

    subject, text, html = render("cluster_idle", {"cluster_id": cluster.pk, "idle_seconds": 7260, "price_per_hour": "5.00"})
    assert subject == "train has been idle 2 h 1 min at $5.00/h"
    assert f"/clusters/{cluster.pk}/#actions" in text and "never stop a cluster" in text and "Terminate train" in html


def test_owners_set_an_environments_idle_notice_hours_and_developers_cannot(environment, owner, developer):
    from django.test import Client

    def post(user, hours):
        client = Client()
        client.force_login(user)
        return client.post(f"/account/environments/{environment.pk}/idle-notice/", {"idle_notice_hours": hours})

    post(owner, "6")
    environment.refresh_from_db()
    assert environment.idle_notice_hours == 6
    post(developer, "0")
    post(owner, "-1")
    post(owner, "0.125")  # hundredths at most
    environment.refresh_from_db()
    assert environment.idle_notice_hours == 6
    # Parts of an hour count: half an hour.
    response = post(owner, "0.5")
    environment.refresh_from_db()
    assert environment.idle_notice_hours == Decimal("0.5")
    assert "idle clusters are noticed after 0.5 h" in [str(m) for m in response.wsgi_request._messages][0]


def test_half_an_hour_idle_is_noticed_when_the_environment_asks_for_half_an_hour(cluster, environment):
    type(environment).objects.filter(pk=environment.pk).update(idle_notice_hours=Decimal("0.5"))
    cluster.environment.refresh_from_db()
    start = timezone.now() - dt.timedelta(hours=1)
    rounds_of(cluster, start, 25, busy_percent=1)
    assert not Notification.objects.filter(kind="cluster_idle").exists()  # 24 minutes
    rounds_of(cluster, start + dt.timedelta(minutes=25), 10, busy_percent=1)
    [notice] = Notification.objects.filter(kind="cluster_idle")
    assert 1800 <= notice.context["idle_seconds"] < 2000


def test_the_beat_queues_each_ready_cluster_once_per_interval(cluster, settings):
    from django.core.cache import cache

    from metrics import collection, tasks

    cache.clear()
    assert cluster.pk in collection.due_clusters()
    tasks.collect_cluster_metrics(cluster.pk)  # simulated machines: nothing to read, but the round happened
    assert cluster.pk not in collection.due_clusters()
    later = timezone.now() + dt.timedelta(seconds=settings.METRICS_INTERVAL_SECONDS)
    assert cluster.pk in collection.due_clusters(later)
    assert collection.claim(cluster.pk) and not collection.claim(cluster.pk)
    collection.release(cluster.pk)
