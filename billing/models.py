"""Money: an append-only ledger, per-machine usage intervals with a billing watermark,
Stripe top-ups and events, auto-recharge settings, and claim rows for billing emails."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
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
    # The calendar month (UTC, first day) the usage accrued in. Metering splits a run that
    # crosses a month boundary, so a month's usage lines and budgets never borrow a minute
    # from the next month.
    period = models.DateField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        indexes = [
            models.Index(fields=["workspace", "created_at"]),
            models.Index(fields=["environment", "period", "kind"]),
            # The Billing page's month picker reads a workspace's first period and probes each month after it.
            models.Index(fields=["workspace", "period"]),
            # The Billing page's money movements of a month, without walking its usage entries.
            models.Index(fields=["workspace", "created_at"], condition=~Q(kind="usage"), name="ledger_credits_by_date"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.amount} ({self.description})"


class MachineUsage(models.Model):
    """One machine's billable interval. `billed_until` is the metering watermark and
    `posted_amount` what the ledger already holds for it, so each run posts only the
    difference between the rounded running total and what was posted.
    Invariant: posted_amount == round(rate × (billed_until − started_at) / 3600, 2)."""

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
        indexes = [
            models.Index(fields=["ended_at"]),
            models.Index(fields=["environment", "started_at"]),
            models.Index(fields=["workspace", "started_at"]),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(billed_until__gte=F("started_at")), name="watermark_after_start"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")), name="usage_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"usage of node {self.node_id}"


class UsageMonth(models.Model):
    """A cluster had billable time in a calendar month: the set of that month's "Cluster usage"
    lines, so a month's lines are counted and paged without reading any machine.

    Written with the usage it stands for: start_usage adds the month a machine starts in, and
    metering adds every month it moves a watermark into. A cluster therefore has a row for a
    month exactly when one of its machines started in it or was metered past its first instant,
    which is the test the machine rows use (billing.queries._usage_in_month)."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="usage_months")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="+")
    period = models.DateField(help_text="First day of the month (UTC).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "period"], name="one_usage_month_per_cluster")]
        # A month's lines in cluster order, of a workspace (the Billing page) or of one of its
        # environments (the API): a page is a range of one of these, the count reads it alone.
        indexes = [models.Index(fields=["workspace", "period", "cluster"]), models.Index(fields=["environment", "period", "cluster"])]

    def __str__(self) -> str:
        return f"usage of cluster {self.cluster_id} in {self.period:%Y-%m}"


class TopUp(models.Model):
    """A Stripe Checkout Session we created: a payment (credit) or a setup (save a card)."""

    class Mode(models.TextChoices):
        PAYMENT = "payment", "Top-up"
        SETUP = "setup", "Save card"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        PAID = "paid", "Paid"
        COMPLETE = "complete", "Complete"
        EXPIRED = "expired", "Expired"
        FAILED = "failed", "Failed"

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="top_ups")
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.PAYMENT)
    checkout_session_id = models.CharField(max_length=255, unique=True)
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0.00"))
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    url = models.URLField(max_length=1000, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_mode_display()} {self.checkout_session_id}"


class StripeEvent(models.Model):
    """Every webhook event id we accepted, so a redelivery is recognised."""

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=255, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class AutoRecharge(models.Model):
    """Top the balance up off-session when it falls under `threshold`, once per crossing:
    `armed` is cleared (compare-and-set) when a charge is attempted and set again only when
    the balance is back at or above the threshold."""

    workspace = models.OneToOneField(Workspace, on_delete=models.CASCADE, related_name="auto_recharge")
    enabled = models.BooleanField(default=False)
    threshold = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("50.00"))
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("100.00"))
    armed = models.BooleanField(default=True)
    stripe_customer_id = models.CharField(max_length=255, blank=True)
    stripe_payment_method_id = models.CharField(max_length=255, blank=True)
    card_label = models.CharField(max_length=100, blank=True, help_text="e.g. 'visa •••• 4242'")
    last_failure = models.CharField(max_length=255, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"auto-recharge of {self.workspace}"

    @property
    def has_card(self) -> bool:
        return bool(self.stripe_customer_id and self.stripe_payment_method_id)


class AutoRechargeAttempt(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="auto_recharge_attempts")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    payment_intent_id = models.CharField(max_length=255, blank=True)
    error = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Auto-recharge of ${self.amount} ({self.status})"


class BillingNotice(models.Model):
    """A billing email we decided to send, claimed by a unique key so it goes out once.
    Balance warnings use `workspace:threshold` keys with `cleared_at`: one open warning per
    threshold, re-armed (cleared) when the balance recovers."""

    class Kind(models.TextChoices):
        BALANCE_LOW = "balance_low", "Balance running low"
        TOP_UP_RECEIVED = "top_up_received", "Top-up received"
        AUTO_RECHARGE_FAILED = "auto_recharge_failed", "Auto-recharge failed"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="billing_notices")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    key = models.CharField(max_length=200)
    context = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=Q(cleared_at__isnull=True), name="one_open_notice_per_key"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"
