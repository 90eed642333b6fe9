"""Every list endpoint answers a page from a fixed number of queries, whatever the number of
clusters, nodes, events or tests, and its rows say what the single-object endpoints say."""

from __future__ import annotations

import datetime as dt
import json
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from api import rows, schemas
from clusters.models import Cluster, NetworkTest, NetworkTestPair, Node, NodeHealth, Status
from tests.api.conftest import ApiClient
from tests.core.test_queries import make_clusters
from tests.factories import HostFactory

pytestmark = pytest.mark.django_db


def queries(api: ApiClient, path: str, **params) -> int:
    with CaptureQueriesContext(connection) as captured:
        status, body = api.get(path, **params)
    assert status == 200, body
    return len(captured.captured_queries)


def test_the_clusters_list_makes_the_same_queries_for_8_or_64_nodes_and_for_2_or_50_clusters(
    environment, machine_type, owner_key
):
    api = ApiClient(owner_key)
    make_clusters(environment, machine_type, 2, machines=8)
    api.get("/clusters")  # the key's first use is written once
    small = queries(api, "/clusters", status="all")
    status, body = api.get("/clusters", status="all")
    row_size = max(len(json.dumps(row)) for row in body["data"])

    make_clusters(environment, machine_type, 48, machines=64)
    assert queries(api, "/clusters", status="all") == small
    status, body = api.get("/clusters", status="all", limit=50)
    assert len(body["data"]) == 50 and {c["machines"] for c in body["data"]} == {8, 64}
    # A row is the cluster, not its nodes: as long at 64 machines as at 8.
    assert "nodes" not in body["data"][0]
    assert max(len(json.dumps(row)) for row in body["data"]) <= row_size + 10
    ready = [c for c in body["data"] if c["status"] == "ready"]
    assert ready and all(c["ssh"] and c["ssh"].startswith("ssh ") for c in ready)
    assert all(c["ssh"] is None for c in body["data"] if c["status"] == "provisioning")


def test_every_row_of_the_clusters_list_is_what_the_cluster_endpoint_answers(environment, machine_type, owner_key):
    api = ApiClient(owner_key)
    clusters = make_clusters(environment, machine_type, 3, machines=3)
    node = clusters[1].nodes.get(index=2)
    Node.objects.filter(pk=node.pk).update(health=NodeHealth.SOFTWARE_DOWN, health_detail="slurmd not running",
                                           health_checked_at=timezone.now(), joined_at=timezone.now())
    status, listed = api.get("/clusters", status="all")
    assert status == 200
    assert {row["id"]: row["unhealthy_nodes"] for row in listed["data"]} == {c.pk: int(c.pk == clusters[1].pk)
                                                                            for c in clusters}
    for row in listed["data"]:
        status, one = api.get(f"/clusters/{row['id']}")
        assert status == 200
        assert row == {field: one["data"][field] for field in row}
        assert set(row) == set(schemas.ClusterSummary.model_fields)
        # The head's line is the first of the Connect card's, node-0's own.
        assert row["ssh"] == one["data"]["nodes"][0]["ssh"]


def test_a_stopped_machine_is_not_counted_unhealthy_and_a_head_being_replaced_keeps_its_line(
    environment, machine_type, owner_key
):
    api = ApiClient(owner_key)
    cluster = make_clusters(environment, machine_type, 2, machines=2)[1]
    assert cluster.status == Status.READY
    Node.objects.filter(cluster=cluster, index=1).update(health=NodeHealth.UNREACHABLE, health_detail="no answer",
                                                         released_at=timezone.now(), state=Node.State.STOPPED)
    head = cluster.nodes.get(index=0)
    Node.objects.create(cluster=cluster, index=0, host=HostFactory(machine_type=machine_type), replacing=head,
                        state=Node.State.BOOTING)
    status, body = api.get("/clusters", status="all")
    [row] = [row for row in body["data"] if row["id"] == cluster.pk]
    assert row["unhealthy_nodes"] == 0
    status, one = api.get(f"/clusters/{cluster.pk}")
    assert row["ssh"] == one["data"]["ssh"] == one["data"]["nodes"][0]["ssh"] is not None
    assert [(n["name"], n["health"], n["replacing"]) for n in one["data"]["nodes"]] == [
        ("node-0", "unknown", False), ("node-0", "unknown", True), ("node-1", "unknown", False)]


