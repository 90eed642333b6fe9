"""Servers operators bring over SSH: the grade a host must pass before its machines go on sale,
onboarding, draining and removing (`manage.py hosts`, docs/nodeops.md "Hosts").

The grade is a list of checks with a verdict each. What the host *is* (kernel, cgroups, GPUs,
free disk…) is read over SSH by one read-only shell script (`FACTS_SCRIPT`: it changes nothing
on the host); what the product *needs* of it is judged here, so the thresholds live in one
place, on the control plane.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import paramiko
from django.db import transaction
from django.utils import timezone
from fabric import Config, Connection

from notifications.kinds import Kind
from notifications.services import notify
from offers.hostruntime import PREPARE_TIMEOUT, HostLogin, RuntimeFailed, SshRuntime
from offers.hostruntime import version as runtime_version
from offers.inventory import operator_addresses
from offers.models import Host, MachineType, PhysicalHost

log = logging.getLogger(__name__)

# Where the host runtime keeps its state (its machines' disks among it), on every host.
HOST_STATE_DIR = "/var/lib/runcrate-host"
MIN_KERNEL = (5, 10)
MIN_PYTHON = (3, 9)
# What the host runtime runs on a host besides Python: namespaces, its sshd per machine, disks.
RUNTIME_TOOLS = ("ip", "nsenter", "unshare", "socat", "sshd", "mount", "losetup", "mkfs.ext4")
CGROUP_CONTROLLERS = ("memory", "pids", "cpu")
# One attempt, bounded: a host that does not answer within this is refused, never waited on.
SSH_TIMEOUT = 10.0
# How long a host's runtime has to answer a health round's question (after its SSH login).
HOST_ANSWER_SECONDS = 10.0
FACTS_TIMEOUT = 60.0
MAX_MACHINES_PER_HOST = 64
# Slot i's machine takes its customers' SSH on port FIRST_MACHINE_PORT + i of its host, which
# the runtime's gateway forwards into the machine (bin/lab-hosts forwards the same ports).
FIRST_MACHINE_PORT = 2200

FACTS_SCRIPT = r"""
export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
echo "hostname=$(hostname)"
echo "kernel=$(uname -r)"
echo "arch=$(uname -m)"
echo "cpus=$(nproc 2>/dev/null)"
echo "memory_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
if out=$(unshare --user true 2>&1); then echo "userns=ok"; else echo "userns=$(echo "$out" | tail -n 1)"; fi
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo "cgroup=v2"; echo "cgroup_controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
else
    echo "cgroup=v1"
    echo "cgroup_controllers=$(for c in memory pids cpu; do [ -d /sys/fs/cgroup/$c ] && printf '%s ' $c; done)"
fi
if [ -d /sys/module/wireguard ]; then echo "wireguard_module=loaded"
elif modinfo wireguard >/dev/null 2>&1; then echo "wireguard_module=available"
else echo "wireguard_module=none"; fi
echo "wireguard_go=$(command -v wireguard-go)"
if command -v nvidia-smi >/dev/null 2>&1; then
    out=$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits 2>&1)
    echo "nvidia_smi=$?"
    echo "$out" | sed 's/^/gpu=/'
else
    echo "nvidia_smi=absent"
fi
d=__STATE_DIR__
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "disk_path=$d"
echo "disk_free_kb=$(df -Pk "$d" | awk 'NR == 2 {print $4}')"
echo "python=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"
missing=""
for tool in __TOOLS__; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
echo "tools_missing=$missing"
echo "runtime_installed=$(cat __STATE_DIR__/VERSION 2>/dev/null)"
""".replace("__STATE_DIR__", HOST_STATE_DIR).replace("__TOOLS__", " ".join(RUNTIME_TOOLS))


class Refused(Exception):
    """The host is not onboarded (or not removed): one line, in an operator's words."""


class Check(TypedDict):
    check: str
    verdict: str  # "pass" or "fail"
    detail: str


@dataclass
class Facts:
    values: dict[str, str]
    gpus: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, output: str) -> Facts:
        values: dict[str, str] = {}
        gpus = []
        for line in output.splitlines():
            key, sep, value = line.partition("=")
            if not sep:
                continue
            if key == "gpu":
                if value.strip():
                    gpus.append(value.strip())
            else:
                values[key.strip()] = value.strip()
        return cls(values, gpus)

    def get(self, key: str) -> str:
        return self.values.get(key, "")


