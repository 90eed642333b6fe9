"""A node's way out (clusters.providers.local.egress): NAT through this computer to the package
registries, and nothing else of this computer or of another cluster on the way.

Real nodes, as test_isolation.py boots them. The only traffic that leaves this computer is the
package downloads of the first test (a node's NAT to the package registries); every attack
below is aimed at this computer's own addresses or at other nodes, so a hole would show here and
send nothing out.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from clusters.providers.local import egress, realnodes
from tests.providers.test_isolation import Run, sh

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
    pytest.mark.skipif(not egress.available()[0], reason=f"no way out here: {egress.available()[1]}"),
]


@pytest.fixture
def run(tmp_path):
    nodes = Run(tmp_path / "run")
    yield nodes
    nodes.close()


def _forwarding(device: str) -> str:
    return Path(f"/proc/sys/net/ipv4/conf/{device}/forwarding").read_text().strip()


def _host_address() -> str:
    """This computer's own address on its uplink (where its services listen on 0.0.0.0)."""
    shown = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", egress.uplink() or "lo"],
                                      capture_output=True, text=True).stdout)
    return shown[0]["addr_info"][0]["local"]


def test_root_on_a_node_installs_a_debian_package_and_a_python_package_through_its_host(run):
    node = run.boot("a")

    # The image lacks `tree`; apt reaches Debian's mirror through this computer, by name.
    assert sh(node, "command -v tree").returncode != 0
    installed = sh(node, "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tree"
                         " && tree --version", timeout=600)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    assert "tree v" in installed.stdout
    # pip in a fresh venv, over TLS with the certificate authorities the node was given.
    pip = sh(node, "python3 -m venv /root/v && /root/v/bin/pip install -q six"
                   " && /root/v/bin/python -c 'import six; print(six.__name__)'", timeout=600)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    assert pip.stdout.split()[-1] == "six"
    # None of it went through this computer's own configuration: the host's pip constraints
    # and indexes are not the node's.
    assert sh(node, "test -e /etc/xdg/pip || test -e /root/.config/pip").returncode != 0
    # All of this with this computer's forwarding off for every interface but the two it needs.
    assert _forwarding("all") == "0"
    assert _forwarding("default") == "0"


def test_forwarding_is_on_only_for_the_node_links_and_the_uplink_and_everything_goes_at_release(tmp_path):
    device = egress.uplink()
    assert device is not None
    before = _forwarding(device)
    first, second = Run(tmp_path / "one"), Run(tmp_path / "two")
    a = first.boot("a")
    b = second.boot("b")
    links = [realnodes.Underlay.uplink(handle.bridge)[0] for handle in (a, b)]
    try:
        assert _forwarding("all") == "0"
        assert _forwarding(device) == "1"
        for link in links:
            assert _forwarding(link) == "1"
            assert Path(f"/proc/sys/net/ipv4/conf/{link}/rp_filter").read_text().strip() == "1"
        others = [name.name for name in Path("/sys/class/net").iterdir()
                  if name.name not in {device, "all", "default", *links} and not name.name.startswith("rcu")]
        assert all(_forwarding(name) == "0" for name in others if Path(f"/proc/sys/net/ipv4/conf/{name}").exists())
        assert egress.table_exists()
        # Two runs never share a subnet: each node's address routes back to its own cluster.
        assert realnodes.Underlay(first.path).subnet != realnodes.Underlay(second.path).subnet
        routes = subprocess.run(["ip", "-4", "route", "show", "exact", f"{a.address}/32"], capture_output=True,
                                text=True).stdout
        assert f"dev {links[0]}" in routes
    finally:
        first.close()
    # The first run's link and route are gone; the second's are still there.
    assert not Path(f"/sys/class/net/{links[0]}").exists()
    assert links[0] not in egress.links() and links[1] in egress.links()
    assert subprocess.run(["ip", "-4", "route", "show", "exact", f"{a.address}/32"], capture_output=True,
                          text=True).stdout.strip() == ""
    second.close()
    assert not Path(f"/sys/class/net/{links[1]}").exists()
    if not egress.links():  # no other run of the product holds the way out at this moment
        assert not egress.table_exists()
        assert _forwarding(device) == before


class Listener:
    """UDP and TCP sockets of this computer on every address (0.0.0.0), recording what arrives."""

    def __init__(self) -> None:
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("0.0.0.0", 0))
        self.udp.setblocking(False)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("0.0.0.0", 0))
        self.tcp.listen(16)
        self.tcp.setblocking(False)
        self.udp_port = self.udp.getsockname()[1]
        self.tcp_port = self.tcp.getsockname()[1]

    def received(self) -> list[str]:
        got = []
        while True:
            try:
                data, source = self.udp.recvfrom(2048)
            except BlockingIOError:
                break
            got.append(f"udp from {source}: {data[:40]!r}")
        while True:
            try:
                connection, source = self.tcp.accept()
            except BlockingIOError:
                break
            connection.close()
            got.append(f"tcp from {source}")
        return got

    def close(self) -> None:
        self.udp.close()
        self.tcp.close()


