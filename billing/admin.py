from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from billing import services
from billing.models import LedgerEntry, MachineUsage
from config.money import format_money


class AdjustmentForm(forms.ModelForm):
    """What an operator enters for a balance adjustment; the rest comes from billing's service."""

    class Meta:
        model = LedgerEntry
        fields = ["workspace", "amount", "description"]
        labels = {"amount": "Amount ($, negative to debit)", "description": "Reason"}

    def clean_amount(self) -> Decimal:
        amount = self.cleaned_data["amount"]
        if amount == 0:
            raise forms.ValidationError("An adjustment moves the balance: enter an amount other than 0.")
        return amount


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "workspace", "kind", "state", "amount", "balance_after", "description"]
    list_filter = ["kind", "state"]
    search_fields = ["description", "workspace__name"]

    def get_form(
        self, request: HttpRequest, obj: LedgerEntry | None = None, change: bool = False, **kwargs: Any,
    ) -> type[forms.ModelForm[LedgerEntry]]:
        if obj is None:
            kwargs["form"] = AdjustmentForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: LedgerEntry | None = None) -> Any:
        return ["workspace", "amount", "description"] if obj is None else super().get_fields(request, obj)

    def save_model(self, request: HttpRequest, obj: LedgerEntry, form: Any, change: bool) -> None:
        # Never a bare save: the entry and the cached balance move together, under the
        # workspace lock, in billing's service. Django's admin log records who added it.
        entry = services.adjust_balance(
            workspace_id=obj.workspace_id, amount=obj.amount, reason=obj.description, actor=request.user.get_username(),
        )
        obj.pk = entry.pk
        obj.__dict__.update({k: v for k, v in entry.__dict__.items() if not k.startswith("_")})
        messages.info(request, f"{obj.workspace} balance is now {format_money(entry.balance_after or 0)}.")

    def has_change_permission(self, request: HttpRequest, obj: LedgerEntry | None = None) -> bool:
        return False  # the ledger is append-only

    def has_delete_permission(self, request: HttpRequest, obj: LedgerEntry | None = None) -> bool:
        return False


@admin.register(MachineUsage)
class MachineUsageAdmin(admin.ModelAdmin):
    list_display = ["node", "cluster", "rate", "started_at", "ended_at", "billed_until", "posted_amount"]
    readonly_fields = [f.name for f in MachineUsage._meta.fields]
