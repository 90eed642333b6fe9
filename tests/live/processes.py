"""Real processes for tests of outages and crashes: a private redis-server on a port of its
own, and Celery workers and beat started as config.stack starts them, against this test's database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection

from config.stack import beat_command, worker_command

BASE_DIR = Path(settings.BASE_DIR)


def wait_for(condition: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    """Poll `condition` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


def stop_stack(stack: subprocess.Popen) -> None:
    """End a stack started in a session of its own: SIGTERM to its group, SIGKILL after 60 s."""
    os.killpg(stack.pid, signal.SIGTERM)
    try:
        stack.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(stack.pid, signal.SIGKILL)
        stack.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class RedisServer:
    """redis-server on 127.0.0.1:<port>, no persistence; stop() and start() again on the same port."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


class Processes:
    """Workers and beat, each in its own process group so a kill takes all of its children."""

    def __init__(self, directory: Path, redis_url: str, **env: str) -> None:
        self.directory = directory
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        self.env.update({
            "DATABASE_URL": database_url(), "REDIS_URL": redis_url, "RUNCRATE_VAR_DIR": str(directory / "var"),
            "DEBUG": "1", "SECRET_KEY": uuid.uuid4().hex * 2, "CELERY_TASK_ALWAYS_EAGER": "0",
            "CLUSTER_SELF_RESCHEDULE": "1", "CLUSTER_POLL_SECONDS": "1", "LOG_LEVEL": "WARNING",
            "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend", "PYTHONUNBUFFERED": "1",
            "DB_POOL_SIZE": "4", **env,
        })
        self.running: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        log = self.directory / f"{name}.log"
        self.logs[name] = log
        process = subprocess.Popen(
            command, cwd=BASE_DIR, env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.running[name] = process
        return process

    def worker(self, name: str) -> subprocess.Popen:
        return self.start(name, worker_command(name, concurrency=1, loglevel="WARNING") + ["--without-gossip", "--without-mingle"])

    def beat(self) -> subprocess.Popen:
        return self.start("beat", beat_command(self.directory / "celerybeat-schedule"))

    def kill(self, name: str) -> None:
        """kill -9 the process and everything it started, as a crashed machine would."""
        process = self.running.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def log(self, name: str) -> str:
        return self.logs[name].read_text()[-4000:] if name in self.logs else ""

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.running.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.running.clear()


def forget_broker_pools() -> None:
    """Close this process's broker connections and drop every pool that held them.

    Closing only the app's pool (`app.pool.force_close_all()`) is not enough: the closed pool
    stays registered in kombu's process-wide pool groups under its broker URL, so the next
    `app.pool` for that URL is the same closed pool, and `app.amqp` keeps the producer pool
    built on it; either answers "Acquire on closed pool" to the next publish. kombu's reset()
    closes every pool and empties the groups; the app's own references go with them.
    """
    from kombu import pools

    from config.celery import app

    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


def publish_to(redis_url: str, key_prefix: str = "") -> Callable[[], None]:
    """Make this test process queue tasks on `redis_url` (under `key_prefix`, as a worker started
    with CELERY_KEY_PREFIX reads them) instead of running them inline; the returned function
    puts the app back as it was."""
    from config.celery import app

    saved = (app.conf.task_always_eager, app.conf.broker_url, app.conf.broker_transport_options)
    forget_broker_pools()
    app.conf.task_always_eager = False
    app.conf.broker_url = redis_url
    if key_prefix:
        app.conf.broker_transport_options = {**saved[2], "global_keyprefix": key_prefix}

    def restore() -> None:
        forget_broker_pools()
        app.conf.task_always_eager, app.conf.broker_url, app.conf.broker_transport_options = saved

    return restore
