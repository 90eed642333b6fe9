"""Volumes: created in an environment, deleted with their data once no live cluster holds them."""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path

from django.conf import settings
from django.db import transaction

from accounts.models import Environment
from audit.recording import record
from clusters.errors import ClusterError, Conflict
from clusters.models import Cluster, Volume

VOLUME_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


def create_volume(*, environment: Environment, name: str, size_gb: int) -> Volume:
    """A volume in an environment. Its data lives under VOLUMES_DIR; attached clusters sync
    it into /shared/volume on the head and back when they terminate."""

    if not VOLUME_NAME_RE.match(name or ""):
        raise ClusterError("invalid_name", "Use lowercase letters, digits, dots, dashes and underscores.", field="name")
    if not 1 <= size_gb <= 100_000:
        raise ClusterError("invalid_size", "A volume holds 1 GB to 100,000 GB.", field="size_gb")
    if Volume.objects.filter(environment=environment, name=name).exists():
        raise ClusterError("name_taken", f"This environment already has a volume named {name!r}.", field="name")
    # A folder of its own, never a name's: a volume created again under a deleted one's name
    # starts empty.
    path = Path(settings.VOLUMES_DIR) / str(environment.pk) / secrets.token_hex(16)
    with transaction.atomic():
        volume = Volume.objects.create(
            workspace_id=environment.workspace_id, environment=environment, name=name, size_gb=size_gb,
            source_path=str(path),
        )
        record(environment.workspace_id, "volume.create", volume, label=name,
               after={"name": name, "size_gb": size_gb, "environment": environment.name})
    path.mkdir(parents=True, exist_ok=True)
    return volume


def delete_volume(volume: Volume) -> None:
    with transaction.atomic():
        if Cluster.objects.live().filter(volume=volume).exists():
            raise Conflict("volume_in_use", f"{volume.name} is attached to a live cluster; terminate it first.")
        # Ended clusters keep a reference (on_delete=PROTECT) that would refuse the delete;
        # they hold no machines, so they simply forget the volume.
        Cluster.objects.filter(volume=volume).update(volume=None)
        record(volume.workspace_id, "volume.delete", volume, label=volume.name,
               before={"name": volume.name, "size_gb": volume.size_gb})
        volume.delete()
        # Its data goes with it, once the delete is committed.
        if volume.source_path:
            transaction.on_commit(lambda: shutil.rmtree(volume.source_path, ignore_errors=True))
