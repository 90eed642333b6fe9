"""A call repeated from a thread of its own while a block of work runs (lease and liveness
heartbeats)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Self

from django.db import connections as db_connections


class Beat:
    """Calls `beat` every `interval` seconds while the `with` block runs, until it returns
    False; the thread's database connections are closed when it ends."""

    def __init__(self, interval: float, name: str, beat: Callable[[], bool]) -> None:
        self.interval = interval
        self._beat = beat
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stopped.wait(self.interval):
                if not self._beat():
                    return
        finally:
            db_connections.close_all()
