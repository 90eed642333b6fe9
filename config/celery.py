import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("runcrate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# A feature of an app that is a package of its own keeps its tasks there (docs/architecture.md).
app.autodiscover_tasks(["clusters.network_test", "clusters.node_health"])


@worker_process_init.connect
def _forget_the_parents_connection_pools(**kwargs: object) -> None:
    # A prefork child must not share the parent's pooled sockets (or its pool's threads,
    # which fork does not copy): forget them without closing, so the child opens its own.
    from django.db.backends.postgresql.base import DatabaseWrapper

    DatabaseWrapper._connection_pools.clear()  # type: ignore[attr-defined]
