"""A node's way out: NAT through this computer, in one nftables table of the product's own
(docs/nodeops.md, "Egress"; docs/security.md, "A node's way out").

Each cluster's bridge gets an uplink: a veth pair whose switch end is a port of the bridge and
whose host end (`rcu<id>`, a *node link*) sits in this computer's namespace holding the
cluster's gateway address. Nodes route by default through it; this computer masquerades what
they send out of its own uplink (the interface of its default route), and nothing else:

- IPv4 forwarding is switched on per input interface, never for `all`: Linux decides whether a
  packet received on an interface may be forwarded by that interface's own
  `net.ipv4.conf.<dev>.forwarding` (ip_route_input_slow checks the *input* device). Node links
  need it (node → world) and the uplink needs it (the replies, world → node); nothing else does.
- The table's forward chain drops by default: only connections that node links open out of
  the uplink pass, and their replies back. Nothing passes between node links (clusters), and
  nothing the uplink receives is forwarded anywhere else: switching on the uplink's forwarding
  does not make this computer a router for its own network.
- Its input chain drops everything node links send to this computer itself (the gateway
  address, the uplink's address, 127.0.0.0/8: its services, the control plane).
- Destinations on the uplink's own networks and private, link-local (cloud metadata) and
  shared ranges are closed, except this computer's resolvers (port 53) and its proxy.
- A packet whose source address is not one its node link routes back to is dropped on
  arrival (a reverse-path check), so a node can forge neither another node's address nor this
  computer's.

The node links that hold the table are registered under the runtime's registry (a folder per
link): the table is rewritten from that list whenever it changes, links whose interface is gone
(a run that was killed) are dropped from it, and the last one out removes the table and puts the
uplink's forwarding back as it was. Nothing here outlives a reboot: neither the table nor the
sysctl values are written anywhere persistent.

Nothing here is Django: it is part of the host runtime.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

TABLE = "runcrate_egress"
# A cluster that spans hosts: each node's WireGuard (its port 51820) is reached at its host's
# address and a port of FORWARDED_PORTS that the host forwards to it, in a table of its own
# (`forward_wireguard`). The egress table lets exactly that through: what the host forwards to
# a node's WireGuard port, and what a node's WireGuard port sends to another host's forwarded
# ports (docs/nodeops.md, "A cluster spans hosts").
WIREGUARD_TABLE = "runcrate_wireguard"
WIREGUARD_PORT = 51820
FORWARDED_PORTS = "2200-2263"
# Every underlay of every run is drawn from here (realnodes.Underlay): only these sources are
# masqueraded, and a node link accepts no other.
NODE_SUPERNET = "172.16.0.0/12"
# Where a node may never go through its way out, whatever its routes say: the uplink's own
# networks are added to these at run time.
CLOSED_NETWORKS = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/3",
)


def _registry() -> Path:
    """The node links of this network namespace: the table is the namespace's own, and hosts
    that share a kernel and its registry (lab hosts) each have their own namespace."""
    # Read at call time: tests and the runtime point HOST_REGISTRY elsewhere through realnodes.
    from .realnodes import HOST_REGISTRY

    return HOST_REGISTRY / "egress-netns" / str(os.stat("/proc/self/ns/net").st_ino)


class EgressError(RuntimeError):
    """The way out could not be set up; the message says why (for the operator's log)."""


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    folder = _registry()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".egress.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(command: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise EgressError(f"{' '.join(command[:3])}: {result.stderr.strip()}")
    return result


def available() -> tuple[bool, str]:
    """Whether this computer can give nodes a way out, and why not."""
    if shutil.which("nft") is None:
        return False, "nft is not installed (bin/host-setup installs nftables)"
    if uplink() is None:
        return False, "this computer has no default route"
    return True, "NAT through " + (uplink() or "")


def uplink() -> str | None:
    """The interface of this computer's IPv4 default route (its way out), or None."""
    shown = _run(["ip", "-j", "-4", "route", "show", "default"], check=False)
    with contextlib.suppress(ValueError, IndexError, KeyError):
        return str(json.loads(shown.stdout or "[]")[0]["dev"])
    return None


def _uplink_networks(device: str) -> list[str]:
    shown = _run(["ip", "-j", "-4", "addr", "show", "dev", device], check=False)
    networks = []
    with contextlib.suppress(ValueError):
        for link in json.loads(shown.stdout or "[]"):
            for address in link.get("addr_info", []):
                networks.append(str(ipaddress.ip_interface(f"{address['local']}/{address['prefixlen']}").network))
    return networks


def resolvers(path: Path = Path("/etc/resolv.conf")) -> list[str]:
    """This computer's IPv4 name servers a node can reach: a stub on this computer's loopback
    (systemd-resolved's 127.0.0.53) is not one; its upstream servers are."""
    found: list[str] = []
    for candidate in (path, Path("/run/systemd/resolve/resolv.conf")):
        with contextlib.suppress(OSError):
            for line in candidate.read_text().splitlines():
                words = line.split()
                if len(words) >= 2 and words[0] == "nameserver":
                    with contextlib.suppress(ValueError):
                        address = ipaddress.ip_address(words[1])
                        if address.version == 4 and not address.is_loopback and str(address) not in found:
                            found.append(str(address))
        if found:
            break
    return found


@dataclass(frozen=True)
class Proxy:
    """This computer's web proxy, as apt and pip are told of it ("" where it has none)."""

    http: str = ""
    https: str = ""
    no_proxy: str = ""

    @classmethod
    def of_this_computer(cls, environ: dict[str, str] | None = None) -> Proxy:
        """From the runtime's environment (`http_proxy`, `https_proxy`, `no_proxy`, either case),
        else apt's own settings (`Acquire::http::Proxy`). A proxy on this computer's loopback
        means nothing in a node (its loopback is its own) and is left out."""
        environ = dict(os.environ if environ is None else environ)

        def env(name: str) -> str:
            return environ.get(name) or environ.get(name.upper()) or ""

        http, https = env("http_proxy"), env("https_proxy")
        if not (http or https) and shutil.which("apt-config"):
            dumped = _run(["apt-config", "dump"], check=False).stdout
            for key, value in re.findall(r'^Acquire::(https?)::Proxy "([^"]*)";$', dumped, re.MULTILINE):
                if key == "http":
                    http = value
                else:
                    https = value
        return cls(http=_reachable(http), https=_reachable(https), no_proxy=env("no_proxy"))

    def endpoints(self) -> list[tuple[str, int]]:
        """(IPv4 address, port) of each proxy, for the table's open destinations."""
        found = []
        for url in (self.http, self.https):
            if not url:
                continue
            parts = urlsplit(url if "://" in url else f"http://{url}")
            with contextlib.suppress(OSError, ValueError):
                address = _run(["getent", "ahostsv4", parts.hostname or ""], check=False).stdout.split()[0]
                found.append((address, parts.port or 80))
        return found

    def node_files(self) -> dict[str, str]:
        """What a node's /etc gets so that apt, pip and a login shell use the proxy."""
        if not (self.http or self.https):
            return {}
        apt = "".join(f'Acquire::{scheme}::Proxy "{url}";\n'
                      for scheme, url in (("http", self.http), ("https", self.https)) if url)
        pip = f"[global]\nproxy = {self.https or self.http}\n"
        environment = "".join(f"{name}={value}\n" for name, value in (
            ("http_proxy", self.http), ("https_proxy", self.https), ("no_proxy", self.no_proxy),
            ("HTTP_PROXY", self.http), ("HTTPS_PROXY", self.https), ("NO_PROXY", self.no_proxy)) if value)
        return {"/etc/apt/apt.conf.d/80runcrate-proxy": apt, "/etc/pip.conf": pip, "/etc/environment": environment}


def _reachable(url: str) -> str:
    host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    if not url or host == "localhost":
        return ""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return ""
    return url


def node_files(image_root: Path) -> dict[str, str]:
    """What a node's /etc gets from this computer for its way out: its resolvers, its proxy,
    and the certificate authorities this computer added to Debian's (its
    /usr/local/share/ca-certificates: a way out that inspects TLS signs with one of them),
    both as files `update-ca-certificates` keeps and appended to the image's bundle."""
    files = {}
    names = resolvers()
    if names:
        files["/etc/resolv.conf"] = "".join(f"nameserver {address}\n" for address in names)
    files.update(Proxy.of_this_computer().node_files())
    local = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))
    if local:
        added = {}
        for path in local:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                added[f"/usr/local/share/ca-certificates/{path.name}"] = path.read_text()
        if added:
            bundle = (image_root / "etc/ssl/certs/ca-certificates.crt")
            with contextlib.suppress(OSError):
                text = bundle.read_text()
                files["/etc/ssl/certs/ca-certificates.crt"] = text + "".join(
                    cert if cert.endswith("\n") else cert + "\n" for cert in added.values())
            files.update(added)
    return files


