"""`make run`'s stack: a process that exits is started again, the rest keep running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from django.conf import settings

from config.stack import Child, worker_command


def test_a_process_of_the_stack_that_exits_is_started_again(tmp_path):
    runs = tmp_path / "runs"
    child = Child("flaky", [sys.executable, "-c", f"open({str(runs)!r}, 'a').write('x'); raise SystemExit(3)"],
                  os.environ.copy())
    codes: list[int] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(codes) < 2:
        code = child.restart_if_exited()
        if code is not None:
            codes.append(code)
        time.sleep(0.05)
    child.terminate()
    child.wait()
    assert codes == [3, 3]
    assert runs.read_text().count("x") >= 2  # it ran again after each exit


def test_the_worker_runs_a_pool_that_survives_a_redis_outage():
    command = worker_command("w")
    assert command[command.index("--pool") + 1] == "prefork"


def test_webhook_deliveries_go_to_a_queue_that_only_the_webhook_worker_takes():
    from config.celery import app
    from config.stack import worker_commands

    def queue_of(task: str) -> str:
        return app.amqp.router.route({}, task)["queue"].name

    def queues(command: list[str]) -> set[str]:
        return set(command[command.index("-Q") + 1].split(","))

    workers = worker_commands("test")
    assert queue_of("webhooks.tasks.send_webhook") in queues(workers["webhooks"])
    assert queue_of("webhooks.tasks.send_webhook") not in queues(workers["worker"])
    for task in ("clusters.tasks.advance_cluster", "clusters.tasks.sweep_clusters", "webhooks.tasks.send_due_webhooks"):
        assert queue_of(task) in queues(workers["worker"]) and queue_of(task) not in queues(workers["webhooks"])


def test_a_worker_knows_every_task_beat_sends_and_every_features_tasks():
    """A worker imports what the Celery app discovers, nothing more: the tasks of a feature
    package (clusters/node_health/tasks.py) must be found by the app, or beat's health round-up
    would reach workers that do not know it."""
    script = ("import json, django; django.setup()\n"
              "from config.celery import app\n"
              "app.loader.import_default_modules()\n"
              "print(json.dumps(sorted(app.tasks)))\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "1"}
    known = set(json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                          check=True, cwd=settings.BASE_DIR).stdout.splitlines()[-1]))
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= known
    assert {"clusters.node_health.tasks.check_cluster_health", "clusters.network_test.tasks.run_network_test"} <= known
