"""API keys (stored hashed) and the first answers of idempotent creates."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models

from accounts.models import Workspace

KEY_PREFIX = "rc_live_"
# What is shown after a key is made: "rc_live_" and the first characters of its secret part.
VISIBLE_CHARS = 8


def hash_key(raw_key: str) -> str:
    """Keys are 256 random bits, so one round of SHA-256 is enough: there is nothing to brute-force."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKey(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    # The key acts with its creator's role in the workspace; removing the member stops the key.
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=30, help_text="The start of the key, shown to tell keys apart.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    is_active = models.BooleanField(default=True)
    # Set when its creator left or was removed from the workspace: a revoked key is refused for
    # good, even once they are a member again (membership is the single source of access).
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def actor_label(self) -> str:
        """How cluster events name what this key did."""
        return f"api key {self.prefix}"


class IdempotentRequest(models.Model):
    """The first successful answer to a create sent with an Idempotency-Key, replayed on retries."""

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="idempotent_requests")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["api_key", "workspace", "key"], name="idempotency_key_unique_per_api_key"),
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} [{self.key}]"
