"""In Debian's Chromium, against the product as it runs (uvicorn + a Celery worker): the Network
card's matrix scrolls inside its card on a phone, and "Run network test" queues a test whose
outcome reaches the open page without a reload."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from accounts.models import Role
from clusters.models import NetworkTest
from clusters.network_test.node import PairMeasurement
from clusters.network_test.services import claim_network_test, finish_network_test, record_network_pairs
from clusters.services.create import create_cluster
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.test_browser import CHROMIUM, PHONE, SCREENSHOTS, WAIT_MS, Stack, stack  # noqa: F401 - fixture
from tests.live.test_dashboard_rules import browse

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]


@pytest.fixture
def measured_cluster(db):
    workspace = WorkspaceFactory(name="Rules Lab", credit_balance=Decimal("1000.00"))
    user = UserFactory(username="rita")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    cluster = create_cluster(environment=workspace.default_environment, name="wide",
                                      machine_type=machine_type_with_hosts(6), machine_count=6)
    cluster.refresh_from_db()
    assert cluster.status == "ready"
    names = [f"node-{i}" for i in range(6)]
    # Recorded as the runner records one (start_network_test would run it inline here, and
    # simulated machines have nothing to measure).
    queued = NetworkTest.objects.create(cluster=cluster, trigger="after_ready", expected_gbps=1.0, node_names=names)
    test = claim_network_test(queued.pk)
    assert test is not None
    record_network_pairs(test, [
        PairMeasurement("pairs", s, t, 0.4 if "node-5" in (s, t) else 1.6, 0.5) for s in names for t in names if s != t
    ])
    finish_network_test(test)
    return cluster


def test_the_matrix_scrolls_inside_its_card_on_a_phone_and_a_new_test_reaches_the_open_page(measured_cluster, stack):
    def on_phone(page, context):
        page.goto(measured_cluster.get_absolute_url())
        page.wait_for_selector("[data-testid=network-matrix]")
        widths = page.evaluate("""() => {
            const box = document.querySelector('.matrix-scroll');
            return {box: box.clientWidth, matrix: box.scrollWidth, page: document.documentElement.scrollWidth,
                    viewport: window.innerWidth};
        }""")
        assert widths["matrix"] > widths["box"], "the 6-node matrix is wider than a phone"
        assert widths["page"] <= widths["viewport"], "only the matrix scrolls, not the page"
        assert page.locator("[data-testid='pair-node-5-node-0'] .cell-flag").inner_text().lower() == "slow"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=network-card]").screenshot(path=str(SCREENSHOTS / "network-card-phone.png"))

    browse(stack, on_phone, **PHONE)

    def run_again(page, context):
        page.goto(measured_cluster.get_absolute_url())
        page.click("button:has-text('Run network test')")
        # The worker runs it (simulated machines: nothing to measure) and the card changes live.
        page.wait_for_selector("[data-testid=network-test-status]:has-text('Could not run')", timeout=WAIT_MS)
        assert "no network to measure" in page.inner_text("[data-testid=network-test-detail]")
        assert "Earlier runs" in page.inner_text("[data-testid=network-card]")

    browse(stack, run_again)
    assert NetworkTest.objects.filter(cluster=measured_cluster).count() == 2
