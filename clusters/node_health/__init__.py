"""Node health: the periodic check of every ready cluster's nodes (docs/architecture.md "Node
health", docs/nodeops.md "Node health"). The whole feature is here:

- `services`: what a round found, recorded; a node that turns bad or recovers gets an event and
  one email;
- `rounds`: which clusters are due, one round at a time per cluster, a round over a cluster;
- `tasks`: the Celery tasks (beat's round-up; one round per cluster);
- `node`: the node side (health.sh on every node at once, and the verdicts); standalone like
  clusters.nodeops: no Django;
- `parsers`: what health.sh printed, and the verdict on every node of a round;
- `health.sh`: the script the nodes run.
"""
