"""The web process: uvicorn serving config.asgi, with a shutdown that always ends.

`python -m config.serve --host 127.0.0.1 --port 8000` is what `make run` (config.stack) starts and
what production runs, N times. On SIGTERM or SIGINT uvicorn stops listening, lets the requests in
flight finish for up to WEB_SHUTDOWN_GRACE_SECONDS, cancels what is left, and exits. A request
whose view is stuck in a thread (a lock wait, a call that never returns) could still hold the
interpreter's exit, which joins the thread pool's threads: a watchdog started by the signal ends
the process WEB_SHUTDOWN_GRACE_SECONDS + SHUTDOWN_WATCHDOG_MARGIN after it, whatever is left.
docs/robustness.md says why uvicorn and not daphne.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from types import FrameType

import uvicorn

log = logging.getLogger("config.serve")

# Seconds past the graceful period before the watchdog ends the process outright.
SHUTDOWN_WATCHDOG_MARGIN = 3.0


def shutdown_grace() -> float:
    """In-flight requests get this long after SIGTERM (env WEB_SHUTDOWN_GRACE_SECONDS, 10)."""
    return float(os.environ.get("WEB_SHUTDOWN_GRACE_SECONDS") or 10)


class BoundedServer(uvicorn.Server):
    """uvicorn's server whose first exit signal also arms a watchdog: the process is gone within
    the grace period plus a margin, even when a view thread never returns."""

    _watchdog: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._watchdog is None:
            deadline = (self.config.timeout_graceful_shutdown or 0) + SHUTDOWN_WATCHDOG_MARGIN
            self._watchdog = threading.Thread(target=_exit_after, args=(deadline,), name="shutdown-watchdog",
                                              daemon=True)
            self._watchdog.start()


def _exit_after(seconds: float) -> None:
    threading.Event().wait(seconds)
    log.error("The web server was still running %.0f s after the signal to stop; exiting now.", seconds)
    logging.shutdown()
    os._exit(70)


def build_server(host: str, port: int, *, grace: float | None = None, app: str = "config.asgi:application") -> BoundedServer:
    config = uvicorn.Config(
        app, host=host, port=port,
        # Django's ASGI handler speaks no lifespan protocol; uvicorn would log that on every start.
        lifespan="off",
        ws="websockets-sansio",
        timeout_graceful_shutdown=int(shutdown_grace() if grace is None else grace),
        # The client address is the peer's unless FORWARDED_ALLOW_IPS names the proxies in front
        # (then X-Forwarded-For from them): rate limits and the sign-in throttle count by it, and
        # a header anyone can send must not choose it.
        proxy_headers=bool(os.environ.get("FORWARDED_ALLOW_IPS")),
        forwarded_allow_ips=os.environ.get("FORWARDED_ALLOW_IPS") or None,
        log_level=os.environ.get("WEB_LOG_LEVEL", "info"),
        server_header=False,
    )
    return BoundedServer(config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve Runcrate Clusters over HTTP and WebSocket (uvicorn).")
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--app", default="config.asgi:application")
    args = parser.parse_args(argv)
    build_server(args.host, args.port, app=args.app).run()


if __name__ == "__main__":
    main()