def _ruleset(device: str, links: list[str]) -> str:
    """The whole table, from scratch: `nft -f` replaces it in one transaction."""
    # Collapsed: an uplink network inside a closed range (a host on 10.x) would be an interval
    # that overlaps another, which nft refuses.
    closed = [str(network) for network in ipaddress.collapse_addresses(
        ipaddress.IPv4Network(network) for network in {*CLOSED_NETWORKS, *_uplink_networks(device)})]
    services = [(address, 53) for address in resolvers()] + Proxy.of_this_computer().endpoints()
    opened = ", ".join(f"{address} . {protocol} . {port}" for address, port in services for protocol in ("tcp", "udp"))
    quoted = ", ".join(json.dumps(link) for link in links)
    return f"""
table inet {TABLE} {{}}
delete table inet {TABLE}
table inet {TABLE} {{
    set node_links {{ type ifname; {f"elements = {{ {quoted} }}" if links else ""} }}
    set open {{ type ipv4_addr . inet_proto . inet_service; {f"elements = {{ {opened} }}" if opened else ""} }}
    set closed {{ type ipv4_addr; flags interval; elements = {{ {", ".join(closed)} }} }}
    chain prerouting {{
        type filter hook prerouting priority raw; policy accept;
        iifname @node_links meta nfproto ipv6 drop
        iifname @node_links ip saddr != {NODE_SUPERNET} drop
        iifname @node_links fib saddr type local drop
        iifname @node_links fib saddr . iif oif missing drop
    }}
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname @node_links drop
    }}
    chain forward {{
        type filter hook forward priority filter; policy drop;
        iifname {json.dumps(device)} oifname @node_links ct state established,related accept
        iifname @node_links oifname {json.dumps(device)} ct state invalid drop
        iifname {json.dumps(device)} oifname @node_links ct status dnat udp dport {WIREGUARD_PORT} accept
        iifname @node_links oifname {json.dumps(device)} udp sport {WIREGUARD_PORT} udp dport {FORWARDED_PORTS} accept
        iifname @node_links oifname {json.dumps(device)} ip daddr . meta l4proto . th dport @open accept
        iifname @node_links oifname {json.dumps(device)} ip daddr @closed drop
        iifname @node_links oifname {json.dumps(device)} accept
    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        oifname {json.dumps(device)} ip saddr {NODE_SUPERNET} masquerade
    }}
}}
"""


