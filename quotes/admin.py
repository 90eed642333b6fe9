from django.contrib import admin

from quotes.models import QuoteRequest


@admin.register(QuoteRequest)
class QuoteRequestAdmin(admin.ModelAdmin):
    list_display = ["created_at", "status", "contact_name", "company", "email", "gpu", "machines", "network", "term_label", "start_date"]
    list_filter = ["status", "network", "term", "gpu"]
    list_editable = ["status"]
    search_fields = ["contact_name", "company", "email", "notes"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at", "updated_at", "source_ip", "user"]
    fieldsets = [
        (None, {"fields": ["status", "sales_notes"]}),
        ("Request", {"fields": ["contact_name", "email", "company", "gpu", "machines", "network", "term", "term_months", "start_date", "notes"]}),
        ("Where from", {"fields": ["user", "source_ip", "created_at", "updated_at"]}),
    ]

    @admin.display(description="Term")
    def term_label(self, obj: QuoteRequest) -> str:
        return obj.term_label
