from django.urls import include, path, re_path

import api.endpoints  # noqa: F401  (registers the routers)
from api import pages
from api.app import urlpatterns as api_urlpatterns

app_name = "api"

v1 = [
    path("openapi.json", pages.openapi_json, name="openapi"),
    path("docs", pages.api_docs, name="docs"),
    *api_urlpatterns(),
    re_path(r"^(?P<rest>.*)$", pages.unknown_endpoint),
]

urlpatterns = [
    path("api/v1/", include(v1)),
    path("account/api-keys/", pages.key_list, name="keys"),
    path("account/api-keys/<int:key_id>/deactivate/", pages.key_deactivate, name="key_deactivate"),
    path("account/api-keys/<int:key_id>/reactivate/", pages.key_reactivate, name="key_reactivate"),
    path("account/api-keys/<int:key_id>/delete/", pages.key_delete, name="key_delete"),
]