def _version(text: str, parts: int = 2) -> tuple[int, ...] | None:
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not found:
        return None
    return tuple(int(n or 0) for n in found.groups())[:parts]


def _check(name: str, ok: bool, detail: str) -> Check:
    return {"check": name, "verdict": "pass" if ok else "fail", "detail": detail}


def _gb(kb: int) -> str:
    return f"{kb / 1024 / 1024:,.1f} GB"


def grade(facts: Facts, machine_type: MachineType, machines: int, *, disk_for: int | None = None) -> list[Check]:
    """Every check with its verdict; a failing one's detail is the reason the host is refused.
    `disk_for`: how many machines still need their disk free (a regrade of a host whose
    machines run: theirs is taken already); all of them unless given."""
    checks = []
    kernel = facts.get("kernel")
    kernel_version = _version(kernel)
    floor = ".".join(map(str, MIN_KERNEL))
    checks.append(_check(
        "kernel", kernel_version is not None and kernel_version >= MIN_KERNEL,
        f"Linux {kernel}" if kernel_version and kernel_version >= MIN_KERNEL
        else f"kernel {kernel or 'unknown'} is older than {floor} (idmapped mounts, pidfds)",
    ))
    userns = facts.get("userns")
    checks.append(_check(
        "user namespaces", userns == "ok",
        "root can make user namespaces" if userns == "ok" else f"user namespaces are disabled ({userns})",
    ))
    cgroup = facts.get("cgroup")
    controllers = facts.get("cgroup_controllers").split()
    lacking = [c for c in CGROUP_CONTROLLERS if c not in controllers]
    checks.append(_check(
        "cgroups", cgroup in ("v1", "v2") and not lacking,
        f"cgroup {cgroup} with {', '.join(CGROUP_CONTROLLERS)}" if not lacking
        else f"cgroup {cgroup or 'unknown'} lacks the {', '.join(lacking)} controller{'s' if len(lacking) > 1 else ''}",
    ))
    module, wireguard_go = facts.get("wireguard_module"), facts.get("wireguard_go")
    if module in ("loaded", "available"):
        wireguard = _check("WireGuard", True, f"kernel module ({module})")
    else:
        wireguard = _check(
            "WireGuard", bool(wireguard_go),
            f"wireguard-go ({wireguard_go}); no kernel module" if wireguard_go
            else "no WireGuard: neither the kernel module nor wireguard-go is installed",
        )
    checks.append(wireguard)
    checks.append(_gpu_check(facts, machine_type, machines))
    free_kb = int(facts.get("disk_free_kb") or 0)
    needing = machines if disk_for is None else disk_for
    need_kb = machine_type.disk_gb * needing * 1024 * 1024
    where = facts.get("disk_path") or HOST_STATE_DIR
    checks.append(_check(
        "disk", free_kb >= need_kb,
        f"{_gb(free_kb)} free at {where}, {needing} machines need {machine_type.disk_gb * needing:,} GB"
        if free_kb >= need_kb else
        f"too little disk: {_gb(free_kb)} free at {where}, {needing} machines of "
        f"{machine_type.disk_gb:,} GB need {machine_type.disk_gb * needing:,} GB",
    ))
    python = facts.get("python")
    python_version = _version(python)
    missing = facts.get("tools_missing").split()
    installed = facts.get("runtime_installed") or "none yet"
    if python_version is None or python_version < MIN_PYTHON:
        runtime = _check("runtime", False, f"Python {'.'.join(map(str, MIN_PYTHON))} or later is needed "
                                           f"(found {python or 'none'})")
    elif missing:
        runtime = _check("runtime", False, f"the host lacks {', '.join(missing)}")
    else:
        runtime = _check("runtime", True, f"Python {python} and every tool the runtime runs; runtime installed: {installed}")
    checks.append(runtime)
    return checks


def _gpu_check(facts: Facts, machine_type: MachineType, machines: int) -> Check:
    needed = machine_type.gpus_per_machine * machines if machine_type.gives_gpus else 0
    state = facts.get("nvidia_smi")
    if not needed:
        found = f"{len(facts.gpus)} found" if state == "0" else "none checked"
        return _check("GPUs", True, f"this machine type's machines get no GPU ({found})")
    wanted = f"{machines} machines of {machine_type.gpus_per_machine}× {machine_type.gpu.slug} need {needed}"
    if state == "absent":
        return _check("GPUs", False, f"no GPUs: nvidia-smi is not installed; {wanted}")
    if state != "0":
        error = facts.gpus[-1] if facts.gpus else f"exit status {state}"
        return _check("GPUs", False, f"nvidia-smi cannot talk to the driver ({error}); {wanted}")
    if len(facts.gpus) < needed:
        return _check("GPUs", False, f"{len(facts.gpus)} GPUs found, {wanted}")
    driver = facts.gpus[0].rsplit(",", 1)[-1].strip()
    return _check("GPUs", True, f"{len(facts.gpus)} GPUs, driver {driver}; {wanted}")


