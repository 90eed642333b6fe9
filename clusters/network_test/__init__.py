"""The network test: what a cluster's private network really carries between its machines
(docs/architecture.md "Network test", docs/nodeops.md "Network test"). The whole feature is here:

- `services`: every state change of a test (queue, claim, record a round's pairs, finish with a
  verdict), each in one transaction;
- `run`: one test run to its end outside the cluster's lease, with its heartbeat;
- `tasks`: the Celery tasks (run one test; beat's sweep of lost and stale tests);
- `card`: a test read for people (the page's Network card, the API's summary, the matrix);
- `node`: the node side (the rounds, and network_test.sh's actions on the nodes of each);
  standalone like clusters.nodeops: no Django;
- `parsers`: what iperf3, ping and all_reduce_perf printed;
- `network_test.sh`: the script the nodes run.
"""
