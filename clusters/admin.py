from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from clusters.models import Cluster, ClusterEvent, Node, Reason, Volume
from clusters.services.terminate import terminate_cluster


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    can_delete = False
    fields = readonly_fields = ("index", "host", "state", "address", "step", "joined_at", "billing_started_at", "billing_ended_at", "released_at")


class EventInline(admin.TabularInline):
    model = ClusterEvent
    extra = 0
    can_delete = False
    fields = readonly_fields = ("created_at", "actor", "event", "message", "reason")


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "workspace", "environment", "status", "machine_count", "machine_type", "software", "created_at"]
    list_filter = ["status", "software", "provider"]
    search_fields = ["name", "workspace__name"]
    readonly_fields = ["status", "status_changed_at", "billing_started_at", "billing_ended_at", "ready_at",
                       "terminated_at", "failure_reason", "termination_reason", "lease_expires_at"]
    inlines = [NodeInline, EventInline]
    actions = ["terminate"]

    @admin.action(description="Terminate selected clusters (operator)")
    def terminate(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        count = sum(
            terminate_cluster(c, actor=f"operator {request.user.get_username()}", reason=Reason.OPERATOR)
            for c in queryset
        )
        self.message_user(request, f"Terminating {count} cluster(s).", messages.SUCCESS)


@admin.register(Volume)
class VolumeAdmin(admin.ModelAdmin):
    list_display = ["name", "workspace", "environment", "size_gb"]
