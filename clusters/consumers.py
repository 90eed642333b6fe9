"""WebSocket consumers: a page subscribes to one cluster or to an environment's cluster list."""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth.models import User
from redis.exceptions import RedisError

from accounts.models import Membership
from clusters.live import PageState, render_cluster_changes, render_cluster_now, render_cluster_row, render_network_card
from clusters.models import Cluster
from clusters.notices import cluster_group, environment_group, user_group

log = logging.getLogger(__name__)
TRY_AGAIN_LATER = 1013  # WebSocket close code: the server cannot serve the socket now


@database_sync_to_async
def _cluster_visible(user: User, cluster_id: int) -> bool:
    return Cluster.objects.filter(pk=cluster_id, workspace__memberships__user=user).exists()


@database_sync_to_async
def _environment_visible(user: User, environment_id: int) -> bool:
    return Membership.objects.filter(user=user, workspace__environments__pk=environment_id).exists()


BIGINT_MAX = 2**63 - 1


class UnknownPathConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.close(code=4404)


class _LiveConsumer(AsyncWebsocketConsumer):
    group: str | None = None
    closed_for_outage = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # The consumer also listens on the channel layer; when Redis is down that read fails,
        # perhaps before `connect` runs. Close the socket cleanly ("try again later") instead
        # of letting the failure end the application with the handshake left hanging.
        try:
            await super().__call__(scope, receive, send)
        except (OSError, RedisError):
            log.warning("live socket closed: the channel layer is unavailable", exc_info=True)
            if not self.closed_for_outage:
                self.closed_for_outage = True
                await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})

    async def allowed(self, user: User) -> bool:
        return False

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not await self.allowed(user):
            await self.close(code=4403)
            return
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
            # Also reachable as this user's socket, so removing them from the workspace can
            # tell it to leave (access.changed) instead of it pushing on until the page closes.
            self.user_group = user_group(user.pk)
            await self.channel_layer.group_add(self.user_group, self.channel_name)
        except Exception:  # the channel layer (Redis) is down
            # Refuse cleanly ("try again later"); htmx's socket extension reconnects with backoff.
            log.warning("live socket for %s refused: the channel layer is unavailable", self.group, exc_info=True)
            self.group = None
            self.closed_for_outage = True
            await self.close(code=TRY_AGAIN_LATER)
            return
        await self.accept()
        await self.joined()

    async def access_changed(self, event: dict[str, Any]) -> None:
        user = self.scope.get("user")
        if user is None or not await self.allowed(user):
            await self.close(code=4403)

    async def joined(self) -> None:
        """Runs once the socket is accepted and subscribed."""

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def html_update(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["html"])


class ClusterConsumer(_LiveConsumer):
    # What this socket's page shows (its newest event, its node rows and logs): each push
    # sends only what differs from it.
    page: PageState

    async def allowed(self, user: User) -> bool:
        self.cluster_id = int(self.scope["url_route"]["kwargs"]["cluster_id"])
        if self.cluster_id > BIGINT_MAX:
            return False
        self.group = cluster_group(self.cluster_id)
        return await _cluster_visible(user, self.cluster_id)

    async def joined(self) -> None:
        # A change committed between rendering the page and joining the group (or while
        # the socket was reconnecting) was pushed to nobody: send the state as it is now.
        self.page = PageState()
        messages = await database_sync_to_async(render_cluster_now)(self.cluster_id, self.page)
        # The Network card travels in the same first message (its own pushes come apart).
        network = await database_sync_to_async(render_network_card)(self.cluster_id)
        if messages and network:
            messages[0] += network
        await self.send_all(messages)

    async def cluster_changed(self, event: dict[str, Any]) -> None:
        # Rendered here, per socket, not on the thread that committed the change: it only
        # said which nodes changed, and each page lacks different events and rows.
        messages = await database_sync_to_async(render_cluster_changes)(self.cluster_id, event["nodes"], self.page)
        await self.send_all(messages)

    async def network_changed(self, event: dict[str, Any]) -> None:
        html = await database_sync_to_async(render_network_card)(self.cluster_id)
        if html:
            await self.send(text_data=html)

    async def send_all(self, messages: list[str]) -> None:
        for html in messages:
            await self.send(text_data=html)


class EnvironmentConsumer(_LiveConsumer):
    async def allowed(self, user: User) -> bool:
        environment_id = int(self.scope["url_route"]["kwargs"]["environment_id"])
        if environment_id > BIGINT_MAX:
            return False
        self.group = environment_group(environment_id)
        return await _environment_visible(user, environment_id)

    async def cluster_changed(self, event: dict[str, Any]) -> None:
        html = await database_sync_to_async(render_cluster_row)(event["cluster_id"])
        if html:
            await self.send(text_data=html)
