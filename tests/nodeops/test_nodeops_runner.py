"""The runner on its own: environment, stdin, output, timeouts, kept connections."""

from __future__ import annotations

import time

from clusters.nodeops.runner import NodeRunner, RetryPolicy, build_payload


def test_each_node_gets_its_own_environment_safely_quoted(endpoints, runner):
    nodes = endpoints.targets()
    tricky = "it's $HOME; `whoami` \"quoted\"\nsecond line"

    results = runner.run(
        nodes,
        'printf "%s|%s|%s|%s" "$RUNCRATE_NODE_NAME" "$RUNCRATE_NODE_INDEX" "$RUNCRATE_ROOT" "$TRICKY"',
        step="env",
        env={"TRICKY": tricky},
    )

    for node in nodes:
        assert results[node.name].stdout == f"{node.name}|{node.index}|{node.root}|{tricky}"


def test_secrets_travel_on_stdin_not_on_the_command_line():
    payload = build_payload("true", {"RUNCRATE_WG_CONF": "PrivateKey = secret"})
    assert payload.startswith("export RUNCRATE_WG_CONF='PrivateKey = secret'\n{\n")
    assert payload.endswith("\n} </dev/null\n")


def test_commands_that_read_stdin_cannot_eat_the_script(endpoints, runner):
    results = runner.run(endpoints.targets()[:1], "cat\necho after-cat\n", step="stdin")
    assert results["node-0"].stdout == "after-cat\n"


def test_exit_status_stdout_and_stderr_come_back_per_node(endpoints, runner):
    results = runner.run(
        endpoints.targets(),
        'echo out; echo err >&2; [ "$RUNCRATE_NODE_INDEX" != 2 ] || exit 7',
        step="status",
    )
    assert [results[f"node-{i}"].exit_code for i in range(4)] == [0, 0, 7, 0]
    assert results["node-2"].error == "exit status 7" and not results["node-2"].unreachable
    assert results["node-1"].stdout == "out\n" and results["node-1"].stderr == "err\n"


def test_a_command_that_runs_too_long_is_cut_off(endpoints):
    with NodeRunner(RetryPolicy(connect_timeout=2, attempts=1, command_timeout=1)) as runner:
        results = runner.run(endpoints.targets()[:1], "sleep 5", step="slow")
    assert not results["node-0"].ok and "did not finish within 1 seconds" in results["node-0"].error


def test_the_nodes_run_at_the_same_time(endpoints, runner):
    # Each node says when its command started and ended (one clock: the nodes share this
    # computer's): every one started before any ended, so none waited for another.
    results = runner.run(endpoints.targets(), "date +%s%N; sleep 1; date +%s%N", step="parallel")
    assert all(result.ok for result in results.values())
    spans = [tuple(int(line) for line in result.stdout.split()) for result in results.values()]
    assert len(spans) == 4 and max(start for start, _ in spans) < min(end for _, end in spans), spans


def test_a_kept_connection_that_died_is_reopened(endpoints):
    nodes = endpoints.targets()[:1]
    with NodeRunner(RetryPolicy(connect_timeout=2, attempts=2, backoff=0.01), keep_connections=True) as runner:
        assert runner.run(nodes, "true", step="first")["node-0"].ok
        connection = next(iter(runner._connections.values()))
        connection.client.get_transport().sock.close()  # the link drops between steps
        time.sleep(0.2)
        result = runner.run(nodes, "echo again", step="second")["node-0"]
    assert result.ok and result.stdout == "again\n"


def test_ssh_sockets_send_small_packets_at_once(endpoints):
    import socket

    with NodeRunner(RetryPolicy(connect_timeout=2, attempts=1), keep_connections=True) as runner:
        assert runner.run(endpoints.targets()[:2], "true", step="nodelay")["node-0"].ok
        sockets = [c.client.get_transport().sock for c in runner._connections.values()]
        assert len(sockets) == 2
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets)


def test_a_command_that_closed_its_output_is_waited_for_without_spinning(endpoints, runner, monkeypatch):
    # After the output's end, paramiko keeps the channel readable for good: a loop of selects
    # would spin on it until the exit status arrives.
    import selectors

    waits = []

    class CountingSelector(selectors.DefaultSelector):
        def select(self, timeout=None):
            waits.append(timeout)
            return super().select(timeout)

    monkeypatch.setattr(selectors, "DefaultSelector", CountingSelector)
    result = runner.run(endpoints.targets()[:1], "echo bye; exec >&- 2>&-; sleep 1; exit 3", step="closed")["node-0"]
    assert result.exit_code == 3 and result.stdout == "bye\n"
    assert len(waits) < 10
