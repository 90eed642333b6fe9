"""A cluster's network tests: start one, list the runs, read one with every pair."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Status

from api import rows, schemas
from api.app import context, not_found, ok, responses
from api.endpoints.clusters import get_cluster
from clusters.models import NetworkTest
from clusters.network_test import card
from clusters.network_test import services as network_test_services

router = Router(tags=["Network tests"])

NETWORK_TEST = schemas.envelope(schemas.NetworkTest)


def _fresh(test_id: int) -> NetworkTest:
    return card.with_pairs(NetworkTest.objects.filter(pk=test_id)).get()


@router.post("clusters/{cluster_id}/network-tests", operation_id="startNetworkTest",
             summary="Measure the private network between every pair of nodes",
             description="Queues a test of a ready cluster: iperf3 and ping over wg0 (the ring, then every pair for "
                         "clusters of up to 8 nodes), or nccl-tests' all_reduce_perf on GPU machines that have it. "
                         "Poll GET …/network-tests/{test_id}: pairs fill in as they finish. 409 not_ready, or "
                         "network_test_running while one is queued or running.",
             response=responses({202: NETWORK_TEST}, 409))
def start_network_test(request: HttpRequest, cluster_id: schemas.PathId) -> Status:
    cluster = get_cluster(request, cluster_id)
    test = network_test_services.start_network_test(cluster, actor=context(request).actor)
    return Status(202, ok(_fresh(test.pk)))


@router.get("clusters/{cluster_id}/network-tests", operation_id="listNetworkTests",
            summary="A cluster's network tests, newest first",
            response=responses({200: schemas.list_envelope(schemas.NetworkTestItem)}, 400))
def list_network_tests(request: HttpRequest, cluster_id: schemas.PathId, pages: Query[schemas.PageQuery]) -> HttpResponse:
    cluster = get_cluster(request, cluster_id)
    return rows.network_test_page(request, cluster.network_tests.order_by("-created_at", "-id"), pages)


@router.get("clusters/{cluster_id}/network-tests/{test_id}", operation_id="getNetworkTest",
            summary="One network test with every measured pair", response=responses({200: NETWORK_TEST}))
def network_test_detail(request: HttpRequest, cluster_id: schemas.PathId, test_id: schemas.PathId) -> dict[str, Any]:
    cluster = get_cluster(request, cluster_id)
    test = card.with_pairs(cluster.network_tests.filter(pk=test_id)).first()
    if test is None:
        raise not_found("That network test")
    return ok(test)
