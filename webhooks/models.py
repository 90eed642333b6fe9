"""Signed lifecycle webhooks: a workspace's endpoints, the events they get, and a delivery
(with every attempt) per endpoint and event. See docs/webhooks.md."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q

from config.sealing import unseal


class EventType(models.TextChoices):
    CLUSTER_CREATED = "cluster.created", "Cluster created"
    CLUSTER_READY = "cluster.ready", "Cluster ready"
    CLUSTER_FAILED = "cluster.failed", "Cluster failed to start"
    CLUSTER_DEGRADED = "cluster.degraded", "Cluster degraded (software failed to install)"
    CLUSTER_TERMINATED = "cluster.terminated", "Cluster terminated (with the reason)"
    CLUSTER_IDLE = "cluster.idle", "Cluster idle while billed"
    NODE_UNHEALTHY = "node.unhealthy", "Node unhealthy"
    NODE_RECOVERED = "node.recovered", "Node recovered"
    NETWORK_TEST_FINISHED = "network_test.finished", "Network test finished"
    BALANCE_LOW = "balance.low", "Balance low"
    BUDGET_REACHED = "budget.reached", "Monthly budget reached"
    # Sent only by "Send test event", to the one endpoint asked; nobody subscribes to it.
    WEBHOOK_TEST = "webhook.test", "Test event"


SUBSCRIBABLE = [t for t in EventType if t != EventType.WEBHOOK_TEST]


LOOPBACK_NOTE = ("Deliveries to this computer's own loopback addresses (allowed in development only) show only "
                 "the class of the answer (2xx, 3xx, 4xx, 5xx or no answer), so the log cannot map which local "
                 "ports answer.")


def answer_class(status_code: int | None) -> str:
    return f"{status_code // 100}xx" if status_code else "no answer"


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def new_event_id() -> str:
    return "evt_" + secrets.token_hex(12)


class Endpoint(models.Model):
    workspace = models.ForeignKey("accounts.Workspace", on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    events = models.JSONField(default=list, help_text="The event types this endpoint gets.")
    # Sealed like node secrets (config.sealing): the signing key is needed in the clear to
    # sign, so it is encrypted at rest rather than hashed.
    sealed_secret = models.JSONField(default=dict, editable=False)
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.url

    @property
    def secret(self) -> str:
        return str(unseal(self.sealed_secret).get("secret", ""))

    def wants(self, event_type: str) -> bool:
        return self.is_active and event_type in self.events


class Event(models.Model):
    """One thing that happened, recorded once (dedupe_key) with the payload every endpoint gets."""

    public_id = models.CharField(max_length=40, unique=True, default=new_event_id)
    workspace = models.ForeignKey("accounts.Workspace", on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=40, choices=EventType.choices)
    dedupe_key = models.CharField(max_length=200, unique=True)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.type} {self.public_id}"


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Delivered"
        FAILED = "failed", "Gave up"

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    # When the next attempt is due; while a task is queued it is pushed out by a lease, so
    # the sweep does not queue the same attempt again.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_response_ms = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The last attempt went to a loopback address: only its answer's class is shown.
    last_to_loopback = models.BooleanField(default=False)
    # A re-send from the page, API or CLI: a new delivery of the same event (same event id).
    manual = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"]),
            models.Index(fields=["endpoint", "created_at"]),
        ]
        constraints = [
            models.CheckConstraint(condition=~Q(status="succeeded") | Q(delivered_at__isnull=False),
                                   name="webhook_succeeded_has_delivered_at"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint_id} ({self.status})"

    @property
    def shown_answer(self) -> str:
        """What the tenant sees of the last answer (the page, the API, the CLI)."""
        if self.last_to_loopback:
            return answer_class(self.last_status_code)
        return f"HTTP {self.last_status_code}" if self.last_status_code else self.last_error

    @property
    def shown_response_ms(self) -> int | None:
        return None if self.last_to_loopback else self.last_response_ms


class Attempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    succeeded = models.BooleanField(default=False)
    # Sent to a loopback address (development only): only the answer's class is shown, so the
    # log cannot tell which of this computer's ports listen, or what answers on them.
    to_loopback = models.BooleanField(default=False)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.delivery_id} at {self.at}: {self.status_code or self.error}"

    @property
    def shown_answer(self) -> str:
        if self.to_loopback:
            return answer_class(self.status_code)
        return f"HTTP {self.status_code}" if self.status_code else self.error

    @property
    def shown_response_ms(self) -> int | None:
        return None if self.to_loopback else self.response_ms