def _sysctl(device: str, name: str, value: str | None = None) -> str:
    path = Path("/proc/sys/net/ipv4/conf", device, name)
    if value is not None:
        path.write_text(value)
    return path.read_text().strip()


def _links_up(folder: Path) -> list[str]:
    """The registered node links whose interface still exists (the others' runs are gone)."""
    links = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        # Asked of this namespace (/sys shows the namespace that mounted it, not always ours).
        try:
            socket.if_nametoindex(entry.name)
        except OSError:
            entry.unlink(missing_ok=True)
        else:
            links.append(entry.name)
    return links


def _rewrite(folder: Path) -> None:
    """The table and the uplink's forwarding, for the node links registered now (under the lock)."""
    links = _links_up(folder)
    state_file = folder / ".uplink.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    if not links:
        # The table goes after the forwarding it guards is back off.
        if state:
            with contextlib.suppress(OSError):
                _sysctl(state["device"], "forwarding", state["forwarding_before"])
            state_file.unlink()
        _run(["nft", "delete", "table", "inet", TABLE], check=False)
        return
    device = uplink()
    if device is None:
        raise EgressError("this computer has no default route")
    if state and state["device"] != device:  # the default route moved: the old uplink goes back
        with contextlib.suppress(OSError):
            _sysctl(state["device"], "forwarding", state["forwarding_before"])
        state = {}
    # The table first: from here on the uplink forwards only what it lets through.
    _run(["nft", "-f", "-"], stdin=_ruleset(device, links))
    if not state:
        state = {"device": device, "forwarding_before": _sysctl(device, "forwarding")}
        state_file.write_text(json.dumps(state))
    _sysctl(device, "forwarding", "1")


