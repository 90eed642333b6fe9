from django.urls import path, re_path

from clusters import consumers

websocket_urlpatterns = [
    path("ws/clusters/<int:cluster_id>/", consumers.ClusterConsumer.as_asgi()),
    path("ws/environments/<int:environment_id>/", consumers.EnvironmentConsumer.as_asgi()),
    # Anything else is closed cleanly (4404) instead of a routing error in the server's log.
    re_path(r"", consumers.UnknownPathConsumer.as_asgi()),
]
