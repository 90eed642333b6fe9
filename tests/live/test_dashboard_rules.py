"""In Debian's Chromium, against the product as it runs (uvicorn + a Celery worker, see
test_browser.py): the dashboard's product rules and its live parts.

- a failed cluster's page offers what can start now, and one click creates it again;
- offers describe the self-serve network truthfully and the count is checked as it is typed;
- Request a quote is on the Clusters page; the Instances page lists cluster machines and
  leads each to its cluster, the only place it stops;
- the header's balance, the cost so far and the machines-up counts change without a reload.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from accounts.models import Role
from clusters.models import Cluster, Status
from offers import lab
from offers.models import Host, HostFault
from tests.factories import LocationFactory, MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.test_browser import CHROMIUM, CHROMIUM_ARGS, PHONE, WAIT_MS, Stack, stack  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]


@pytest.fixture
def owner(db):
    workspace = WorkspaceFactory(name="Rules Lab", credit_balance=Decimal("1000.00"))
    user = UserFactory(username="rita")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    return user


def browse(stack: Stack, check, **context_options) -> None:
    """Sign in as rita and run `check(page, context)`; the database is read before and after only."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(base_url=stack.url, **context_options)
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            page.goto("/login/")
            page.fill("#id_login", "rita")
            page.fill("#id_password", "pw")
            page.click("button[type=submit]")
            page.wait_for_url("**/clusters/")
            check(page, context)
        except Exception:
            print("web log:\n" + stack.log("web") + "\nworker log:\n" + stack.log("worker"))
            raise
        finally:
            browser.close()


def create_in_browser(page, machine_type_id: int, machines: int, name: str, software: str = "none") -> int:
    """Create a cluster through the form, so the web process queues its lifecycle for the worker."""
    page.goto(f"/clusters/new/?offer={machine_type_id}&machines={machines}")
    page.fill("#id_name", name)
    page.check(f"input[name=software][value={software}]")
    page.click("button:has-text('Create cluster')")
    page.wait_for_url(re.compile(r".*/clusters/\d+/$"))
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_a_failed_cluster_offers_what_starts_now_and_one_click_creates_it_again(owner, stack):
    here = machine_type_with_hosts(5)
    lab.inject(Host.objects.filter(pk=here.hosts.earliest("id").pk), fault=HostFault.BOOT_FAILS, boot_seconds=1)
    helsinki = machine_type_with_hosts(
        6, price_per_machine_hour=Decimal("2.00"), location=LocationFactory(code="eu-north-1", name="Helsinki, Finland")
    )
    failed_id = []

    def check(page, context):
        failed_id.append(create_in_browser(page, here.pk, 4, "train", "slurm"))
        page.locator("[data-testid=cluster-status]", has_text="Failed").wait_for(timeout=WAIT_MS)
        offers = page.locator("[data-testid=offers-now] li.offer")
        offers.first.wait_for()
        # The offer it failed on (4 healthy hosts; the faulty one is out of sale) comes first: same location.
        assert offers.first.get_attribute("data-offer") == str(here.pk)
        other = page.locator(f"[data-testid=offers-now] li.offer[data-offer='{helsinki.pk}']")
        assert "$8.00/h" in other.locator(".cluster-price").inner_text()
        other.get_by_role("button", name="Create train here").click()
        page.wait_for_url(re.compile(rf".*/clusters/(?!{failed_id[0]}/)\d+/$"))
        assert "Created train again" in page.locator("#messages").inner_text()

    browse(stack, check)
    again = Cluster.objects.exclude(pk=failed_id[0]).get()
    assert (again.name, again.machine_type_id, again.machine_count, again.software) == ("train", helsinki.pk, 4, "slurm")
    assert Cluster.objects.get(pk=failed_id[0]).status == Status.FAILED


