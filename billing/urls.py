from django.urls import path

from billing import views

app_name = "billing"
urlpatterns = [
    path("header/", views.header_money, name="header"),
    path("", views.billing_overview, name="overview"),
    path("usage/<int:cluster_id>/", views.usage_detail, name="usage_detail"),
    path("export.csv", views.export_csv, name="export_csv"),
    path("top-up/", views.top_up, name="top_up"),
    path("top-up/development/", views.dev_top_up, name="dev_top_up"),
    path("auto-recharge/", views.auto_recharge, name="auto_recharge"),
    path("auto-recharge/card/", views.save_card, name="save_card"),
    path("stripe/webhook/", views.stripe_webhook, name="stripe_webhook"),
]
