"""A record of every email: one Notification per event (its dedupe key is unique, so an event
is never recorded twice) and one Delivery per recipient (sent once, retried while SMTP fails)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from notifications.kinds import Kind


class Notification(models.Model):
    kind = models.CharField(max_length=40, choices=Kind.choices, db_index=True)
    dedupe_key = models.CharField(max_length=200, unique=True, help_text="One event, one notification.")
    # JSON-safe ids and values; the templates' context is built from it when the email is sent.
    context = models.JSONField(default=dict, blank=True)
    reply_to = models.JSONField(default=list, blank=True)
    workspace = models.ForeignKey("accounts.Workspace", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.dedupe_key})"


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"
        MUTED = "muted", "Turned off by the user"

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    email = models.EmailField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    subject = models.CharField(max_length=255, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["notification", "email"], name="one_delivery_per_address"),
            models.CheckConstraint(condition=~Q(status="sent") | Q(sent_at__isnull=False), name="sent_delivery_has_sent_at"),
        ]

    def __str__(self) -> str:
        return f"{self.notification.kind} to {self.email} ({self.status})"


class NotificationPreference(models.Model):
    """A user's choice for one optional kind; no row means the kind is on."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences")
    kind = models.CharField(max_length=40, choices=Kind.choices)
    enabled = models.BooleanField(default=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "kind"], name="one_preference_per_kind")]

    def __str__(self) -> str:
        return f"{self.user} {self.kind}: {'on' if self.enabled else 'off'}"