def test_offers_tell_the_network_truthfully_and_check_the_count_as_it_is_typed(owner, stack):
    machine_type_with_hosts(6, kind="container", gpus_per_machine=1, interconnect="eth_25g")

    def check(page, context):
        page.goto("/offers/")
        caveat = page.locator("#network-caveat").inner_text()
        assert "Ethernet with an encrypted private network" in caveat and "about 1–2 Gbit/s" in caveat
        assert "not training a full model across machines" in caveat
        offer = page.locator("#offer-results li.offer").first
        assert "25 Gb Ethernet link per machine" in offer.inner_text()
        assert "No Kubernetes on containers" in offer.inner_text() and "InfiniBand" not in offer.inner_text()
        page.fill("#machines", "65")
        page.locator("#offer-results [role=alert]", has_text="at most 64 machines").wait_for()
        assert page.locator("#offer-results .cluster-price").count() == 0
        page.fill("#machines", "")
        page.locator("#offer-results [role=alert]", has_text="Enter how many machines").wait_for()
        page.fill("#machines", "3")
        page.locator("#offer-results .cluster-price").first.wait_for()
        assert "$7.50/h" in page.locator("#offer-results .cluster-price").first.inner_text()
        # On a container offer Kubernetes cannot be picked before submitting.
        page.locator("#offer-results li.offer").first.get_by_role("link", name="Configure").click()
        page.wait_for_url("**/clusters/new/**")
        assert page.locator("input[name=software][value=kubernetes]").is_disabled()
        assert "$7.50/h for the whole cluster" in page.locator("#cluster-price-estimate").inner_text()
        page.fill("#id_machines", "5")  # the server's plan answers, without a reload
        page.locator("#cluster-price-estimate", has_text="$12.50/h for the whole cluster").wait_for()

    browse(stack, check)


def test_quotes_from_the_clusters_page_and_instances_that_end_only_with_their_cluster(owner, stack):
    machine_type = machine_type_with_hosts(4)
    created = []

    def check(page, context):
        created.append(create_in_browser(page, machine_type.pk, 2, "train"))
        page.goto("/clusters/")
        page.locator(".page-head").get_by_role("link", name="Request a quote").click()
        page.wait_for_url("**/quote/**")
        page.goto("/clusters/instances/")
        rows = page.locator("#instance-table tbody tr")
        assert rows.count() == 2
        assert rows.first.locator("[data-testid=instance-cluster]").get_attribute("href") == f"/clusters/{created[0]}/"
        # No Terminate that can only fail: the row leads to the cluster, where it is terminated.
        assert page.locator("#instance-table").get_by_role("button").count() == 0
        rows.nth(1).locator("[data-testid=instance-stop]").click()
        page.wait_for_url(re.compile(rf".*/clusters/{created[0]}/#terminate-zone-{created[0]}$"))
        assert page.locator(f"#terminate-zone-{created[0]}").is_visible()

    browse(stack, check)
    assert Cluster.objects.get(pk=created[0]).nodes.filter(released_at__isnull=True).count() == 2


def test_the_header_money_cost_so_far_and_machine_counts_change_without_a_reload(owner, stack):
    machine_type = machine_type_with_hosts(4)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=6, join_seconds=1)

    def check(page, context):
        create_in_browser(page, machine_type.pk, 4, "live")
        page.evaluate("window.__sameDocument = true")
        progress = page.locator("[data-testid=machine-progress]")
        assert re.search(r"[0-3] of 4 machines up", progress.inner_text())
        assert "left" in progress.inner_text()
        page.locator("[data-testid=cluster-status]", has_text="Ready").wait_for(timeout=WAIT_MS)
        cost = page.locator("[data-testid=cost-so-far]")
        first = Decimal(cost.inner_text().lstrip("$").replace(",", ""))
        page.wait_for_function(
            "(first) => parseFloat(document.querySelector('[data-testid=cost-so-far]').textContent.slice(1)) > first",
            arg=float(first), timeout=20_000,
        )
        # The header's runway follows the cluster that now bills $10/h.
        page.locator("#runway", has_text="at $10.00/h").wait_for(timeout=20_000)
        balance = page.locator("[data-testid=header-balance]")
        assert balance.inner_text() == "$1,000.00"
        # A top-up made in another tab shows in this one's header without a reload.
        other = context.new_page()
        other.goto("/billing/")
        other.get_by_role("button", name="Add $50 (dev)").click()
        page.locator("[data-testid=header-balance]", has_text="$1,050.00").wait_for(timeout=25_000)
        assert page.evaluate("window.__sameDocument") is True

    browse(stack, check)
