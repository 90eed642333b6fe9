from django.contrib import admin

from api.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "workspace", "created_by", "is_active", "created_at", "last_used_at")
    list_filter = ("is_active",)
    search_fields = ("name", "prefix", "workspace__name", "created_by__username")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
