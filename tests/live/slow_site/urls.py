from __future__ import annotations

import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.http import HttpRequest, HttpResponse
from django.urls import path


def slow(request: HttpRequest) -> HttpResponse:
    time.sleep(float(request.GET.get("seconds", "2")))
    # After the work, a push from the view thread: it needs the server's event loop.
    async_to_sync(get_channel_layer().group_send)("slow", {"type": "noop"})
    return HttpResponse("done")


urlpatterns = [path("slow/", slow)]