def gpu_rows(facts: Facts) -> list[dict[str, str]]:
    if facts.get("nvidia_smi") != "0":
        return []
    rows = []
    for line in facts.gpus:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            rows.append(dict(zip(("index", "name", "memory_mb", "driver"), parts, strict=True)))
    return rows


# -- reaching a host ------------------------------------------------------------------------


@dataclass(frozen=True)
class Login:
    address: str
    port: int
    user: str
    key_path: str


def _connection(login: Login) -> Connection:
    # No ~/.ssh/config and no agent: the host is reached with the key the operator named.
    return Connection(
        host=login.address, port=login.port, user=login.user,
        config=Config(overrides={"load_ssh_configs": False}, lazy=True),
        connect_timeout=SSH_TIMEOUT,
        connect_kwargs={
            "key_filename": login.key_path, "look_for_keys": False, "allow_agent": False,
            "banner_timeout": SSH_TIMEOUT, "auth_timeout": SSH_TIMEOUT,
        },
    )


def _why_no_ssh(error: BaseException) -> str:
    if isinstance(error, (socket.timeout, TimeoutError)):
        return f"no answer within {SSH_TIMEOUT:g} s"
    text = str(error)
    # paramiko's words when the connection opened but no SSH server spoke on it in time
    # (a host that hangs, a port forwarded to nothing).
    if "banner" in text or text == "No existing session":
        return f"no SSH server answered within {SSH_TIMEOUT:g} s"
    if isinstance(error, ConnectionRefusedError):
        return "the connection was refused"
    return text or type(error).__name__


def read_facts(login: Login) -> tuple[Facts, str]:
    """The host's facts and its SSH host key ("type base64"), or Refused saying why not."""
    connection = _connection(login)
    try:
        try:
            connection.open()
        except paramiko.AuthenticationException:
            raise Refused(f"no SSH login: the host refused the key {login.key_path} for {login.user}") from None
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise Refused(f"no SSH: {_why_no_ssh(error)}") from None
        transport = connection.client.get_transport()
        assert transport is not None
        key = transport.get_remote_server_key()
        try:
            result = connection.run(
                f"sh -c {shlex.quote(FACTS_SCRIPT)}", hide=True, warn=True, timeout=FACTS_TIMEOUT, in_stream=False,
            )
        except Exception as error:  # noqa: BLE001 — invoke's timeouts and channel errors alike
            raise Refused(f"no SSH: the checks did not finish ({type(error).__name__})") from None
        return Facts.parse(result.stdout), f"{key.get_name()} {key.get_base64()}"
    finally:
        connection.close()


# -- onboarding, draining, removing ---------------------------------------------------------


def _valid_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}", name))


def onboard_host(
    address: str, *, port: int, ssh_key: str, machine_type_id: int, machines: int, user: str = "root", name: str = "",
) -> PhysicalHost:
    """Grade a host over SSH and put `machines` machines of the type on sale, or raise Refused
    naming why (and add nothing)."""
    machine_type = MachineType.objects.select_related("gpu").filter(pk=machine_type_id).first()
    if machine_type is None:
        raise Refused(f"no machine type {machine_type_id}")
    if not 1 <= machines <= MAX_MACHINES_PER_HOST:
        raise Refused(f"--machines is 1 to {MAX_MACHINES_PER_HOST}")
    if not 1 <= port <= 65535:
        raise Refused("--port is 1 to 65535")
    key = Path(ssh_key).expanduser()
    if not key.is_file():
        raise Refused(f"no SSH key at {ssh_key}")
    if name and not _valid_name(name):
        raise Refused(f"{name!r} is not a host name (letters, digits, dots and dashes)")
    if PhysicalHost.objects.filter(address=address, port=port).exists():
        raise Refused(f"{address}:{port} is already onboarded")
    login = Login(address, port, user, str(key.resolve()))
    facts, host_key = read_facts(login)
    name = name or facts.get("hostname").split(".")[0]
    if not _valid_name(name):
        raise Refused(f"the host calls itself {name!r}, not a usable name: give one with --name")
    checks = grade(facts, machine_type, machines)
    failing = [c for c in checks if c["verdict"] != "pass"]
    if failing:
        raise Refused(failing[0]["detail"])
    checks = [*checks[:-1], install_runtime(HostLogin(name, address, port, user, login.key_path, host_key))]
    with transaction.atomic():
        if PhysicalHost.objects.filter(name=name).exists():
            raise Refused(f"a host named {name} is already onboarded: give another with --name")
        host = PhysicalHost.objects.create(
            name=name, address=address, port=port, ssh_user=user, ssh_key_path=login.key_path, host_key=host_key,
            state=PhysicalHost.State.ON_SALE, grade=checks, graded_at=timezone.now(), gpus=gpu_rows(facts),
            graded_because="onboarding", runtime_version=runtime_version(),
        )
        Host.objects.bulk_create([
            Host(machine_type=machine_type, physical_host=host, name=f"{name}-{i}", address=address,
                 port=FIRST_MACHINE_PORT + i)
            for i in range(machines)
        ])
    return host


