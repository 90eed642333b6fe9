"""Once per event, whatever happens: duplicate triggers, duplicate tasks, an SMTP outage."""

from __future__ import annotations

import pytest
from celery.exceptions import Retry
from django.db import transaction

from clusters.models import Cluster, Status
from clusters.services.create import create_cluster
from clusters.services.progress import _announce_ready
from notifications import services
from notifications.kinds import Kind
from notifications.models import Delivery, Notification
from notifications.tasks import send_notification, send_pending_notifications
from tests.factories import MembershipFactory, UserFactory
from tests.notifications.conftest import run_like_a_worker, smtp_down, subject_of, text_of

pytestmark = pytest.mark.django_db(transaction=True)


def topup(workspace, key="topup:cs_1", **context):
    with transaction.atomic():
        return services.notify(
            Kind.TOPUP_RECEIVED, user_ids=services.billing_contact_ids(workspace.pk),
            context={"workspace_id": workspace.pk, "amount": "50", "balance": "1050.00", **context},
            dedupe_key=key, workspace_id=workspace.pk,
        )


def test_a_duplicate_trigger_records_and_sends_nothing_more(smtp, workspace, owner):
    first = topup(workspace)
    second = topup(workspace)
    assert first is not None and second is None
    assert Notification.objects.count() == 1
    [message] = smtp.messages
    assert subject_of(message) == "We received your top-up of $50.00"
    assert "The balance is now $1,050.00" in text_of(message)


def test_a_duplicate_task_sends_nothing_more(smtp, workspace, owner):
    topup(workspace)
    delivery = Delivery.objects.get()
    # A second task for the same delivery, run as a worker would run it.
    assert send_notification.apply(args=(delivery.pk,)).result == "skipped"
    assert run_like_a_worker(delivery.pk) == "skipped"
    assert len(smtp.messages) == 1
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.SENT and delivery.attempts == 1


def test_a_cluster_event_triggered_twice_is_emailed_once(smtp, environment, machine_type, owner):
    cluster = create_cluster(
        environment=environment, name="c", machine_type=machine_type, machine_count=2, created_by=owner
    )
    cluster.refresh_from_db()
    # A second worker replaying the announcement (the lifecycle step re-run after a crash).
    with transaction.atomic():
        _announce_ready(cluster)
    assert [subject_of(m) for m in smtp.messages] == ["Your cluster c is ready"]
    assert Notification.objects.filter(dedupe_key=f"cluster:{cluster.pk}:ready").count() == 1


def test_a_rolled_back_change_sends_nothing(smtp, workspace, owner):
    with pytest.raises(RuntimeError), transaction.atomic():
        topup(workspace)
        raise RuntimeError("the change failed")
    assert not Notification.objects.exists()
    assert smtp.messages == []


def test_nothing_is_sent_before_commit(smtp, workspace, owner, broker):
    with transaction.atomic():
        topup(workspace)
        assert broker.queued == []
    assert len(broker.queued) == 1
    broker.run_all()
    assert len(smtp.messages) == 1


def test_an_smtp_outage_schedules_a_retry_and_recovery_sends_exactly_once(smtp, environment, machine_type, owner, broker):
    with smtp_down(smtp):
        cluster = create_cluster(
            environment=environment, name="outage", machine_type=machine_type, machine_count=2, created_by=owner
        )
        assert Cluster.objects.get(pk=cluster.pk).status == Status.READY  # the outage never blocks the lifecycle
        assert len(broker.queued) == 1
        with pytest.raises(Retry):
            broker.run_next()
        delivery = Delivery.objects.get()
        assert delivery.status == Delivery.Status.PENDING and delivery.attempts == 1
        assert "Connection refused" in delivery.last_error or "ConnectionRefused" in delivery.last_error
        [retry] = broker.queued
        assert retry["args"] == (delivery.pk,) and retry["countdown"] == 30 and retry["retries"] == 1
        # Still down at the first retry: the next one waits twice as long.
        with pytest.raises(Retry):
            broker.run_next()
        assert broker.queued[0]["countdown"] == 60
        assert smtp.messages == []
    # SMTP is back: the scheduled retry sends it, and only it.
    assert broker.run_next() == "sent"
    assert [subject_of(m) for m in smtp.messages] == ["Your cluster outage is ready"]
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.SENT and delivery.attempts == 3
    # A late duplicate of the retry (a broker redelivery) and the sweep change nothing.
    assert run_like_a_worker(delivery.pk, retries=2) == "skipped"
    assert send_pending_notifications() == 0
    assert len(smtp.messages) == 1


def test_it_gives_up_after_the_last_attempt(smtp, workspace, owner, broker, settings):
    settings.NOTIFICATION_MAX_ATTEMPTS = 2
    with smtp_down(smtp):
        topup(workspace)
        with pytest.raises(Retry):
            broker.run_next()
        assert broker.run_next() == "failed"
        assert broker.queued == []
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.FAILED and delivery.attempts == 2


