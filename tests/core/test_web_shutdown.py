"""The web server `make run` and production start stops within its grace period on SIGTERM,
answering the requests in flight first; the stack (config.stack) kills and restarts one that stops answering
without exiting."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from config.stack import Child, accepts_connections, web_command
from tests.live.processes import free_port, wait_for


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_sigterm_with_requests_in_flight_answers_them_and_exits_within_the_grace_period(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL",)}
    env.update(DJANGO_SETTINGS_MODULE="tests.live.slow_site.settings", DEBUG="1", WEB_SHUTDOWN_GRACE_SECONDS="8",
               PYTHONUNBUFFERED="1")
    log = (tmp_path / "web.log").open("w")
    server = subprocess.Popen(web_command("127.0.0.1", port), env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        assert wait_for(lambda: _listening(port), 30), (tmp_path / "web.log").read_text()
        answers: list[int | str] = []

        def ask() -> None:
            try:
                answers.append(httpx.get(f"http://127.0.0.1:{port}/slow/?seconds=2", timeout=30).status_code)
            except httpx.HTTPError as error:
                answers.append(type(error).__name__)

        clients = [threading.Thread(target=ask) for _ in range(8)]
        for client in clients:
            client.start()
        time.sleep(0.8)  # every request is in its view now
        os.kill(server.pid, signal.SIGTERM)
        signalled = time.monotonic()
        server.wait(timeout=30)
        exited_after = time.monotonic() - signalled
        for client in clients:
            client.join(timeout=30)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert exited_after < 8 + 4, (tmp_path / "web.log").read_text()
    assert answers == [200] * 8, (tmp_path / "web.log").read_text()


def test_the_stack_kills_and_restarts_a_server_that_stopped_listening_but_never_exits(tmp_path):
    port = free_port()
    runs = tmp_path / "runs"
    # Listens for a second, then closes its socket and hangs on, as daphne did after SIGTERM.
    script = (
        "import socket, time\n"
        f"open({str(runs)!r}, 'a').write('x')\n"
        f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))\n"
        "s.listen(); time.sleep(1); s.close()\n"
        "time.sleep(600)\n"
    )
    child = Child("web", [sys.executable, "-c", script], os.environ.copy(), grace=2,
                  alive=accepts_connections("127.0.0.1", port))
    first = child.process
    try:
        restarted = wait_for(child.restart_if_wedged, 20, step=0.1)
        assert restarted
        assert first.poll() == -signal.SIGKILL
        assert wait_for(lambda: runs.exists() and runs.read_text() == "xx", 10)
    finally:
        child.terminate()
        child.wait(5)


def test_a_server_that_keeps_answering_is_left_alone(tmp_path):
    port = free_port()
    script = (
        "import socket, time\n"
        f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))\n"
        "s.listen(64); time.sleep(600)\n"
    )
    child = Child("web", [sys.executable, "-c", script], os.environ.copy(), grace=1,
                  alive=accepts_connections("127.0.0.1", port))
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not child.restart_if_wedged()
            time.sleep(0.2)
    finally:
        child.terminate()
        child.wait(5)
