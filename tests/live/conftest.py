from __future__ import annotations

import copy
import uuid

import pytest


@pytest.fixture
def isolated_channel_layer(settings):
    """A fresh channel layer per test: on Redis under a prefix no other test run shares."""
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    if layers["default"]["BACKEND"].endswith("RedisChannelLayer"):
        layers["default"]["CONFIG"]["prefix"] = f"test-{uuid.uuid4().hex[:12]}"
    # Assigning the setting makes channels drop its cached layer (setting_changed).
    settings.CHANNEL_LAYERS = layers
    return layers
