"""Money: an append-only ledger and per-machine usage intervals with a billing watermark."""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import F, Q

from accounts.models import Environment, Workspace


class LedgerEntry(models.Model):
    class Kind(models.TextChoices):
        DEPOSIT = "deposit", "Deposit"
        USAGE = "usage", "Usage"
        AUTO_RECHARGE = "auto_recharge", "Auto-Recharge"
        ADJUSTMENT = "adjustment", "Adjustment"

    class State(models.TextChoices):
        COMPLETED = "completed", "Completed"
        PENDING = "pending", "Pending"
        FAILED = "failed", "Failed"

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="ledger_entries")
    environment = models.ForeignKey(Environment, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    state = models.CharField(max_length=20, choices=State.choices, default=State.COMPLETED)
    # Signed: credits positive, usage negative. Only completed entries move the balance.
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    balance_after = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, unique=True)
    description = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["workspace", "created_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.amount} ({self.description})"


class MachineUsage(models.Model):
    """One machine's billable interval. `billed_until` is the metering watermark and
    `posted_amount` what the ledger already holds for it, so each run posts only the
    difference between the rounded running total and what was posted."""

    node = models.OneToOneField("clusters.Node", on_delete=models.PROTECT, related_name="usage")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.PROTECT, related_name="usages")
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="+")
    rate = models.DecimalField(max_digits=10, decimal_places=4, help_text="Price per machine-hour.")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    billed_until = models.DateTimeField()
    posted_amount = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal("0.00"))

    class Meta:
        indexes = [models.Index(fields=["ended_at"]), models.Index(fields=["environment", "started_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(billed_until__gte=F("started_at")), name="watermark_after_start"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")), name="usage_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"usage of node {self.node_id}"
