"""The product's settings with one extra page that takes a while and pushes to the channel
layer from its view thread, as a create does: a request that is in flight when the server is
told to stop."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "tests.live.slow_site.urls"
ALLOWED_HOSTS = ["*"]