def open_link(link: str) -> None:
    """Register a node link (its interface exists, in this computer's namespace) and let it out:
    forwarding on it alone, a strict reverse-path filter, no IPv6."""
    _sysctl(link, "rp_filter", "1")
    _sysctl(link, "forwarding", "1")
    with contextlib.suppress(OSError):
        Path("/proc/sys/net/ipv6/conf", link, "disable_ipv6").write_text("1")
    with _locked():
        folder = _registry()
        (folder / link).touch()
        _rewrite(folder)


def close_links(links: list[str]) -> None:
    """Forget node links (their interfaces are deleted by the caller, or already gone)."""
    with _locked():
        folder = _registry()
        for link in links:
            (folder / link).unlink(missing_ok=True)
        _rewrite(folder)


def links() -> list[str]:
    """The node links registered now (tests, leftovers)."""
    folder = _registry()
    return sorted(entry.name for entry in folder.iterdir() if not entry.name.startswith(".")) if folder.is_dir() else []


def table_exists() -> bool:
    return _run(["nft", "list", "table", "inet", TABLE], check=False).returncode == 0


# -- a cluster that spans hosts: each node's WireGuard at its host's address ----------------------


def host_address() -> str | None:
    """This host's IPv4 address on its default route's interface: where the other hosts of its
    fleet send its machines' WireGuard traffic (None without a default route)."""
    device = uplink()
    if device is None:
        return None
    shown = _run(["ip", "-j", "-4", "addr", "show", "dev", device, "scope", "global"], check=False)
    with contextlib.suppress(ValueError, IndexError, KeyError):
        return str(json.loads(shown.stdout or "[]")[0]["addr_info"][0]["local"])
    return None


def _forwards_dir(run_dir: Path) -> Path:
    return run_dir / "wireguard-forwards"


def forwarded(run_dir: Path, key: str) -> str:
    """The machine `key`'s WireGuard endpoint as other hosts reach it ("address:port"), or ""."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        record = json.loads((_forwards_dir(run_dir) / f"{key}.json").read_text())
        return f"{record['host']}:{record['port']}"
    return ""


def forward_wireguard(run_dir: Path, key: str, node_address: str, port: int) -> str:
    """Forward UDP `port` of this host's address to the machine's WireGuard (node_address:51820),
    and send what that WireGuard sends to other hosts from the same address and port: the
    machine's endpoint for its peers on other hosts is "host:port" both ways. Returns it."""
    host = host_address()
    if host is None:
        raise EgressError("this host has no default route: its machines cannot be reached from other hosts")
    folder = _forwards_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".wireguard-forwards.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = folder / f"{key}.json"
        record.with_suffix(".tmp").write_text(json.dumps({"host": host, "port": port, "node": node_address}))
        record.with_suffix(".tmp").replace(record)
        _rewrite_forwards(folder)
    return f"{host}:{port}"


def unforward_wireguard(run_dir: Path, key: str) -> None:
    folder = _forwards_dir(run_dir)
    if not (folder / f"{key}.json").exists():
        return
    with open(run_dir / ".wireguard-forwards.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (folder / f"{key}.json").unlink(missing_ok=True)
        _rewrite_forwards(folder)


def _rewrite_forwards(folder: Path) -> None:
    """The forwarding table from the records (under the lock); gone with the last one."""
    records = []
    for path in sorted(folder.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    if not records:
        _run(["nft", "delete", "table", "inet", WIREGUARD_TABLE], check=False)
        return
    device = uplink()
    if device is None:
        raise EgressError("this host has no default route")
    dev = json.dumps(device)
    inbound = "".join(f"        iifname {dev} ip daddr {r['host']} udp dport {int(r['port'])} "
                      f"dnat ip to {r['node']}:{WIREGUARD_PORT}\n" for r in records)
    outbound = "".join(f"        oifname {dev} ip saddr {r['node']} udp sport {WIREGUARD_PORT} "
                       f"snat ip to {r['host']}:{int(r['port'])}\n" for r in records)
    # Before the egress table's masquerade (srcnat): a connection is translated by the first
    # NAT rule that matches it, so a node's WireGuard keeps its forwarded port on the way out.
    _run(["nft", "-f", "-"], stdin=f"""
table inet {WIREGUARD_TABLE} {{}}
delete table inet {WIREGUARD_TABLE}
table inet {WIREGUARD_TABLE} {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
{inbound}    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat - 10; policy accept;
{outbound}    }}
}}
""")
