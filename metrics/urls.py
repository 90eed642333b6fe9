from django.urls import path

from metrics import views

app_name = "metrics"
urlpatterns = [path("<int:cluster_id>/metrics.json", views.cluster_series, name="cluster_series")]
