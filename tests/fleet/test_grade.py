"""The grade from a host's facts: what each check says, pass or fail, in an operator's words.
The facts are what FACTS_SCRIPT prints on a host (test_hosts.py reads them from lab hosts)."""

from __future__ import annotations

import pytest

from offers.fleet import Facts, gpu_rows, grade
from tests.factories import MachineTypeFactory

pytestmark = pytest.mark.django_db

GOOD = """\
hostname=gpu-7.fra
kernel=6.1.0-26-amd64
userns=ok
cgroup=v2
cgroup_controllers=cpuset cpu io memory hugetlb pids rdma misc
wireguard_module=available
wireguard_go=
nvidia_smi=0
gpu=0, NVIDIA H100 80GB HBM3, 81559, 550.90.07
gpu=1, NVIDIA H100 80GB HBM3, 81559, 550.90.07
gpu=2, NVIDIA H100 80GB HBM3, 81559, 550.90.07
gpu=3, NVIDIA H100 80GB HBM3, 81559, 550.90.07
disk_path=/var/lib
disk_free_kb=4294967296
python=3.11.2
tools_missing=
runtime_installed=
"""


def verdicts(output: str, machines: int = 2, **machine_type: object) -> dict[str, tuple[str, str]]:
    kind = MachineTypeFactory(**{"provider": "ssh", "gpus_per_machine": 2, "disk_gb": 500, **machine_type})
    return {c["check"]: (c["verdict"], c["detail"]) for c in grade(Facts.parse(output), kind, machines)}


def test_a_gpu_host_with_enough_of_everything_passes_every_check():
    checks = verdicts(GOOD)
    assert {name: verdict for name, (verdict, _) in checks.items()} == {
        "kernel": "pass", "user namespaces": "pass", "cgroups": "pass", "WireGuard": "pass", "GPUs": "pass",
        "disk": "pass", "runtime": "pass",
    }
    assert checks["GPUs"][1] == "4 GPUs, driver 550.90.07; 2 machines of 2× H100 need 4"
    assert checks["cgroups"][1] == "cgroup v2 with memory, pids, cpu"
    assert gpu_rows(Facts.parse(GOOD))[3] == {
        "index": "3", "name": "NVIDIA H100 80GB HBM3", "memory_mb": "81559", "driver": "550.90.07",
    }


def test_fewer_gpus_than_the_machines_need_fails():
    assert verdicts(GOOD, machines=3)["GPUs"] == ("fail", "4 GPUs found, 3 machines of 2× H100 need 6")


def test_a_driver_nvidia_smi_cannot_talk_to_fails_with_its_words():
    broken = GOOD.replace("nvidia_smi=0", "nvidia_smi=9").split("gpu=0")[0] + (
        "gpu=NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        "disk_path=/var/lib\ndisk_free_kb=4294967296\npython=3.11.2\ntools_missing=\n"
    )
    verdict, detail = verdicts(broken)["GPUs"]
    assert verdict == "fail"
    assert detail.startswith("nvidia-smi cannot talk to the driver (NVIDIA-SMI has failed because it couldn't")
    assert gpu_rows(Facts.parse(broken)) == []


def test_a_machine_type_without_gpus_does_not_ask_for_them():
    no_gpus = GOOD.replace("nvidia_smi=0", "nvidia_smi=absent")
    assert verdicts(no_gpus, provider="simulated")["GPUs"][0] == "pass"
    assert verdicts(no_gpus)["GPUs"] == (
        "fail", "no GPUs: nvidia-smi is not installed; 2 machines of 2× H100 need 4",
    )


@pytest.mark.parametrize(("change", "check", "detail"), [
    (("kernel=6.1.0-26-amd64", "kernel=4.19.0-27-amd64"), "kernel",
     "kernel 4.19.0-27-amd64 is older than 5.10 (idmapped mounts, pidfds)"),
    (("userns=ok", "userns=unshare: unshare failed: Operation not permitted"), "user namespaces",
     "user namespaces are disabled (unshare: unshare failed: Operation not permitted)"),
    (("cpuset cpu io memory hugetlb pids", "cpuset cpu io hugetlb"), "cgroups",
     "cgroup v2 lacks the memory, pids controllers"),
    (("wireguard_module=available", "wireguard_module=none"), "WireGuard",
     "no WireGuard: neither the kernel module nor wireguard-go is installed"),
    (("disk_free_kb=4294967296", "disk_free_kb=524288000"), "disk",
     "too little disk: 500.0 GB free at /var/lib, 2 machines of 500 GB need 1,000 GB"),
    (("tools_missing=", "tools_missing= socat mkfs.ext4"), "runtime", "the host lacks socat, mkfs.ext4"),
    (("python=3.11.2", "python="), "runtime", "Python 3.9 or later is needed (found none)"),
])
def test_each_shortfall_fails_its_check_with_the_reason(change, check, detail):
    before, after = change
    assert before in GOOD
    checks = verdicts(GOOD.replace(before, after))
    assert checks[check] == ("fail", detail)
    assert sum(verdict == "fail" for verdict, _ in checks.values()) == 1


def test_wireguard_go_stands_in_for_a_missing_kernel_module():
    facts = GOOD.replace("wireguard_module=available", "wireguard_module=none").replace(
        "wireguard_go=", "wireguard_go=/usr/bin/wireguard-go"
    )
    assert verdicts(facts)["WireGuard"] == ("pass", "wireguard-go (/usr/bin/wireguard-go); no kernel module")
