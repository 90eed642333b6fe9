"""Requests for a quote: reserved capacity, clusters beyond 64 machines, InfiniBand or RoCE."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Network(models.TextChoices):
    ETHERNET = "ethernet", "Ethernet"
    INFINIBAND = "infiniband", "InfiniBand"
    ROCE = "roce", "RoCE"


class Term(models.TextChoices):
    ON_DEMAND = "on_demand", "On demand"
    RESERVED = "reserved", "Reserved"


class QuoteStatus(models.TextChoices):
    NEW = "new", "New"
    CONTACTED = "contacted", "Contacted"
    WON = "won", "Won"
    LOST = "lost", "Lost"


MAX_MACHINES = 100_000
MAX_TERM_MONTHS = 60


class QuoteRequest(models.Model):
    contact_name = models.CharField(max_length=120)
    email = models.EmailField()
    company = models.CharField(max_length=160, blank=True)
    gpu = models.CharField("GPU model", max_length=80)
    machines = models.PositiveIntegerField()
    network = models.CharField(max_length=20, choices=Network.choices, default=Network.ETHERNET)
    term = models.CharField(max_length=20, choices=Term.choices, default=Term.ON_DEMAND)
    term_months = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Months, for a reserved term.")
    start_date = models.DateField(null=True, blank=True, help_text="Wanted start; blank means as soon as possible.")
    notes = models.TextField(blank=True)

    status = models.CharField(max_length=20, choices=QuoteStatus.choices, default=QuoteStatus.NEW, db_index=True)
    sales_notes = models.TextField(blank=True, help_text="Internal: what sales did with it.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(machines__gte=1), name="quote_at_least_one_machine"),
            # A reserved term always says for how long; on demand never does.
            models.CheckConstraint(
                condition=(Q(term="reserved") & Q(term_months__gte=1)) | (Q(term="on_demand") & Q(term_months__isnull=True)),
                name="quote_term_months_match_term",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.machines} × {self.gpu} for {self.company or self.contact_name}"

    @property
    def term_label(self) -> str:
        if self.term == Term.RESERVED:
            return f"Reserved for {self.term_months} month{'s' if self.term_months != 1 else ''}"
        return self.get_term_display()
