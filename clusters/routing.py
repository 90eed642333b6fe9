from django.urls import path

from clusters import consumers

websocket_urlpatterns = [
    path("ws/clusters/<int:cluster_id>/", consumers.ClusterConsumer.as_asgi()),
    path("ws/environments/<int:environment_id>/", consumers.EnvironmentConsumer.as_asgi()),
]