def install_runtime(login: HostLogin) -> Check:
    """Install this version of the host runtime, prepare the host (its machine image, its
    state) and ask the runtime whether machines can run there: the grade's runtime check, or
    Refused saying why not."""
    runtime = SshRuntime(login)
    try:
        runtime.install()
        runtime.call("prepare", timeout=PREPARE_TIMEOUT)
        answer = runtime.call("check")
    except RuntimeFailed as error:
        raise Refused(f"the host runtime could not be installed: {error}") from None
    if not answer.get("machines"):
        raise Refused(f"the host cannot run machines: {answer.get('why')}")
    return _check("runtime", True, f"runtime {answer['version']} on Python {answer['python']}: {answer['why']}")


def login_for(host: PhysicalHost) -> HostLogin:
    return HostLogin(name=host.name, address=host.address, port=host.port, user=host.ssh_user,
                     key_path=host.ssh_key_path, host_key=host.host_key)


def runtime_for(host: PhysicalHost) -> SshRuntime:
    """The host runtime on the host, at the version this control plane ships."""
    return SshRuntime(login_for(host))


# -- grading again ---------------------------------------------------------------------------

# A host on sale or draining is graded again this often, and at once when its runtime or its
# GPU driver changes (watch_hosts looks every HOST_WATCH_SECONDS, settings).
REGRADE_EVERY = dt.timedelta(days=1)
# Slots that hold or can hold a machine (a removed host's old slots are detached, not counted).
COUNTED_SLOTS = (Host.State.FREE, Host.State.RESERVED, Host.State.QUARANTINED)


def _drivers(gpus: list[dict[str, str]]) -> str:
    return ", ".join(sorted({gpu.get("driver", "") for gpu in gpus if gpu.get("driver")})) or "none"


def why_grade_again(host: PhysicalHost, facts: Facts, now: dt.datetime) -> str:
    """Why the host's grade must run again now ("" when it need not)."""
    if facts.get("runtime_installed") != runtime_version():
        return f"a new runtime version ({facts.get('runtime_installed') or 'none'} → {runtime_version()})"
    before, after = _drivers(host.gpus), _drivers(gpu_rows(facts))
    if before != after:
        return f"the GPU driver changed ({before} → {after})"
    if host.graded_at is None or now - host.graded_at >= REGRADE_EVERY:
        return "the daily grade"
    return ""


def regrade_host(host: PhysicalHost, facts: Facts, because: str) -> list[Check]:
    """Grade the host again (installing this control plane's runtime if it is not the one
    there) and record it. A host on sale whose grade fails goes to draining and the operators
    are emailed: its running machines keep running, no new one lands there."""
    slots = list(Host.objects.select_related("machine_type__gpu").filter(physical_host=host, state__in=COUNTED_SLOTS))
    if not slots:
        return []
    machine_type = slots[0].machine_type
    free = sum(slot.state == Host.State.FREE for slot in slots)
    checks = grade(facts, machine_type, len(slots), disk_for=free)
    runtime = next(check for check in checks if check["check"] == "runtime")
    if runtime["verdict"] == "pass":
        try:
            checks = [*checks[:-1], install_runtime(login_for(host))]
        except Refused as refused:
            checks = [*checks[:-1], _check("runtime", False, str(refused))]
    failing = [check for check in checks if check["verdict"] != "pass"]
    with transaction.atomic():
        locked = PhysicalHost.objects.select_for_update().get(pk=host.pk)
        fell = locked.grade_passes and bool(failing)
        PhysicalHost.objects.filter(pk=host.pk).update(
            grade=checks, graded_at=timezone.now(), graded_because=because[:120], gpus=gpu_rows(facts),
            runtime_version=facts.get("runtime_installed") if failing and runtime["verdict"] != "pass"
            else runtime_version(),
        )
        drained = bool(failing) and PhysicalHost.objects.filter(
            pk=host.pk, state=PhysicalHost.State.ON_SALE).update(state=PhysicalHost.State.DRAINING)
        if fell or drained:
            notify(
                Kind.HOST_GRADE_FELL, recipients=operator_addresses(),
                context={"host_id": host.pk, "why": because, "failing": failing},
                dedupe_key=f"host-grade-fell:{host.pk}:{timezone.now().isoformat()}",
            )
    if failing:
        log.warning("host %s failed its grade (%s): %s", host.name, because, "; ".join(c["detail"] for c in failing))
    return checks


