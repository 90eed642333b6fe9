"""Node secrets are encrypted at rest: the row never holds a WireGuard private key in clear."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.apps import apps
from django.db import connection

from clusters.models import Cluster
from clusters.services.create import create_cluster
from clusters.services.keys import save_node_secrets
from config.sealing import unseal

pytestmark = pytest.mark.django_db

SECRETS = {"wireguard": {"node-0": ["cHJpdmF0ZS1rZXktMA==", "cHVi"]}, "munge_key": "bXVuZ2U=", "kube_token": "abcdef.0123456789abcdef"}


def raw_column(cluster: Cluster) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT node_secrets FROM clusters_cluster WHERE id = %s", [cluster.pk])
        return str(cursor.fetchone()[0])


@pytest.fixture
def cluster(environment, machine_type):
    return create_cluster(environment=environment, name="sealed", machine_type=machine_type, machine_count=2)


def test_saved_node_secrets_are_not_in_the_row_in_clear_and_read_back_whole(cluster):
    save_node_secrets(cluster, SECRETS)

    stored = raw_column(cluster)
    assert "cHJpdmF0ZS1rZXktMA==" not in stored and "bXVuZ2U=" not in stored and "abcdef.0123" not in stored
    assert Cluster.objects.get(pk=cluster.pk).plain_node_secrets == SECRETS


def test_another_key_cannot_read_them(cluster, settings):
    from cryptography.fernet import Fernet, InvalidToken

    save_node_secrets(cluster, SECRETS)
    settings.NODE_SECRETS_KEY = Fernet.generate_key().decode()
    with pytest.raises(InvalidToken):
        unseal(Cluster.objects.get(pk=cluster.pk).node_secrets)


def test_the_migration_seals_rows_stored_in_clear(cluster):
    Cluster.objects.filter(pk=cluster.pk).update(node_secrets=SECRETS)

    import_module("clusters.migrations.0006_seal_node_secrets").seal_existing(apps, None)

    assert "cHJpdmF0ZS1rZXktMA==" not in raw_column(cluster)
    assert Cluster.objects.get(pk=cluster.pk).plain_node_secrets == SECRETS
