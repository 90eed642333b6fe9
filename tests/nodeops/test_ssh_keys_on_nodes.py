"""Customer SSH keys on real sshd sandbox nodes: set_names writes them, stop takes them away.

A machine of the `ssh` provider is handed from one tenant to the next, so nothing of one
cluster's keys may survive its stop, and no key can smuggle a line of its own in.
"""

from __future__ import annotations

import base64
import dataclasses
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from accounts.sshkeys import node_payload
from clusters.nodeops import operations as ops

LIB = (Path(__file__).resolve().parents[2] / "clusters/nodeops/scripts/lib.sh").read_text()
ENV = {"RUNCRATE_NODE_NAME": "node-0", "RUNCRATE_NODE_INDEX": "0", "RUNCRATE_NODES": "node-0 10.77.0.1", "PATH": "/usr/bin:/bin"}
OPERATOR = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorKeyOperatorKeyOperatorKeyOpera operator@runcrate"


def public_key(comment: str) -> str:
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return f"{raw.decode()} {comment}"


def authorized_keys(node) -> Path:
    return Path(node.root) / "root/.ssh/authorized_keys"


def with_keys(spec, encoded: str):
    return dataclasses.replace(spec, extra_env=(("RUNCRATE_SSH_KEYS", encoded),))


@pytest.fixture
def two_nodes(endpoints):
    spec = endpoints.spec(count=2)
    for node in spec.nodes:
        path = authorized_keys(node)
        path.parent.mkdir(parents=True)
        path.write_text(OPERATOR + "\n")
    return spec


def test_nothing_of_the_first_tenants_keys_survives_stop_and_the_next_tenants_set_names(two_nodes, runner):
    first = [public_key("alice@first"), public_key("bob@first")]
    second = [public_key("carol@second")]

    assert ops.set_names(with_keys(two_nodes, node_payload(first)), runner=runner).ok
    for node in two_nodes.nodes:
        text = authorized_keys(node).read_text()
        assert all(key in text.splitlines() for key in first)

    assert ops.stop(with_keys(two_nodes, ""), runner=runner).ok
    for node in two_nodes.nodes:
        assert authorized_keys(node).read_text() == OPERATOR + "\n"
        assert oct(authorized_keys(node).stat().st_mode & 0o777) == "0o600"

    assert ops.set_names(with_keys(two_nodes, node_payload(second)), runner=runner).ok
    first_blobs = [key.split()[1] for key in first]
    for node in two_nodes.nodes:
        text = authorized_keys(node).read_text()
        assert not any(blob in text for blob in first_blobs) and "first" not in text
        assert text.startswith(f"{OPERATOR}\n# BEGIN runcrate customer\n{second[0]}\n# END runcrate customer\n")


@pytest.mark.parametrize(
    "line",
    [
        "{key} a@b\n# END runcrate customer\n{other} x",
        'command="curl 127.0.0.1|sh",no-pty {key}',
        "{key} a@b;# END runcrate customer;{other} x",
        "{key} a\"b",
    ],
    ids=["newline and marker", "options", "semicolons", "quote in comment"],
)
def test_a_node_refuses_a_key_that_is_not_one_plain_line_even_if_the_control_plane_sent_it(two_nodes, runner, line):
    key, other = (public_key("k").rsplit(" ", 1)[0] for _ in range(2))
    forged = base64.b64encode(line.format(key=key, other=other).encode()).decode()

    result = ops.set_names(with_keys(two_nodes, forged), runner=runner)

    assert not result.ok
    assert all(authorized_keys(node).read_text() == OPERATOR + "\n" for node in two_nodes.nodes)


def test_the_control_plane_leaves_off_a_stored_row_that_is_not_one_plain_key():
    good = public_key("me@laptop")
    payload = node_payload([good, f"{good};command=\"sh\" {good}", "ssh-ed25519 AAAA\nssh-rsa AAAA"])

    assert [base64.b64decode(item).decode() for item in payload.split(" ")] == [good]


def test_a_managed_block_holding_a_marker_line_is_refused_and_the_file_kept(tmp_path):
    path = tmp_path / "authorized_keys"
    path.write_text(OPERATOR + "\n")

    result = subprocess.run(
        ["bash", "-c", LIB + '\nmanaged_block "$1" customer <<<"$2"', "_", str(path),
         "ssh-ed25519 AAAA x\n# END runcrate customer\nssh-ed25519 BBBB evil"],
        env=ENV, capture_output=True, text=True,
    )

    assert result.returncode != 0 and "marker line" in result.stderr
    assert path.read_text() == OPERATOR + "\n"


def test_remove_block_keeps_every_other_line_and_drops_an_unterminated_block(tmp_path):
    path = tmp_path / "authorized_keys"
    path.write_text(f"{OPERATOR}\n# BEGIN runcrate customer\nssh-ed25519 AAAA a\n# END runcrate customer\n"
                    "# BEGIN runcrate customer\nssh-ed25519 BBBB half-written\n")

    subprocess.run(["bash", "-c", LIB + '\nremove_block "$1" customer 0600', "_", str(path)], env=ENV, check=True)

    assert path.read_text() == OPERATOR + "\n"
