"""The Audit page in Debian's Chromium at 1280 and 390 px: an Owner and a Manager read and filter
it, a Developer gets no link and a 404, an outsider sees only their own workspace's entries."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Role
from audit.models import AuditEvent
from audit.recording import record
from tests.factories import MembershipFactory, UserFactory
from tests.live.test_browser import CHROMIUM, CHROMIUM_ARGS, PHONE, SCREENSHOTS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]

DESKTOP = {"viewport": {"width": 1280, "height": 900}}


def session_cookie(user, url: str) -> dict:
    client = Client()
    client.force_login(user)
    return {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": url}


def test_the_audit_page_for_owner_manager_developer_and_outsider(live_server, workspace, owner, developer, outsider):
    manager = MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="mona")).user
    for i in range(3):
        record(workspace.pk, "environment.budget_change", workspace.default_environment, label="default",
               before={"monthly_budget": f"{100 + i}.00"}, after={"monthly_budget": f"{200 + i}.00"})
    record(workspace.pk, "cluster.terminate", object_type="cluster", object_id=7, label="train-with-a-long-name",
           before={"status": "ready"}, after={"status": "terminating", "reason": "user_requested"})
    theirs = record(outsider.memberships.get().workspace_id, "ssh_key.add", object_type="sshkey", object_id=1,
                    label="mallorys-key")
    cookies = {u.username: session_cookie(u, live_server.url) for u in (owner, manager, developer, outsider)}
    # Each sign-in is an entry too (three in this workspace, one in mallory's).
    ours = AuditEvent.objects.filter(workspace=workspace).count()
    mallorys = AuditEvent.objects.filter(workspace_id=theirs.workspace_id).count()
    assert (ours, mallorys) == (7, 2)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    seen: dict[str, dict] = {}

    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread, where Django refuses database
    # calls: the database is read before and after the browser, never during.
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for size, options in (("1280", DESKTOP), ("390", PHONE)):
                for name, cookie in cookies.items():
                    context = chromium.new_context(**options)
                    context.add_cookies([cookie])  # type: ignore[list-item]
                    page = context.new_page()
                    response = page.goto(f"{live_server.url}/account/audit/")
                    assert response is not None
                    result = {"status": response.status, "nav": page.locator("a[href='/account/audit/']").count(),
                              "rows": page.locator("#audit-table tbody tr").count(),
                              "text": page.locator("body").inner_text()}
                    # Nothing spills sideways on the phone: the table stacks.
                    result["overflow"] = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
                    if name in ("alice", "mona"):
                        page.fill("#id_action", "cluster")
                        page.click("#audit-filters button[type=submit]")
                        page.wait_for_url("**action=cluster**")
                        result["filtered"] = page.locator("#audit-table tbody tr").count()
                    page.screenshot(path=str(SCREENSHOTS / f"audit-{name}-{size}.png"), full_page=True)
                    seen[f"{name}@{size}"] = result
                    context.close()
        finally:
            chromium.close()

    for size in ("1280", "390"):
        for name in ("alice", "mona"):
            got = seen[f"{name}@{size}"]
            assert got["status"] == 200 and got["nav"] >= 1 and got["rows"] == ours, got
            assert "train-with-a-long-name" in got["text"] and "mallorys-key" not in got["text"]
            assert got["filtered"] == 1 and not got["overflow"], got
        dave = seen[f"dave@{size}"]
        assert dave["status"] == 404 and dave["rows"] == 0
        mallory = seen[f"mallory@{size}"]
        assert mallory["status"] == 200 and mallory["rows"] == mallorys and "train-with-a-long-name" not in mallory["text"]
    assert AuditEvent.objects.filter(pk=theirs.pk).exists()
