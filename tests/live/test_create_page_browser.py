"""The create page in Debian's Chromium, against the product as it runs (see test_browser.py):
every price, warning and refusal is the server's answer as the fields change (the `plan`
partial, under the page's Content-Security-Policy), and the page fits a 390 px phone."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounts.models import Role, SSHKey
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.test_browser import (  # noqa: F401 - fixture
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOTS,
    Stack,
    stack,
    watch_policy,
)

PHONE_WIDTH = 390  # an iPhone 12–15's CSS width, as test_browser.PHONE

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]


@pytest.fixture
def owner(db):
    workspace = WorkspaceFactory(name="Phone Lab", credit_balance=Decimal("12.00"))
    user = UserFactory(username="rita")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    for name in ("laptop", "build-server-in-the-basement"):
        # A fingerprint is one long word: it must wrap, not widen the page.
        SSHKey.objects.create(workspace=workspace, name=name, public_key=f"ssh-ed25519 AAAA{name}",
                              fingerprint="SHA256:" + (name[:3] + "x9Qm2") * 6)
    return user


def test_the_create_page_asks_the_server_as_fields_change_and_fits_a_phone(owner, stack):
    from playwright.sync_api import sync_playwright

    vm = machine_type_with_hosts(6)
    container = machine_type_with_hosts(4, kind="container", gpus_per_machine=1, price_per_machine_hour=Decimal("1.00"))
    violations: list[str] = []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = signed_in_phone(browser, stack, violations)
            asked: list[str] = []
            page.on("request", lambda request: asked.append(request.url) if "partial=plan" in request.url else None)

            page.goto(f"/clusters/new/?offer={vm.pk}&machines=4")
            estimate = page.locator("#cluster-price-estimate")
            assert "$10.00/h for the whole cluster" in estimate.inner_text()
            widths = page.evaluate("() => ({page: document.documentElement.scrollWidth, viewport: window.innerWidth})")
            page.screenshot(path=str(SCREENSHOTS / "create-phone.png"), full_page=True)
            assert widths["page"] <= widths["viewport"] == PHONE_WIDTH, widths

            # The count re-prices the cluster and re-checks the balance, from the server.
            page.fill("#id_machines", "8")
            page.locator("#plan-problems", has_text="does not cover $20.00").wait_for()
            assert "$20.00/h for the whole cluster" in estimate.inner_text()
            assert "lasts 36 minutes" in page.locator("#runway-warning").inner_text()
            page.fill("#id_machines", "3")
            page.locator("#cluster-price-estimate", has_text="$7.50/h for the whole cluster").wait_for()
            assert page.locator("#plan-problems").count() == 0

            # A container offer greys Kubernetes out and says why.
            page.check("input[name=software][value=kubernetes]")
            page.select_option("#id_offer", str(container.pk))
            page.locator("#kubernetes-note", has_text="this offer is a container").wait_for()
            assert page.locator("input[name=software][value=kubernetes]").is_disabled()
            assert page.locator("input[name=software][value=none]").is_checked()
            assert "$3.00/h for the whole cluster" in estimate.inner_text()

            # No key ticked: the server's warning.
            for box in page.locator("input[name=ssh_keys]").all():
                box.uncheck()
            page.locator("#no-key-warning", has_text="No SSH key picked").wait_for()
            widths = page.evaluate("() => ({page: document.documentElement.scrollWidth, viewport: window.innerWidth})")
            page.screenshot(path=str(SCREENSHOTS / "create-phone-changed.png"), full_page=True)
            assert widths["page"] <= widths["viewport"], widths

            # The form still creates with a normal submit.
            page.fill("#id_name", "phone-run")
            page.locator("input[name=ssh_keys]").first.check()
            page.locator("#no-key-warning").wait_for(state="detached")
            page.click("button:has-text('Create cluster')")
            page.wait_for_url("**/clusters/*/")
            assert "Created phone-run" in page.locator("#messages").inner_text()
            # Every change asked the server, with the form's values and never its CSRF token.
            assert len(asked) >= 4 and not any("csrfmiddlewaretoken" in url for url in asked), asked
            assert any(f"offer={container.pk}" in url and "machines=3" in url for url in asked), asked
        except Exception:
            print("web log:\n" + stack.log("web"))
            raise
        finally:
            browser.close()
    assert violations == []


def signed_in_phone(browser, stack: Stack, violations: list[str]):
    """A page on a 390 px phone, rita signed in, the page's policy watched."""
    context = browser.new_context(
        base_url=stack.url, viewport={"width": PHONE_WIDTH, "height": 844}, device_scale_factor=2,
        is_mobile=True, has_touch=True,
    )
    watch_policy(context, violations)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto("/login/")
    page.fill("#id_login", "rita")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_url("**/clusters/")
    return page


def test_on_a_phone_the_image_is_picked_from_the_offers_images_and_the_cluster_boots_it(owner, stack):
    from playwright.sync_api import sync_playwright

    from clusters.models import Cluster

    vm = machine_type_with_hosts(6)
    violations: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = signed_in_phone(browser, stack, violations)

            page.goto(f"/clusters/new/?offer={vm.pk}&machines=2")
            field = page.locator("#image-field")
            assert page.locator("input[name=image][value=pytorch]").is_checked()
            assert "PyTorch 2.13.0 (CPU)" in field.locator("label:has(input[value=pytorch])").inner_text()
            # Each image's line is its touch target and fits the phone.
            for label in field.locator("label.choice").all():
                box = label.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE_WIDTH, box
            field.locator("label:has(input[value=base])").tap()
            # The server's plan comes back with the tapped image still picked.
            page.wait_for_function("() => document.querySelector('input[name=image][value=base]').checked")
            page.wait_for_load_state("networkidle")
            assert page.locator("input[name=image][value=base]").is_checked()
            widths = page.evaluate("() => ({page: document.documentElement.scrollWidth, viewport: window.innerWidth})")
            page.screenshot(path=str(SCREENSHOTS / "create-phone-image.png"), full_page=True)
            assert widths["page"] <= widths["viewport"], widths

            page.fill("#id_name", "phone-image")
            page.click("button:has-text('Create cluster')")
            page.wait_for_url("**/clusters/*/")
            assert page.locator("#cluster-image").inner_text().startswith("base")
        except Exception:
            print("web log:\n" + stack.log("web"))
            raise
        finally:
            browser.close()
    assert violations == []
    assert Cluster.objects.get(name="phone-image").image == "base"
