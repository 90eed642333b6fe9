from django.contrib import admin

from notifications.models import Delivery, Notification, NotificationPreference


class DeliveryInline(admin.TabularInline):
    model = Delivery
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "email", "user", "status", "attempts", "last_error", "last_attempt_at", "next_attempt_at", "subject", "sent_at",
    )


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kind", "dedupe_key", "workspace"]
    list_filter = ["kind"]
    search_fields = ["dedupe_key"]
    readonly_fields = ["kind", "dedupe_key", "context", "reply_to", "workspace", "created_at"]
    inlines = [DeliveryInline]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "email", "notification", "status", "attempts", "sent_at"]
    list_filter = ["status", "notification__kind"]
    search_fields = ["email", "notification__dedupe_key"]
    readonly_fields = ["notification", "user", "email", "attempts", "last_error", "last_attempt_at", "next_attempt_at", "subject", "sent_at", "created_at"]


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", "kind", "enabled"]
    list_filter = ["kind", "enabled"]
