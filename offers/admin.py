from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from offers.inventory import return_hosts_to_sale
from offers.models import GPUModel, Host, Location, MachineType


@admin.register(GPUModel)
class GPUModelAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "memory_gb"]


@admin.register(Location)
class LocationAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "country", "gateway_host"]


class HostInline(admin.TabularInline):
    model = Host
    extra = 0
    fields = ["name", "state", "address", "port", "ssh_user", "boot_seconds", "join_seconds", "install_seconds", "fault"]


@admin.register(MachineType)
class MachineTypeAdmin(admin.ModelAdmin):
    list_display = ["__str__", "gpu", "location", "kind", "gpus_per_machine", "interconnect", "price_per_machine_hour",
                    "community", "provider", "active"]
    list_filter = ["gpu", "location", "kind", "community", "provider", "active"]
    inlines = [HostInline]


class QuarantinedFilter(admin.SimpleListFilter):
    """Quarantined hosts, held by a cluster or not: what an operator must look at."""

    title = "quarantine"
    parameter_name = "quarantined"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Quarantined"), ("no", "Not quarantined")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Host]) -> QuerySet[Host]:
        if self.value() == "yes":
            return queryset.filter(quarantined_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(quarantined_at__isnull=True)
        return queryset


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "machine_type", "state", "sale", "address", "port", "fault"]
    list_filter = [QuarantinedFilter, "state", "machine_type__gpu", "machine_type__location", "fault"]
    search_fields = ["name", "address"]
    readonly_fields = ["quarantined_at", "quarantine_reason"]
    actions = ["return_to_sale"]

    @admin.display(description="Sale", ordering="quarantined_at")
    def sale(self, host: Host) -> str:
        if host.quarantined_at is None:
            return "On sale" if host.state == Host.State.FREE else "—"
        return format_html(
            '<strong class="quarantine-badge" style="color:#b42318;" title="{}">Quarantined {}</strong>',
            host.quarantine_reason, host.quarantined_at.strftime("%Y-%m-%d %H:%M UTC"),
        )

    @admin.action(description="Return to sale (the host was checked and is fine)")
    def return_to_sale(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        cleared = return_hosts_to_sale(list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{cleared} host{'' if cleared == 1 else 's'} returned to sale.", messages.SUCCESS)
