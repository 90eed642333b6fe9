from django.contrib import admin

from accounts.models import Environment, Membership, SSHKey, Workspace


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


class EnvironmentInline(admin.TabularInline):
    model = Environment
    extra = 0


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "credit_balance", "created_at"]
    readonly_fields = ["credit_balance"]
    inlines = [MembershipInline, EnvironmentInline]


@admin.register(SSHKey)
class SSHKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "workspace", "fingerprint", "created_at"]
