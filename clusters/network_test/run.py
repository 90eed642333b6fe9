"""The network test: what a cluster's private network really carries between its machines.

A Celery task (clusters.network_test.tasks.run_network_test) claims a queued test and asks the cluster's
provider to measure; the provider runs clusters.network_test.node.network_test on the nodes
(iperf3 + ping over wg0, or nccl-tests' all_reduce_perf on GPU machines) and every round's
pairs are recorded and pushed to the page as they finish. It holds no cluster lease: a test
never delays ready, a grow or a terminate; between two rounds it asks whether the cluster is
still ready and stops cleanly when it is not. While it runs, a heartbeat thread renews the
test's `alive_at` every NETWORK_TEST_HEARTBEAT_SECONDS; a worker that dies mid-test stops it,
and the sweep (sweep_network_tests) fails the test NETWORK_TEST_STALE_SECONDS after the last
beat, so a new test may start within about half a minute.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from django.conf import settings

from clusters.beats import Beat
from clusters.models import NetworkTest, Node, Status
from clusters.network_test.node import NetworkTestReport, PairMeasurement
from clusters.network_test.services import (
    claim_network_test,
    fail_network_test_of_ended_cluster,
    finish_network_test,
    record_network_pairs,
    renew_network_test,
    set_network_test_method,
)
from clusters.providers import get_provider

log = logging.getLogger(__name__)


class _Recorder(NetworkTestReport):
    def __init__(self, test: NetworkTest) -> None:
        self.test = test

    def started(self, method: str) -> None:
        set_network_test_method(self.test, method)

    def measured(self, pairs: list[PairMeasurement]) -> None:
        record_network_pairs(self.test, pairs)

    def keep_going(self) -> bool:
        # A node being replaced stops the test too: its pairs would measure a machine on its
        # way out (the test runs again once the new one has taken over).
        return NetworkTest.objects.filter(
            pk=self.test.pk, status=NetworkTest.Status.RUNNING, cluster__status=Status.READY
        ).exists() and not _swapping(self.test.cluster_id)


def _swapping(cluster_id: int) -> bool:
    return Node.objects.filter(cluster_id=cluster_id, replacing__isnull=False, released_at__isnull=True).exists()


class Heartbeat(Beat):
    """Renews a running test's `alive_at` while the measuring runs, so the sweep can tell a long
    test from one whose worker died."""

    def __init__(self, test_id: int, interval: float | None = None) -> None:
        super().__init__(settings.NETWORK_TEST_HEARTBEAT_SECONDS if interval is None else interval,
                         name=f"network-test-{test_id}", beat=self._renew)
        self.test_id = test_id

    def _renew(self) -> bool:
        # False once finished, or failed by the sweep: nothing left to keep alive.
        return renew_network_test(self.test_id)


def run(test_id: int) -> str | None:
    """Run a queued test to its end; the outcome, or None when it was not this worker's to run."""
    test = claim_network_test(test_id)
    if test is None:
        return None
    cluster = test.cluster
    if cluster.status != Status.READY:
        fail_network_test_of_ended_cluster(test)
        return NetworkTest.Status.FAILED
    nodes = list(cluster.nodes.select_related("host").filter(released_at__isnull=True, replacing__isnull=True)
                 .order_by("index"))
    try:
        with Heartbeat(test.pk):
            result = get_provider(cluster.provider).network_test(cluster, nodes, _Recorder(test))
    except Exception as exc:  # the test fails with the reason, the cluster is untouched
        log.exception("network test %s of cluster %s failed", test.pk, cluster.pk)
        finish_network_test(test, error=f"The control plane hit an error: {type(exc).__name__}: {exc}"[:500])
        return NetworkTest.Status.FAILED
    if result.stopped and _swapping(cluster.pk):
        result.error = "Stopped: a node is being replaced. The network is measured again once its new machine has taken over."
    finish_network_test(
        test, error=result.error, notes=result.notes, nccl_rows=[asdict(row) for row in result.nccl_rows],
    )
    test.refresh_from_db(fields=["status"])
    return test.status
