"""Volumes: created in an environment, deleted with their data once no live cluster holds them,
and saved from a running cluster on demand (a checkpoint) as well as at terminate."""

from __future__ import annotations

import datetime as dt
import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Environment
from audit.recording import record
from clusters import notices
from clusters.errors import ClusterError, Conflict
from clusters.models import Cluster, Status, Volume
from clusters.services.common import SYSTEM, after_commit_changed, record_event

if TYPE_CHECKING:
    from clusters.providers.base import VolumeSync

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


# -- saving a running cluster's volume folder (a checkpoint) ---------------------------------

SYNC_REQUESTED, SYNCED, SYNC_FAILED = "volume_sync_requested", "volume_synced", "volume_sync_failed"
# A requested save whose worker died never reports: after this long another may be asked for.
SYNC_STALE_AFTER = dt.timedelta(minutes=30)
SYNCABLE = (Status.READY, Status.DEGRADED)


def sync_volume_now(cluster: Cluster, *, actor: str) -> Cluster:
    """Copy the head's volume folder (/shared/volume; /volume on container offers) into the
    attached volume while the cluster runs. The copy runs in a task and ends in an event that
    says how many bytes and how long (or why not: a folder larger than the volume is refused
    whole, and the volume keeps its earlier data). One save at a time per cluster."""
    with transaction.atomic():
        # The cluster row is the lock two clicks (or a click and a CLI call) queue on.
        cluster = Cluster.objects.select_for_update(of=("self",)).select_related("volume").get(pk=cluster.pk)
        if cluster.volume_id is None:
            raise Conflict("no_volume", f"Cluster {cluster.name} has no volume attached; attach one when creating a cluster.")
        if not cluster.can_sync_volume:
            raise Conflict("cluster_not_running",
                           f"Cluster {cluster.name} is {cluster.status}: a volume is saved from a running cluster "
                           "(a terminated cluster saved it when it stopped).")
        last = cluster.events.filter(event__in=(SYNC_REQUESTED, SYNCED, SYNC_FAILED)).order_by("-created_at", "-id").first()
        if last is not None and last.event == SYNC_REQUESTED and timezone.now() - last.created_at < SYNC_STALE_AFTER:
            raise Conflict("volume_sync_running", f"The volume of cluster {cluster.name} is being saved already.")
        volume = cluster.volume
        assert volume is not None
        record_event(cluster, SYNC_REQUESTED,
                     f"Saving the head's volume folder to volume {volume.name} (asked by {actor}).", actor=actor)
        after_commit_changed(cluster.pk)
        transaction.on_commit(lambda: notices.volume_sync_wanted.send(sender=None, cluster_id=cluster.pk))
    return cluster


def record_volume_sync_failed(cluster: Cluster, message: str) -> str:
    """The event a save that did not happen leaves, saying why."""
    with transaction.atomic():
        record_event(cluster, SYNC_FAILED, message)
        after_commit_changed(cluster.pk)
    return SYNC_FAILED


def record_volume_synced(cluster: Cluster, synced: VolumeSync, *, at_terminate: bool = False) -> None:
    """The event a copy into the volume leaves: what it held, how long it took."""
    volume = cluster.volume
    name = volume.name if volume is not None else "(deleted)"
    size = "its data" if synced.bytes is None else format_bytes(synced.bytes)
    when = " as the cluster stopped" if at_terminate else ""
    with transaction.atomic():
        record_event(cluster, SYNCED, f"Saved {size} to volume {name} in {synced.seconds:.1f} s{when}.", actor=SYSTEM)
        after_commit_changed(cluster.pk)


def format_bytes(count: int) -> str:
    """1,234,567 → "1.2 MB" (decimal units, as the volume's size in GB is)."""
    value = float(count)
    for unit in ("bytes", "kB", "MB", "GB"):
        if value < 1000:
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def volume_sync_not_queued(cluster_id: int) -> None:
    cluster = Cluster.objects.get(pk=cluster_id)
    record_volume_sync_failed(cluster, "The volume could not be saved just now; nothing changed. Try again in a minute.")