# Sends one UDP datagram as a raw Ethernet frame, with any source address, to the gateway's MAC:
# what a node's root can put on its wire whatever its routes and addresses say.
FORGE = r"""
import socket, struct, sys
mac, source, target, port = bytes.fromhex(sys.argv[1].replace(":", "")), sys.argv[2], sys.argv[3], int(sys.argv[4])
def checksum(data):
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
payload = b"forged from a node"
udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(source), socket.inet_aton(target))
ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind(("eth0", 0))
for _ in range(3):
    raw.send(mac + raw.getsockname()[4] + b"\x08\x00" + ip + udp)
"""


def _forge(node: realnodes.NodeHandle, mac: str, source: str, target: str, port: int) -> None:
    sent = realnodes.run_in(node, ["python3", "-c", FORGE, mac, source, target, str(port)])
    assert sent.returncode == 0, sent.stderr


def test_a_node_reaches_nothing_of_this_computer_through_its_way_out(run):
    node = run.boot("a")
    underlay = realnodes.Underlay(run.path)
    link, _ = realnodes.Underlay.uplink(node.bridge)
    mac = Path(f"/sys/class/net/{link}/address").read_text().strip()
    host = _host_address()
    listener = Listener()
    try:
        # Plain connections to this computer's addresses: its gateway, its uplink address.
        for address in (underlay.gateway, host):
            for port in (listener.tcp_port, 22, 5432, 6379):
                assert sh(node, f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}'").returncode != 0, (address, port)
            sh(node, f"echo probe > /dev/udp/{address}/{listener.udp_port}")
        # The route tricks: this computer's loopback through the gateway.
        sh(node, f"ip route add 127.0.0.0/8 via {underlay.gateway} dev eth0 onlink table 100;"
                 " ip rule add to 127.0.0.0/8 lookup 100 pref 10;"
                 f" timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{listener.tcp_port}'")
        # Frames of its own making: to this computer's loopback and addresses, from forged sources
        # (this computer's own, its loopback, a public address, another node's).
        for source in (node.address, "127.0.0.1", host, underlay.gateway, "198.51.100.7", underlay.address(200)):
            for target in ("127.0.0.1", underlay.gateway, host):
                _forge(node, mac, source, target, listener.udp_port)
        time.sleep(1)
        assert listener.received() == []
        # The attempts were seen and dropped, not lost on the way: the node's frames reached its link.
        counters = json.loads(subprocess.run(["ip", "-j", "-s", "link", "show", link], capture_output=True,
                                             text=True).stdout)[0]["stats64"]["rx"]
        assert counters["packets"] >= 40
    finally:
        listener.close()


def test_nodes_of_other_clusters_and_other_runs_are_out_of_reach_through_the_way_out(run, tmp_path):
    a0 = run.boot("a0")
    b0 = run.boot("b0", segment="cluster-b")
    other = Run(tmp_path / "other")
    try:
        c0 = other.boot("c0")
        link, _ = realnodes.Underlay.uplink(a0.bridge)
        mac = Path(f"/sys/class/net/{link}/address").read_text().strip()
        # A listener in each target node, recording every datagram that arrives.
        for target in (b0, c0):
            started = sh(target, "setsid python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                                 " s.bind(('0.0.0.0', 9999)); f=open('/root/got', 'ab', 0);"
                                 " [f.write(s.recvfrom(2048)[0] + b'\\n') for _ in iter(int, 1)]\" "
                                 ">/dev/null 2>&1 </dev/null & sleep 0.5")
            assert started.returncode == 0
            # The listener works: the node's own sends reach it.
            sh(target, "echo self > /dev/udp/127.0.0.1/9999")
        for target in (b0, c0):
            # Routed through the gateway, as the node's default route would take them ...
            sh(a0, f"echo routed > /dev/udp/{target.address}/9999; "
                   f"ip route add {target.address}/32 via {realnodes.Underlay(run.path).gateway} dev eth0; "
                   f"echo routed > /dev/udp/{target.address}/9999; "
                   f"timeout 3 bash -c 'exec 3<>/dev/tcp/{target.address}/22' || true")
            # ... and forged, with the source its own cluster would accept.
            for source in (a0.address, target.address, str(ipaddress.ip_address(target.address) + 1)):
                _forge(a0, mac, source, target.address, 9999)
        time.sleep(1)
        for target in (b0, c0):
            assert sh(target, "cat /root/got").stdout.split() == ["self"]
    finally:
        other.close()


def test_a_host_on_a_private_network_gets_a_table_nft_accepts(monkeypatch):
    """A fleet host whose own network is inside a closed range (a lab host on 10.250.0.0/24, a
    server on 10.x or 192.168.x) closes it once: nft refuses overlapping intervals in a set."""
    monkeypatch.setattr(egress, "_uplink_networks", lambda device: ["10.250.0.0/24", "192.168.7.0/24", "203.0.113.0/24"])
    checked = subprocess.run(["nft", "-c", "-f", "-"], input=egress._ruleset("eth0", ["rcu0"]),
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    ruleset = egress._ruleset("eth0", [])
    assert "10.0.0.0/8" in ruleset and "203.0.113.0/24" in ruleset and "10.250.0.0/24" not in ruleset