def test_the_sweep_requeues_a_delivery_whose_task_was_lost(smtp, workspace, owner, broker, settings):
    settings.NOTIFICATION_REQUEUE_AFTER_SECONDS = 0
    topup(workspace)
    broker.queued.clear()  # the broker lost it
    assert send_pending_notifications() == 1
    broker.run_all()
    assert len(smtp.messages) == 1
    assert send_pending_notifications() == 0


def test_a_user_who_turned_a_kind_off_does_not_get_it_but_others_do(smtp, workspace, owner):
    manager = MembershipFactory(workspace=workspace, role="manager", user=UserFactory(username="mia")).user
    services.set_preferences(owner, enabled=[])
    topup(workspace)
    assert [m["To"] for m in smtp.messages] == [manager.email]
    assert Delivery.objects.get(user=owner).status == Delivery.Status.MUTED


def test_critical_kinds_ignore_the_preference(smtp, workspace, owner):
    services.set_preferences(owner, enabled=[])
    with transaction.atomic():
        services.notify(
            Kind.AUTO_RECHARGE_FAILED, user_ids=[owner.pk],
            context={"workspace_id": workspace.pk, "amount": "100", "threshold": "20", "error": "Your card was declined."},
            dedupe_key="recharge:1",
        )
    [message] = smtp.messages
    assert subject_of(message) == "Auto-recharge of $100.00 failed"
    assert "Your card was declined." in text_of(message) and "cannot be turned off" in text_of(message)


def test_the_balance_warning_takes_billings_values(smtp, workspace, owner):
    with transaction.atomic():
        services.notify(
            Kind.BALANCE_LOW, user_ids=[owner.pk], dedupe_key="low:1",
            context={"workspace_id": workspace.pk, "balance": "12.5", "rate": "10.00", "hours_left": "1.25", "threshold_hours": 2},
        )
    [message] = smtp.messages
    assert subject_of(message) == "Your Runcrate balance is low: $12.50"
    text = text_of(message)
    assert "has $12.50 left" in text and "about 1.25 hours" in text and "https://clusters.example.test/billing/" in text


def test_an_unknown_kind_is_a_programming_error(db):
    with pytest.raises(ValueError):
        services.notify("nope", recipients=["a@example.com"], dedupe_key="x")


def test_a_billing_notice_is_sent_through_notify_once_per_key(smtp, workspace, owner):
    from billing import emails
    from billing.models import BillingNotice

    notice = emails.create_notice(
        workspace_id=workspace.pk, kind=BillingNotice.Kind.TOP_UP_RECEIVED, key="top_up:cs_9", context={"amount": "1,025.00"}
    )
    assert notice is not None
    [message] = smtp.messages
    assert subject_of(message) == "We received your top-up of $1,025.00"
    assert Notification.objects.get(dedupe_key=f"billing-notice:{notice.pk}").kind == Kind.TOPUP_RECEIVED
    again = emails.create_notice(
        workspace_id=workspace.pk, kind=BillingNotice.Kind.TOP_UP_RECEIVED, key="top_up:cs_9", context={"amount": "1,025.00"}
    )
    assert again is None
    assert len(smtp.messages) == 1 and Notification.objects.count() == 1


def test_every_billing_notice_kind_has_an_email_kind():
    from billing import emails
    from billing.models import BillingNotice

    assert {kind.value for kind in BillingNotice.Kind} == set(emails.NOTICE_KINDS)


def test_a_message_that_cannot_be_rendered_fails_at_once(smtp, broker):
    with transaction.atomic():
        services.notify(Kind.QUOTE_CONFIRMATION, recipients=["a@example.com"], context={"quote_id": 404}, dedupe_key="q")
    assert broker.run_next() == "failed"
    assert broker.queued == [] and smtp.messages == []
    assert "DoesNotExist" in Delivery.objects.get().last_error


def test_a_permanent_refusal_is_not_retried(smtp, broker):
    with transaction.atomic():
        services.notify(
            Kind.TOPUP_RECEIVED, recipients=["bounce@example.com"], dedupe_key="topup:bounce",
            context={"amount": "50"},
        )
    assert broker.run_next() == "failed"
    assert broker.queued == []
    delivery = Delivery.objects.get(notification__dedupe_key="topup:bounce")
    assert delivery.status == Delivery.Status.FAILED and delivery.attempts == 1 and "550" in delivery.last_error
    assert smtp.messages == []


def test_the_admin_lists_notifications_and_deliveries(admin_client, smtp, workspace, owner):
    topup(workspace)
    for url in ("/admin/notifications/notification/", "/admin/notifications/delivery/",
                f"/admin/notifications/notification/{Notification.objects.get().pk}/change/"):
        response = admin_client.get(url)
        assert response.status_code == 200 and b"topup:cs_1" in response.content
