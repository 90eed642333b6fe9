"""In Debian's Chromium at 1280 and 390 px, against the product as it runs (uvicorn + a Celery
worker, see test_browser.py): what a newcomer reads on the cluster pages is in the customer's
words, and says what it costs."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from playwright.sync_api import Error as PlaywrightError

from accounts.models import Role
from clusters.models import Cluster, Status
from offers import lab
from offers.models import Host, HostFault
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.test_browser import CHROMIUM, CHROMIUM_ARGS, PHONE, SCREENSHOTS, WAIT_MS, Stack, stack  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]
DESKTOP = {"viewport": {"width": 1280, "height": 900}}
WIDTHS: dict[str, dict] = {"desktop": DESKTOP, "phone": PHONE}


@pytest.fixture
def owner(db):
    workspace = WorkspaceFactory(name="Newcomer Lab", credit_balance=Decimal("1000.00"))
    user = UserFactory(username="nina")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    return user


def browse(stack: Stack, check, **context_options) -> list[str]:
    """Sign in as nina and run `check(page)`; returns the console errors and page errors seen."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(base_url=stack.url, **context_options)
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_default_timeout(30_000)
        try:
            page.goto("/login/")
            page.fill("#id_login", "nina")
            page.fill("#id_password", "pw")
            page.click("button[type=submit]")
            page.wait_for_url("**/clusters/")
            check(page)
        except Exception:
            print("web log:\n" + stack.log("web") + "\nworker log:\n" + stack.log("worker"))
            raise
        finally:
            browser.close()
    return errors


def unexpected(errors: list[str]) -> list[str]:
    """The console errors a page should not have: htmx names a request the browser cut short
    as it left the page (htmx:sendAbort, with its htmx:afterRequest) an error too."""
    aborted = any(e.startswith("htmx:sendAbort") for e in errors)
    return [e for e in errors if not (aborted and e.startswith(("htmx:sendAbort", "htmx:afterRequest")))]


