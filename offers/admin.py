from django.contrib import admin

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


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "machine_type", "state", "address", "port", "fault"]
    list_filter = ["state", "machine_type__gpu", "machine_type__location", "fault"]
    search_fields = ["name", "address"]
