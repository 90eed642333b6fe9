"""The network test's Celery tasks: run one test, and beat's sweep of lost and stale ones."""

from __future__ import annotations

import logging

from celery import shared_task

from clusters.network_test import run
from clusters.network_test.services import (
    claim_lost_network_tests,
    fail_stale_network_tests,
    mark_network_test_unqueued,
)

log = logging.getLogger(__name__)


@shared_task(soft_time_limit=240, time_limit=270)
def run_network_test(test_id: int) -> str | None:
    """Run one queued network test (clusters.network_test.run); not under the cluster's lease."""
    return run.run(test_id)


def queue_network_test(test_id: int) -> bool:
    """After a commit: a broker that is down is logged; the sweep queues the test again."""
    try:
        run_network_test.delay(test_id)
    except Exception:  # any broker failure; the sweep is the retry
        log.exception("could not queue network test %s; the sweep will", test_id)
        mark_network_test_unqueued(test_id)
        return False
    return True


@shared_task(soft_time_limit=60)
def sweep_network_tests() -> dict:
    """Beat, every SWEEP_INTERVAL_SECONDS: fail running tests whose heartbeat stopped (their
    worker died); queue again those whose task never reached the broker or never started."""
    failed = fail_stale_network_tests()
    lost = claim_lost_network_tests()
    for test_id in lost:
        queue_network_test(test_id)
    return {"failed": failed, "queued_again": len(lost)}