def shot(page, name: str, selector: str | None = None) -> None:
    """The whole page, and the part a test is about (to look at closely)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
    if selector:
        # A push may swap the part while it is taken (the live cost does, every few seconds):
        # the next try finds the new one.
        for attempt in range(3):
            try:
                page.locator(selector).first.screenshot(path=str(SCREENSHOTS / name.replace(".png", "-part.png")))
                return
            except PlaywrightError:
                if attempt == 2:
                    raise


def create_in_browser(page, machine_type_id: int, machines: int, name: str, software: str = "none") -> int:
    page.goto(f"/clusters/new/?offer={machine_type_id}&machines={machines}")
    page.fill("#id_name", name)
    page.check(f"input[name=software][value={software}]")
    page.click("button:has-text('Create cluster')")
    page.wait_for_url(re.compile(r".*/clusters/\d+/$"))
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


@pytest.mark.parametrize("width", WIDTHS)
def test_a_degraded_cluster_says_why_and_what_it_costs_and_offers_to_replace_the_machine(owner, stack, width):
    machine_type = machine_type_with_hosts(4, price_per_machine_hour=Decimal("2.50"))
    lab.inject(Host.objects.filter(pk=machine_type.hosts.order_by("id")[1].pk), fault=HostFault.INSTALL_FAILS)

    def check(page):
        create_in_browser(page, machine_type.pk, 3, "deg", "slurm")
        page.locator("[data-testid=cluster-status]", has_text="Degraded").wait_for(timeout=WAIT_MS)
        banner = page.locator("[data-testid=degraded-banner]")
        banner.wait_for()
        text = " ".join(banner.inner_text().split())
        assert "Slurm did not install on node-1" in text, text
        assert "Every machine stays up, reachable and billed at $7.50/h" in text, text
        assert "replace that machine (below) or retry the install, or terminate the cluster" in text, text
        assert page.locator("[data-testid=replace-node-1]").is_visible()
        assert not page.locator("[data-testid=replace-node-0]").count(), "the head is not replaced"
        shot(page, f"degraded-{width}.png", "#status-card")
        # Nothing sticks out of the page at this width.
        assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]
        # Replace asks the page's one question, about the row's node, and "no" sends nothing.
        def answer(dialog) -> None:
            asked.append(dialog.message)
            dialog.dismiss()

        page.once("dialog", answer)
        page.click("[data-testid=replace-node-1]")
        page.wait_for_timeout(500)

    asked: list[str] = []
    errors = browse(stack, check, **WIDTHS[width])
    assert Cluster.objects.get().status == Status.DEGRADED
    assert len(asked) == 1 and asked[0].startswith("Replace node-1? A new "), asked
    assert "takes node-1's name and private address 10.77.0.2 and joins Slurm" in asked[0], asked
    assert "one more machine is billed ($2.50/h)" in asked[0], asked
    assert not Cluster.objects.get().nodes.filter(replacing__isnull=False).exists()
    assert not unexpected(errors), errors


@pytest.mark.parametrize("width", WIDTHS)
def test_the_live_cost_never_goes_down_as_pushes_arrive(owner, stack, width):
    # Eight machines at $1.00: the cluster's exact cost reaches a cent in 2.3 s, each
    # machine's (what the ledger posts and the server shows) only after 18 s, then $0.08 at once.
    machine_type = machine_type_with_hosts(8, price_per_machine_hour=Decimal("1.00"))
    seen: list[str] = []

    def check(page):
        cluster_id = create_in_browser(page, machine_type.pk, 8, "meter")
        page.locator("[data-testid=cluster-status]", has_text="Ready").wait_for(timeout=WAIT_MS)
        page.evaluate("""() => {
            window.__costs = [];
            const read = () => {
                const el = document.querySelector('#cost-so-far');
                const text = el && el.textContent.trim();
                if (text && window.__costs[window.__costs.length - 1] !== text) window.__costs.push(text);
            };
            read();
            new MutationObserver(read).observe(document.body, {subtree: true, childList: true, characterData: true});
        }""")
        for _ in range(40):
            # What a push does: the status card, rendered by the server now, swapped in.
            page.evaluate(f"""() => htmx.ajax('GET', '/clusters/{cluster_id}/?partial=status-card',
                                              {{target: '#status-card', swap: 'outerHTML'}})""")
            page.wait_for_timeout(700)
        seen.extend(page.evaluate("window.__costs"))
        shot(page, f"cost-{width}.png", "#status-card")

    errors = browse(stack, check, **WIDTHS[width])
    figures = [Decimal(text.lstrip("$").replace(",", "")) for text in seen]
    assert len(figures) >= 2, seen
    assert figures == sorted(figures), f"the cost went down: {seen}"
    assert not errors, errors


@pytest.mark.parametrize("width", WIDTHS)
def test_the_api_reference_fits_the_width_and_shows_names_as_code(owner, stack, width):
    def check(page):
        page.goto("/api/v1/docs")
        text = page.locator("main").inner_text()
        assert "idle_notice_hours" in text and "`" not in text
        assert page.locator("p code, td code").count() > 50
        assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]
        # The page names the product's icon: no request for a missing /favicon.ico.
        assert page.locator("link[rel=icon]").get_attribute("href").endswith("favicon.svg")
        shot(page, f"api-docs-{width}.png")

    errors = browse(stack, check, **WIDTHS[width])
    assert not errors, errors


@pytest.mark.parametrize("width", WIDTHS)
def test_a_cluster_made_in_another_tab_joins_the_list_without_a_console_error(owner, stack, width):
    machine_type = machine_type_with_hosts(4)

    def check(page):
        page.goto("/clusters/")
        page.locator("#cluster-list").wait_for()
        page.wait_for_timeout(500)  # the list's socket is open
        other = page.context.new_page()
        create_in_browser(other, machine_type.pk, 2, "elsewhere")
        # Its rows are pushed to this page, which shows no row for it yet: the list is fetched again.
        page.locator("#cluster-list a", has_text="elsewhere").wait_for(timeout=WAIT_MS)
        page.locator("#cluster-list .status", has_text="Ready").wait_for(timeout=WAIT_MS)
        other.close()

    errors = browse(stack, check, **WIDTHS[width])
    assert not unexpected(errors), errors


def metrics_card_never_started(page) -> None:
    """The Metrics card of a cluster that never started: one sentence, no table or charts
    waiting for figures that cannot come."""
    card = page.locator("#metrics-card")
    card.locator("text=No figures: the cluster never started").wait_for(timeout=WAIT_MS)
    text = " ".join(card.inner_text().split())
    assert "yet" not in text, text
    assert not page.locator("#metrics-charts, #metrics-top-table, .metric-windows").count(), text
    assert "{#" not in page.inner_text("body"), "a template comment shows on the page"


@pytest.mark.parametrize("width", WIDTHS)
def test_a_cluster_that_failed_while_its_page_was_open_waits_for_no_figures(owner, stack, width):
    machine_type = machine_type_with_hosts(2, price_per_machine_hour=Decimal("1.00"))
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=3)
    lab.inject(machine_type.hosts.order_by("id")[1], fault=HostFault.BOOT_FAILS)
    errors: list[str] = []

    def check(page):
        create_in_browser(page, machine_type.pk, 2, "doomed")
        assert "yet" in page.locator("#metrics-card").inner_text(), "while it provisions, figures are to come"
        page.locator("[data-testid=cluster-status]", has_text="Failed").wait_for(timeout=WAIT_MS)
        metrics_card_never_started(page)
        assert "Nothing charged" in page.locator("#status-card").inner_text()
        shot(page, f"failed-live-metrics-{width}.png", "#metrics-card")
        page.reload()
        metrics_card_never_started(page)

    errors = browse(stack, check, **WIDTHS[width])
    assert not unexpected(errors), errors


@pytest.mark.parametrize("width", WIDTHS)
def test_a_cluster_terminated_while_provisioning_says_nothing_was_charged(owner, stack, width):
    machine_type = machine_type_with_hosts(2, price_per_machine_hour=Decimal("1.00"))
    # Machines that take minutes to boot: the customer stops the cluster before they are up.
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=600)

    def check(page):
        cluster_id = create_in_browser(page, machine_type.pk, 2, "early")
        page.click("summary:has-text('Terminate cluster')")
        page.fill(f"#confirm-name-{cluster_id}", "early")
        page.click("button:has-text('Terminate early')")
        page.locator("[data-testid=cluster-status]", has_text="Terminated").wait_for(timeout=WAIT_MS)
        for _ in range(2):  # as pushed while the page was open, then as the page is served
            billing = page.locator("#status-card dt:has-text('Billing') + dd").inner_text()
            assert billing == "Nothing charged", billing
            metrics_card_never_started(page)
            shot(page, f"terminated-early-{width}.png", "#status-card")
            page.reload()

    errors = browse(stack, check, **WIDTHS[width])
    assert not unexpected(errors), errors
    assert Cluster.objects.get(name="early").status == Status.TERMINATED
