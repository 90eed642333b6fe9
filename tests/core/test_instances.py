"""Instances: every machine a workspace runs, each one a node of a cluster, never ended alone."""

from __future__ import annotations

import pytest

from clusters import queries
from clusters.errors import Conflict
from clusters.services.create import create_cluster
from clusters.services.terminate import finish_termination, terminate_cluster, terminate_instance
from tests.factories import WorkspaceFactory, machine_type_with_hosts

pytestmark = pytest.mark.django_db


def create(environment, machine_type, name="train", count=2):
    return create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=count)


def test_instances_are_the_live_machines_of_the_workspaces_clusters(environment, machine_type):
    train = create(environment, machine_type, "train", 3)
    ended = create(environment, machine_type, "ended", 2)
    terminate_cluster(ended)
    finish_termination(ended)
    other_environment = environment.workspace.environments.create(name="staging")
    staging = create(other_environment, machine_type, "staging", 2)
    elsewhere = WorkspaceFactory()
    create(elsewhere.environments.get(), machine_type_with_hosts(2), "theirs", 2)

    instances = list(queries.workspace_instances(environment.workspace_id))

    assert sorted((n.cluster.name, n.name) for n in instances) == [
        ("staging", "node-0"), ("staging", "node-1"), ("train", "node-0"), ("train", "node-1"), ("train", "node-2"),
    ]
    assert {n.cluster_id for n in instances} == {train.pk, staging.pk}
    assert queries.count_instances(environment.workspace_id) == 5
    assert queries.count_instances(elsewhere.pk) == 2


def test_an_instance_of_another_workspace_is_not_found(environment, machine_type):
    elsewhere = WorkspaceFactory()
    theirs = create(elsewhere.environments.get(), machine_type, "theirs", 2)
    assert queries.workspace_instance(environment.workspace_id, theirs.nodes.first().pk) is None


def test_terminating_an_instance_is_refused_naming_its_cluster_and_how_to_end_it(environment, machine_type):
    cluster = create(environment, machine_type, "train", 2)
    node = cluster.nodes.get(index=1)
    instance = queries.workspace_instance(environment.workspace_id, node.pk)
    assert instance is not None
    with pytest.raises(Conflict) as refused:
        terminate_instance(instance)
    assert refused.value.code == "node_terminate_refused"
    assert "node-1 of cluster 'train'" in refused.value.message
    assert f"DELETE /api/v1/clusters/{cluster.pk}" in refused.value.message
    assert refused.value.details == {"cluster_id": cluster.pk, "cluster_name": "train", "node": "node-1"}
    assert cluster.nodes.filter(released_at__isnull=True).count() == 2


def test_deadline_messages_say_one_minute_not_one_minutes():
    from clusters.lifecycle import _minutes

    assert (_minutes(1), _minutes(25)) == ("1 minute", "25 minutes")
