"""What each cluster email says, checked as it arrives at a real SMTP server."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import MachineUsage
from clusters import lifecycle
from clusters.models import Cluster, Node, Reason, Status
from clusters.services.create import create_cluster
from clusters.services.progress import retry_install
from clusters.services.terminate import terminate_cluster
from notifications.models import Delivery, Notification
from offers import lab
from offers.models import Host, HostFault
from tests.notifications.conftest import html_of, subject_of, text_of

pytestmark = pytest.mark.django_db(transaction=True)


def create(environment, machine_type, owner, count=2, software="none", name="train") -> Cluster:
    cluster = create_cluster(
        environment=environment, name=name, machine_type=machine_type, machine_count=count, software=software,
        created_by=owner,
    )
    cluster.refresh_from_db()
    return cluster


def test_the_ready_email_lists_every_node_and_links_to_the_cluster(smtp, environment, machine_type, owner):
    cluster = create(environment, machine_type, owner, count=3)
    assert cluster.status == Status.READY
    [message] = smtp.messages
    assert message["To"] == "alice@example.com"
    assert subject_of(message) == "Your cluster train is ready"
    text, html = text_of(message), html_of(message)
    for body in (text, html):
        assert "node-0" in body and "node-2" in body and "10.77.0.3" in body
        assert f"https://clusters.example.test/clusters/{cluster.pk}/" in body
        assert "$7.50/hour" in body  # 3 machines × $2.50
        assert "https://clusters.example.test/account/notifications/" in body  # it can be turned off
    assert "<table" in html and "<table" not in text


def test_the_failed_email_gives_each_nodes_outcome_and_says_nothing_was_charged(smtp, environment, machine_type, owner):
    hosts = list(machine_type.hosts.order_by("id"))
    lab.inject(Host.objects.filter(pk=hosts[1].pk), fault=HostFault.BOOT_FAILS)
    cluster = create(environment, machine_type, owner, count=3)
    assert cluster.status == Status.FAILED
    [message] = smtp.messages
    assert subject_of(message) == "Your cluster train failed to start — nothing was charged"
    text = text_of(message)
    assert "$0.00 charged" in text and "$0.00 charged" in html_of(message)
    assert "A machine failed to start" in text
    failed = cluster.nodes.get(state=Node.State.FAILED)
    assert f"{failed.name}  Failed" in text
    assert text.count("Released") == 2
    assert "cannot be turned off" in text


def test_the_degraded_email_names_the_failed_nodes_and_links_to_retry(smtp, environment, machine_type, owner):
    hosts = list(machine_type.hosts.order_by("id"))
    lab.inject(Host.objects.filter(pk=hosts[0].pk), fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, owner, count=2, software="slurm")
    assert cluster.status == Status.DEGRADED
    [message] = smtp.messages
    assert subject_of(message) == "Your cluster train is degraded: Slurm failed to install"
    text = text_of(message)
    assert "node-0:" in text and "node-1:" not in text
    assert f"Retry the install: https://clusters.example.test/clusters/{cluster.pk}/#actions" in text
    assert "stay up and billed" in text


def test_a_retry_that_fails_again_is_the_same_degradation_and_no_new_email(smtp, environment, machine_type, owner):
    lab.inject(Host.objects.filter(pk=machine_type.hosts.order_by("id")[0].pk), fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, owner, count=2, software="ray")
    retry_install(cluster)
    cluster.refresh_from_db()
    assert cluster.status == Status.DEGRADED
    assert len(smtp.messages) == 1


def test_the_terminated_email_gives_the_duration_and_total_cost(smtp, environment, machine_type, owner):
    cluster = create(environment, machine_type, owner, count=2)
    # Two machines at $2.50/h for 1 h 30 min: $7.50.
    started = timezone.now() - dt.timedelta(hours=1, minutes=30)
    Cluster.objects.filter(pk=cluster.pk).update(billing_started_at=started)
    MachineUsage.objects.filter(cluster=cluster).update(started_at=started, billed_until=started)
    cluster.refresh_from_db()
    terminate_cluster(cluster, actor="alice")
    lifecycle.advance(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED
    _ready, terminated = smtp.messages
    assert subject_of(terminated) == "Your cluster train was terminated"
    text = text_of(terminated)
    assert "Total cost: $7.50" in text
    assert "Ran for:    1 h 30 min" in text
    assert "Terminated by alice. Every machine stopped" in text
    assert "$7.50" in html_of(terminated)
    # The email's total is what billing posted.
    posted = sum(u.posted_amount for u in MachineUsage.objects.filter(cluster=cluster))
    assert posted == Decimal("7.50")


@pytest.mark.parametrize(
    ("reason", "subject", "says"),
    [
        (Reason.BALANCE_EXHAUSTED, "Your cluster train was stopped: your balance ran out", "ran out"),
        (Reason.BUDGET_REACHED, "Your cluster train was stopped: the monthly budget was reached", "monthly budget of $5,000.00"),
    ],
)
def test_a_cluster_stopped_by_billing_gets_the_critical_stopped_email(smtp, environment, machine_type, owner, reason, subject, says):
    cluster = create(environment, machine_type, owner, count=2)
    terminate_cluster(cluster, reason=reason)
    lifecycle.advance(cluster.pk)
    assert len(smtp.messages) == 2
    stopped = smtp.messages[1]
    assert subject_of(stopped) == subject
    text = text_of(stopped)
    assert says in text and "Total cost: $" in text and "cannot be turned off" in text
    assert Notification.objects.get(dedupe_key=f"cluster:{cluster.pk}:terminated").kind == "cluster_stopped"


@pytest.mark.parametrize(
    ("actor", "says"),
    [("api key rc_live_c4OAT1if", "Terminated with the API key rc_live_c4OAT1if. Every machine stopped"),
     ("system", "Terminated by a user. Every machine stopped")],
)
def test_the_terminated_email_names_who_asked_for_it(smtp, environment, machine_type, owner, actor, says):
    cluster = create(environment, machine_type, owner, count=2)
    terminate_cluster(cluster, actor=actor)
    lifecycle.advance(cluster.pk)
    assert says in text_of(smtp.messages[-1])


def test_without_a_creator_the_workspace_owners_get_it(smtp, environment, machine_type, owner, developer):
    create_cluster(environment=environment, name="x", machine_type=machine_type, machine_count=2)
    assert [m["To"] for m in smtp.messages] == ["alice@example.com"]


def test_a_terminated_cluster_that_never_started_cost_nothing(smtp, environment, machine_type, owner):
    lab.inject(Host.objects, boot_seconds=600)
    cluster = create(environment, machine_type, owner, count=2)
    assert cluster.status == Status.PROVISIONING
    terminate_cluster(cluster)
    lifecycle.advance(cluster.pk)
    [message] = smtp.messages
    text = text_of(message)
    assert "Total cost: $0.00" in text and "never started" in text
    # No "Cluster usage" line exists for it: the email names none.
    assert "Cluster usage" not in text and "Cluster usage" not in html_of(message)
    assert "Nothing was charged: no line for it appears on your billing page." in text
    assert Delivery.objects.get().status == Delivery.Status.SENT


def test_the_quote_confirmation_does_not_call_itself_a_notice_about_an_account():
    from types import SimpleNamespace

    from django.template.loader import render_to_string

    quote = SimpleNamespace(contact_name="Ada", email="ada@example.org", pk=1)
    for name in ("emails/quote_confirmation.txt", "emails/quote_confirmation.html"):
        text = render_to_string(name, {"quote": quote, "critical": True})
        assert "about your account" not in text and "because this address asked for a quote" in text


def test_failure_emails_carry_no_server_paths_or_bare_exit_codes(smtp, environment, machine_type, owner, settings, monkeypatch):
    from clusters.providers import simulated
    from clusters.providers.base import BootReport, BootState

    detail = f"sshd exited; see {settings.VAR_DIR}/local-machines/h1/ssh.log (exit status 255)"
    monkeypatch.setattr(simulated.SimulatedProvider, "boot_status", lambda self, node: BootReport(BootState.FAILED, detail=detail))
    cluster = create(environment, machine_type, owner, count=2)
    assert cluster.status == Status.FAILED
    [message] = smtp.messages
    for body in (text_of(message), html_of(message)):
        assert str(settings.VAR_DIR) not in body and "exit status" not in body
        # The provider's own words stay behind the node's Log toggle; the email says it plainly.
        assert "sshd exited" not in body and "A machine failed to start" in body
