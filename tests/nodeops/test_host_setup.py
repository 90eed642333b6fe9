"""bin/host-setup delegates exactly the uid block real nodes map their roots into."""

from __future__ import annotations

from pathlib import Path

from clusters.providers.local import realnodes

SCRIPT = Path(__file__).resolve().parents[2] / "bin" / "host-setup"


def test_host_setup_delegates_the_block_realnodes_maps_node_roots_into():
    assert f'SUBID_LINE="{realnodes.SUBID_LINE}"' in SCRIPT.read_text()


def test_host_setup_installs_every_tool_realnodes_needs():
    text = SCRIPT.read_text()
    for package in ("uidmap", "iproute2", "socat", "fping", "wireguard-go", "openssh-server", "util-linux"):
        assert f" {package}" in text or f"\n    {package}" in text, package