def test_instances_events_and_network_tests_lists_make_the_same_queries_however_many_rows(
    environment, machine_type, owner_key
):
    api = ApiClient(owner_key)
    cluster = make_clusters(environment, machine_type, 1, machines=2, events=2)[0]
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.READY)

    def add_test(nodes: int) -> None:
        test = NetworkTest.objects.create(cluster=cluster, trigger="on_demand", expected_gbps=1.0,
                                          node_names=[f"node-{i}" for i in range(nodes)], status="passed")
        NetworkTestPair.objects.bulk_create(
            NetworkTestPair(test=test, phase="pairs", source_index=a, target_index=b, gbps=1.5)
            for a in range(nodes) for b in range(nodes) if a != b
        )

    add_test(2)
    api.get("/clusters")
    few = [queries(api, path) for path in ("/instances", f"/clusters/{cluster.pk}/events",
                                           f"/clusters/{cluster.pk}/network-tests")]
    make_clusters(environment, machine_type, 30, machines=8)
    many_events = make_clusters(environment, machine_type, 1, events=300)[0]
    Cluster.objects.filter(pk=many_events.pk).update(status=Status.READY)
    for _ in range(20):
        add_test(8)
    many = [queries(api, path) for path in ("/instances", f"/clusters/{many_events.pk}/events",
                                            f"/clusters/{cluster.pk}/network-tests")]
    assert many == few


def plan_nodes(sql: str, params) -> list[str]:
    import json

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found, stack = [], [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        found.append(node["Node Type"])
        stack.extend(node.get("Plans", []))
    return found


def test_instances_are_paged_in_order_from_indexes_and_counted_from_one_never_by_visiting_every_machine(
    environment, machine_type
):
    from api.rows import _INSTANCE_COLUMNS
    from clusters.queries import count_instances, workspace_instances

    make_clusters(environment, machine_type, 40, machines=4)
    page = workspace_instances(environment.workspace_id).values(*_INSTANCE_COLUMNS)[:50]
    with connection.cursor() as cursor:
        # Whether a full sort is even possible to avoid: the planner may still choose one for
        # a table this small, so plans that sort everything are priced out of reach.
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        nodes = plan_nodes(*page.query.sql_with_params())
        with CaptureQueriesContext(connection) as counted:
            assert count_instances(environment.workspace_id) == 160
        count = plan_nodes(counted.captured_queries[0]["sql"], None)
        cursor.execute("RESET enable_sort")
        cursor.execute("RESET enable_seqscan")
    assert "Sort" not in nodes  # an incremental sort within a cluster's nodes is fine
    assert "Index Only Scan" in count and "Hash Join" not in count and "Nested Loop" not in count


@given(st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1),
                    timezones=st.sampled_from([dt.UTC, ZoneInfo("UTC")])))
def test_a_list_writes_every_timestamp_as_the_schemas_do(moment):
    """The lists' twins leave timestamps to pydantic-core (api.rows._native_timestamps)."""
    twin = rows.plain(schemas.Node)
    fields = {"name": "node-0", "role": "head", "status": "ready", "private_ip": None, "step": None, "detail": None,
              "ssh": None, "replacing": False, "instance_id": 1, "health": "healthy", "health_detail": None,
              "health_checked_at": moment, "health_changed_at": None}
    written = json.loads(twin.model_validate(fields).model_dump_json())
    assert written["health_checked_at"] == schemas.timestamp(moment)
    assert written["health_changed_at"] is None


def test_every_instance_carries_its_nodes_health_and_ssh_line_as_the_cluster_endpoint_does(
    environment, machine_type, owner_key
):
    api = ApiClient(owner_key)
    clusters = make_clusters(environment, machine_type, 3, machines=2)  # provisioning, ready, degraded
    Node.objects.filter(cluster=clusters[1], index=1).update(health=NodeHealth.NETWORK_DOWN, health_detail="wg0 down")
    status, body = api.get("/instances", limit=50)
    assert status == 200 and len(body["data"]) == 6
    for cluster in clusters:
        status, one = api.get(f"/clusters/{cluster.pk}")
        listed = {i["name"]: i for i in body["data"] if i["cluster_id"] == cluster.pk}
        assert {name: (i["health"], i["ssh"]) for name, i in listed.items()} == {
            n["name"]: (n["health"], n["ssh"]) for n in one["data"]["nodes"]}
    by_cluster = {(i["cluster_id"], i["name"]): i for i in body["data"]}
    assert by_cluster[(clusters[0].pk, "node-0")]["ssh"] is None  # not connectable while it provisions
    assert by_cluster[(clusters[1].pk, "node-1")]["health"] == "network_down"
    assert by_cluster[(clusters[2].pk, "node-1")]["ssh"].startswith("ssh ")
