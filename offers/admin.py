from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from offers.fleet import Refused, drain_host, return_host_to_sale
from offers.inventory import return_hosts_to_sale
from offers.models import GPUModel, Host, InjectedFault, Location, MachineType, PhysicalHost


@admin.register(GPUModel)
class GPUModelAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "memory_gb"]


@admin.register(Location)
class LocationAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "country", "gateway_host"]


class HostInline(admin.TabularInline):
    model = Host
    extra = 0
    fields = ["name", "state", "address", "port", "ssh_user"]


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
    list_display = ["name", "machine_type", "physical_host", "state", "sale", "address", "port"]
    list_filter = [QuarantinedFilter, "state", "machine_type__gpu", "machine_type__location"]
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


class SlotInline(admin.TabularInline):
    model = Host
    fk_name = "physical_host"
    verbose_name = "machine slot"
    extra = 0
    fields = ["name", "machine_type", "state", "quarantined_at"]
    readonly_fields = ["name", "machine_type", "state", "quarantined_at"]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(PhysicalHost)
class PhysicalHostAdmin(admin.ModelAdmin):
    """Servers of the fleet. They are added only through `manage.py hosts add`, which grades
    them first: a host added here would sell machines nothing checked."""

    list_display = ["name", "address", "port", "state", "verdict", "graded_at", "down_since"]
    list_filter = ["state"]
    search_fields = ["name", "address"]
    fields = ["name", "address", "port", "ssh_user", "ssh_key_path", "state", "down_since", "grade_table", "graded_at",
              "graded_because", "regrade", "runtime_version", "gpus", "host_key"]
    readonly_fields = ["name", "address", "port", "ssh_user", "ssh_key_path", "down_since", "grade_table", "graded_at",
                       "graded_because", "regrade", "runtime_version", "gpus", "host_key"]
    inlines = [SlotInline]
    actions = ["drain", "return_to_sale"]

    @admin.display(description="Graded again")
    def regrade(self, host: PhysicalHost) -> str:
        return ("daily, and at once when its runtime or GPU driver changes; a host whose grade fails goes to "
                "draining and the operators are emailed")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="Grade")
    def verdict(self, host: PhysicalHost) -> str:
        failing = [c["check"] for c in host.grade if c.get("verdict") != "pass"]
        if not host.grade:
            return "—"
        return "Pass" if not failing else f"Fail: {', '.join(failing)}"

    @admin.display(description="Grade")
    def grade_table(self, host: PhysicalHost) -> SafeString:
        rows = format_html_join(
            "", '<tr class="grade-{}"><th>{}</th><td>{}</td><td>{}</td></tr>',
            ((c["verdict"], c["check"], c["verdict"], c["detail"]) for c in host.grade),
        )
        return format_html('<table class="host-grade"><thead><tr><th>Check</th><th>Verdict</th><th>Detail</th></tr>'
                           "</thead><tbody>{}</tbody></table>", rows)

    @admin.action(description="Drain (no new machine lands; running ones keep running)")
    def drain(self, request: HttpRequest, queryset: QuerySet[PhysicalHost]) -> None:
        for host in queryset:
            drain_host(host.name)
        self.message_user(request, f"{queryset.count()} host(s) draining.", messages.SUCCESS)

    @admin.action(description="Return to sale (a draining host whose last grade passes)")
    def return_to_sale(self, request: HttpRequest, queryset: QuerySet[PhysicalHost]) -> None:
        for host in queryset:
            try:
                return_host_to_sale(host.name)
            except Refused as refused:
                self.message_user(request, str(refused), messages.ERROR)
            else:
                self.message_user(request, f"{host.name} is on sale.", messages.SUCCESS)


@admin.register(InjectedFault)
class InjectedFaultAdmin(admin.ModelAdmin):
    """Lab only: delays and faults of simulated and local machines, for demos and tests."""

    list_display = ["host", "fault", "boot_seconds", "join_seconds", "install_seconds"]
    list_filter = ["fault"]
    search_fields = ["host__name"]
    autocomplete_fields = ["host"]
