from django.urls import path

from webhooks import views

app_name = "webhooks"
urlpatterns = [
    path("", views.endpoint_list, name="list"),
    path("<int:endpoint_id>/", views.endpoint_detail, name="detail"),
    path("<int:endpoint_id>/test/", views.endpoint_test, name="test"),
    path("<int:endpoint_id>/rotate-secret/", views.endpoint_rotate_secret, name="rotate_secret"),
    path("<int:endpoint_id>/delete/", views.endpoint_delete, name="delete"),
    path("<int:endpoint_id>/deliveries/<int:delivery_id>/resend/", views.delivery_resend, name="resend"),
]
