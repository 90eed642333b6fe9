"""Every state change of a cluster, one module per feature (as zulip's `zerver/actions`):
create, lease, progress, keys, terminate, workers, replace, network_tests, volumes, health,
and common for what they share. Each function is one transaction; side effects (tasks, live
pushes, emails) are queued with transaction.on_commit, never before the data commits.

Callers import from the feature's module (`from clusters.services.create import
create_cluster`): this package re-exports nothing."""
