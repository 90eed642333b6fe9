from django.contrib import admin

from billing.models import LedgerEntry, MachineUsage


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "workspace", "kind", "state", "amount", "description"]
    list_filter = ["kind", "state"]

    def has_change_permission(self, request, obj=None):
        return False  # the ledger is append-only

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MachineUsage)
class MachineUsageAdmin(admin.ModelAdmin):
    list_display = ["node", "cluster", "rate", "started_at", "ended_at", "billed_until", "posted_amount"]
    readonly_fields = [f.name for f in MachineUsage._meta.fields]
