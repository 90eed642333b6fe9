"""Every state change of a cluster, one module per feature (as zulip's `zerver/actions`):
create, lease, progress, keys, terminate, workers, replace, volumes, and common for what they
share. A feature with more than its state changes (a task, a view-model, a node script) is a
package of its own with its services inside: clusters.network_test, clusters.node_health. Each function is one transaction; side effects (tasks, live
pushes, emails) are queued with transaction.on_commit, never before the data commits.

Callers import from the feature's module (`from clusters.services.create import
create_cluster`): this package re-exports nothing."""
