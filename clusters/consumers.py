"""WebSocket consumers: a page subscribes to one cluster or to an environment's cluster list."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from accounts.models import Membership
from clusters.broadcast import cluster_group, environment_group
from clusters.models import Cluster


@database_sync_to_async
def _cluster_visible(user, cluster_id: int) -> bool:
    return Cluster.objects.filter(pk=cluster_id, workspace__memberships__user=user).exists()


@database_sync_to_async
def _environment_visible(user, environment_id: int) -> bool:
    return Membership.objects.filter(user=user, workspace__environments__pk=environment_id).exists()


class _LiveConsumer(AsyncWebsocketConsumer):
    group: str | None = None

    async def allowed(self, user) -> bool:
        return False

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not await self.allowed(user):
            await self.close(code=4403)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def html_update(self, event):
        await self.send(text_data=event["html"])


class ClusterConsumer(_LiveConsumer):
    async def allowed(self, user) -> bool:
        cluster_id = int(self.scope["url_route"]["kwargs"]["cluster_id"])
        self.group = cluster_group(cluster_id)
        return await _cluster_visible(user, cluster_id)


class EnvironmentConsumer(_LiveConsumer):
    async def allowed(self, user) -> bool:
        environment_id = int(self.scope["url_route"]["kwargs"]["environment_id"])
        self.group = environment_group(environment_id)
        return await _environment_visible(user, environment_id)
