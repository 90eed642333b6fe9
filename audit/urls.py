from django.urls import path

from audit import views

app_name = "audit"
urlpatterns = [
    path("", views.audit_log, name="log"),
    path("export.csv", views.audit_export, name="export"),
    path("<int:entry_id>/", views.audit_entry, name="entry"),
]
