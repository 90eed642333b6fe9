"""POST/GET /api/v1/clusters/{id}/network-tests: who may start one, when, and what a run reads as."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from clusters.models import NetworkTest
from clusters.network_test import tasks as network_test_tasks
from clusters.network_test.node import PairMeasurement
from clusters.network_test.services import (
    claim_network_test,
    finish_network_test,
    record_network_pairs,
    start_network_test,
)
from clusters.services.replace import replace_node
from clusters.services.terminate import terminate_cluster
from tests.api.conftest import drive, error_of, make_cluster

pytestmark = pytest.mark.django_db


def ready_cluster(environment, machine_type, name: str = "train", machines: int = 3):
    cluster = make_cluster(environment, machine_type, name=name, machines=machines)
    drive(cluster)
    assert cluster.status == "ready"
    return cluster


def test_a_network_test_is_refused_until_the_cluster_is_ready(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    status, body = api.post(f"/clusters/{cluster.pk}/network-tests")
    assert status == 409 and error_of(body)["code"] == "not_ready"
    assert "provisioning" in error_of(body)["message"]
    assert not NetworkTest.objects.exists()


def test_a_developer_starts_one_and_a_second_is_refused_while_it_is_queued(dev_api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type)
    status, body = dev_api.post(f"/clusters/{cluster.pk}/network-tests")
    assert status == 202, body
    test = body["data"]
    assert test["status"] == "queued" and test["trigger"] == "on_demand" and test["requested_by"].startswith("api key")
    assert test["trigger_label"] == "On request"
    assert test["nodes"] == ["node-0", "node-1", "node-2"] and test["expected_gbps"] == 1.0
    assert test["pairs"] == [] and test["summary"]["pairs_expected"] == 3 + 6
    status, body = dev_api.post(f"/clusters/{cluster.pk}/network-tests")
    assert status == 409 and error_of(body)["code"] == "network_test_running"
    assert error_of(body)["details"]["network_test_id"] == test["id"]
    assert cluster.events.filter(event="network_test_requested").count() == 1


def test_another_workspace_sees_neither_the_cluster_nor_its_tests(api, outsider_api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type)
    status, body = api.post(f"/clusters/{cluster.pk}/network-tests")
    test_id = body["data"]["id"]
    for method, path in (("post", f"/clusters/{cluster.pk}/network-tests"), ("get", f"/clusters/{cluster.pk}/network-tests"),
                         ("get", f"/clusters/{cluster.pk}/network-tests/{test_id}")):
        status, body = getattr(outsider_api, method)(path)
        assert status == 404 and error_of(body)["code"] == "not_found", path
    assert NetworkTest.objects.count() == 1


def test_a_test_of_another_cluster_is_404_under_this_one(api, environment, machine_type):
    one = ready_cluster(environment, machine_type, name="one", machines=2)
    two = ready_cluster(environment, machine_type, name="two", machines=2)
    _, body = api.post(f"/clusters/{one.pk}/network-tests")
    status, body = api.get(f"/clusters/{two.pk}/network-tests/{body['data']['id']}")
    assert status == 404


def test_simulated_machines_have_no_network_to_measure_and_the_test_says_so(api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type)
    _, body = api.post(f"/clusters/{cluster.pk}/network-tests")
    assert network_test_tasks.run_network_test(body["data"]["id"]) == "failed"
    status, body = api.get(f"/clusters/{cluster.pk}/network-tests/{body['data']['id']}")
    assert status == 200
    assert body["data"]["status"] == "failed" and "no network to measure" in body["data"]["detail"]
    assert body["data"]["pairs"] == [] and body["data"]["finished_at"]
    # Finished: a new one may start.
    status, _ = api.post(f"/clusters/{cluster.pk}/network-tests")
    assert status == 202


def test_pairs_read_back_as_measured_and_slow_ones_are_marked_against_the_floor(api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type, machines=2)
    claimed = claim_network_test(start_network_test(cluster, actor="alice").pk)
    assert claimed is not None and claim_network_test(claimed.pk) is None, "claimed once"
    test = claimed
    record_network_pairs(test, [
        PairMeasurement("ring", "node-0", "node-1", 1.8, None), PairMeasurement("ring", "node-1", "node-0", 0.4, None),
    ])
    record_network_pairs(test, [PairMeasurement("pairs", "node-0", "node-1", 1.9, 0.31)])
    record_network_pairs(test, [PairMeasurement("pairs", "node-1", "node-0", None, 0.3, "iperf3: unable to connect")])
    status, body = api.get(f"/clusters/{cluster.pk}/network-tests/{test.pk}")
    data = body["data"]
    assert data["status"] == "running" and data["summary"]["pairs_measured"] == 4
    by_key = {(p["phase"], p["source"], p["target"]): p for p in data["pairs"]}
    assert by_key[("ring", "node-1", "node-0")]["slow"] is True
    assert by_key[("pairs", "node-0", "node-1")] | {"measured_at": None} == {
        "phase": "pairs", "source": "node-0", "target": "node-1", "gbps": 1.9, "latency_ms": 0.31, "slow": False,
        "error": None, "measured_at": None,
    }
    assert finish_network_test(test)
    test.refresh_from_db()
    assert test.status == "partial", "the pairs measured are kept and counted, the one that could not be is named"
    assert test.detail.startswith("3 of 4 measurements taken")
    assert "1 pair could not be measured" in test.detail and "1 slow pair," in test.detail
    status, body = api.get(f"/clusters/{cluster.pk}/network-tests")
    assert status == 200 and body["meta"]["total"] == 1 and "pairs" not in body["data"][0]


def test_the_list_is_newest_first_and_paginated(api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type, machines=2)
    ids = []
    for _ in range(3):
        test = start_network_test(cluster, actor="alice")
        ids.append(test.pk)
        claim_network_test(test.pk)
        finish_network_test(test, error="stopped")
    status, body = api.get(f"/clusters/{cluster.pk}/network-tests", limit=2)
    assert status == 200 and [t["id"] for t in body["data"]] == ids[::-1][:2]
    assert body["meta"] == {"total": 3, "limit": 2, "offset": 0}
    status, body = api.get(f"/clusters/{cluster.pk}/network-tests", limit=0)
    assert status == 400


def test_a_test_left_running_by_a_dead_worker_is_failed_by_the_sweep_and_a_new_one_may_start(
    api, environment, machine_type, settings
):
    cluster = ready_cluster(environment, machine_type, machines=2)
    test = start_network_test(cluster, actor="alice")
    claim_network_test(test.pk)
    assert api.post(f"/clusters/{cluster.pk}/network-tests")[0] == 409
    # Its runner's heartbeat stopped (the worker died).
    NetworkTest.objects.filter(pk=test.pk).update(
        alive_at=timezone.now() - dt.timedelta(seconds=settings.NETWORK_TEST_STALE_SECONDS + 1)
    )
    assert network_test_tasks.sweep_network_tests() == {"failed": 1, "queued_again": 0}
    test.refresh_from_db()
    assert test.status == "failed" and "stopped before it finished" in test.detail
    # A late round from the dead worker's test is not recorded.
    assert record_network_pairs(test, [PairMeasurement("ring", "node-0", "node-1", 1.0, None)]) == []
    assert api.post(f"/clusters/{cluster.pk}/network-tests")[0] == 202


def test_a_queued_test_whose_task_was_lost_is_queued_again_by_the_sweep(environment, machine_type, settings):
    cluster = ready_cluster(environment, machine_type, machines=2)
    test = start_network_test(cluster, actor="alice")
    assert network_test_tasks.sweep_network_tests() == {"failed": 0, "queued_again": 0}
    NetworkTest.objects.filter(pk=test.pk).update(
        queued_at=timezone.now() - dt.timedelta(seconds=settings.CLUSTER_QUEUED_GRACE_SECONDS + 1)
    )
    # Tasks run inline here: queued again means it ran (simulated machines: it fails, saying why).
    assert network_test_tasks.sweep_network_tests() == {"failed": 0, "queued_again": 1}
    test.refresh_from_db()
    assert test.status == "failed" and "no network to measure" in test.detail


def test_a_queued_test_of_a_cluster_terminated_before_it_ran_is_not_run(api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type, machines=2)
    test = start_network_test(cluster, actor="alice")
    terminate_cluster(cluster, actor="alice")
    assert network_test_tasks.run_network_test(test.pk) == "failed"
    test.refresh_from_db()
    assert test.detail == "Not run: the cluster is terminating." and not test.pairs.exists()
    status, body = api.post(f"/clusters/{cluster.pk}/network-tests")
    assert status == 409 and error_of(body)["code"] == "not_ready"


def test_a_cluster_mid_replacement_is_measured_once_the_new_machine_took_over(api, environment, machine_type):
    cluster = ready_cluster(environment, machine_type, machines=2)
    replace_node(cluster, "node-1", actor="alice")
    status, body = api.post(f"/clusters/{cluster.pk}/network-tests")
    assert status == 409 and error_of(body)["code"] == "replacement_in_progress"
    assert not NetworkTest.objects.exists()