def watch_hosts(now: dt.datetime | None = None) -> dict[str, str]:
    """Beat: read every serving host's facts (one read-only SSH command each) and grade again
    those due: daily, and at once after their runtime or GPU driver changed. A host that does
    not answer is left to the health rounds, which mark it down. Returns {host: why} graded."""
    now = now or timezone.now()
    graded = {}
    for host in PhysicalHost.objects.filter(state__in=(PhysicalHost.State.ON_SALE, PhysicalHost.State.DRAINING)):
        try:
            facts, _ = read_facts(Login(host.address, host.port, host.ssh_user, host.ssh_key_path))
        except Refused as refused:
            log.info("host %s not graded: %s", host.name, refused)
            continue
        because = why_grade_again(host, facts, now)
        if because:
            regrade_host(host, facts, because)
            graded[host.name] = because
    return graded


def return_host_to_sale(name: str) -> PhysicalHost:
    """An operator puts a draining host back on sale; refused unless its last grade passes."""
    host = find_host(name)
    if host.state != PhysicalHost.State.DRAINING:
        raise Refused(f"{name} is {host.get_state_display().lower()}, not draining")
    if not host.grade_passes:
        failing = ", ".join(c["check"] for c in host.grade if c.get("verdict") != "pass") or "no grade"
        raise Refused(f"{name} does not pass its grade ({failing}): fix it and let it be graded again")
    PhysicalHost.objects.filter(pk=host.pk, state=PhysicalHost.State.DRAINING).update(state=PhysicalHost.State.ON_SALE)
    host.refresh_from_db()
    return host


def find_host(name: str) -> PhysicalHost:
    host = PhysicalHost.objects.filter(name=name).first()
    if host is None:
        raise Refused(f"no host named {name} (manage.py hosts list shows them)")
    return host


def drain_host(name: str) -> PhysicalHost:
    """No new machine lands on the host; those running keep running."""
    host = find_host(name)
    PhysicalHost.objects.filter(pk=host.pk).exclude(state=PhysicalHost.State.DOWN).update(
        state=PhysicalHost.State.DRAINING
    )
    host.refresh_from_db()
    return host


def remove_host(name: str) -> None:
    """Forget a host whose machines have all ended. Slots that once ran a cluster's machine stay,
    out of sale and detached, as that cluster's history."""
    with transaction.atomic():
        host = PhysicalHost.objects.select_for_update().filter(name=name).first()
        if host is None:
            raise Refused(f"no host named {name} (manage.py hosts list shows them)")
        # Every slot locked: a reservation running now either took its slot first (and is
        # counted below) or skips it (SKIP LOCKED) and cannot land here any more.
        slots = list(Host.objects.select_for_update().filter(physical_host=host))
        running = sum(slot.state == Host.State.RESERVED for slot in slots)
        if running:
            raise Refused(
                f"{name} still runs {running} machine{'s' if running > 1 else ''}: "
                f"drain it (manage.py hosts drain {name}) and remove it once they have ended"
            )
        with_history = set(
            Host.objects.filter(pk__in=[s.pk for s in slots], nodes__isnull=False).values_list("pk", flat=True)
        )
        for slot in slots:
            if slot.pk in with_history:
                Host.objects.filter(pk=slot.pk).update(
                    state=Host.State.DISABLED, physical_host=None, name=f"{slot.name}~removed-{host.pk}"[:100],
                )
        Host.objects.filter(physical_host=host).delete()
        host.delete()
