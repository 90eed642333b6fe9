from django.urls import include, path, re_path

from api import pages, views
from api.http import api_route, public_route, unknown_endpoint

app_name = "api"

v1 = [
    path("openapi.json", public_route(pages.openapi_json), name="openapi"),
    path("docs", public_route(pages.api_docs), name="docs"),
    path("gpu-types", api_route(GET=views.gpu_types), name="gpu_types"),
    path("cluster-offers", api_route(GET=views.cluster_offers), name="cluster_offers"),
    path("clusters", api_route(GET=views.list_clusters, POST=views.create_cluster), name="clusters"),
    path("clusters/<str:cluster_id>", api_route(GET=views.cluster_detail, DELETE=views.terminate_cluster), name="cluster"),
    path("clusters/<str:cluster_id>/events", api_route(GET=views.cluster_events), name="cluster_events"),
    path("clusters/<str:cluster_id>/retry-install", api_route(POST=views.retry_install), name="retry_install"),
    path("clusters/<str:cluster_id>/workers", api_route(POST=views.add_workers), name="workers"),
    path("clusters/<str:cluster_id>/nodes/<str:node_name>", api_route(DELETE=views.terminate_node), name="node"),
    path("billing/balance", api_route(GET=views.billing_balance), name="billing_balance"),
    path("billing/usage", api_route(GET=views.billing_usage), name="billing_usage"),
    path("volumes", api_route(GET=views.list_volumes, POST=views.create_volume), name="volumes"),
    path("volumes/<str:volume_id>", api_route(DELETE=views.delete_volume), name="volume"),
    path("quotes", api_route(POST=views.create_quote), name="quotes"),
    re_path(r"^(?P<rest>.*)$", unknown_endpoint),
]

urlpatterns = [
    path("api/v1/", include(v1)),
    path("account/api-keys/", pages.key_list, name="keys"),
    path("account/api-keys/<int:key_id>/deactivate/", pages.key_deactivate, name="key_deactivate"),
    path("account/api-keys/<int:key_id>/reactivate/", pages.key_reactivate, name="key_reactivate"),
    path("account/api-keys/<int:key_id>/delete/", pages.key_delete, name="key_delete"),
]
