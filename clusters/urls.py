from django.urls import path

from clusters import views

app_name = "clusters"
urlpatterns = [
    path("", views.cluster_list, name="list"),
    path("new/", views.cluster_create, name="create"),
    path("volumes/", views.volumes, name="volumes"),
    path("instances/", views.instances, name="instances"),
    path("quotas/", views.quotas, name="quotas"),
    path("quotas/<int:quota_id>/delete/", views.quota_delete, name="quota_delete"),
    path("instances/<int:instance_id>/terminate/", views.instance_terminate, name="instance_terminate"),
    path("volumes/<int:volume_id>/delete/", views.volume_delete, name="volume_delete"),
    path("<int:cluster_id>/", views.cluster_detail, name="detail"),
    path("<int:cluster_id>/terminate/", views.cluster_terminate, name="terminate"),
    path("<int:cluster_id>/recreate/", views.cluster_recreate, name="recreate"),
    path("<int:cluster_id>/retry-install/", views.cluster_retry_install, name="retry_install"),
    path("<int:cluster_id>/volume-sync/", views.cluster_sync_volume, name="sync_volume"),
    path("<int:cluster_id>/ssh-config/", views.cluster_ssh_config, name="ssh_config"),
    path("<int:cluster_id>/workers/", views.cluster_add_workers, name="add_workers"),
    path("<int:cluster_id>/network-tests/", views.cluster_network_test, name="network_test"),
    path("<int:cluster_id>/nodes/<str:node_name>/terminate/", views.node_terminate, name="node_terminate"),
    path("<int:cluster_id>/nodes/<str:node_name>/replace/", views.node_replace, name="replace_node"),
]
