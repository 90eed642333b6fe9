from django.contrib import admin

from webhooks.models import Attempt, Delivery, Endpoint, Event


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "workspace", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["url"]
    exclude = ["sealed_secret"]


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = readonly_fields = ("at", "status_code", "response_ms", "error", "succeeded")


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "event", "endpoint", "status", "attempts", "last_status_code", "last_response_ms"]
    list_filter = ["status", "event__type"]
    readonly_fields = ["event", "endpoint", "status", "attempts", "next_attempt_at", "last_attempt_at",
                       "last_status_code", "last_response_ms", "last_error", "delivered_at", "manual"]
    inlines = [AttemptInline]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "type", "public_id", "workspace"]
    list_filter = ["type"]
    search_fields = ["public_id", "dedupe_key"]
    readonly_fields = ["public_id", "workspace", "type", "dedupe_key", "data", "created_at"]
