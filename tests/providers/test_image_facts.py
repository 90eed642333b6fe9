"""What an offer of real local machines says of its images is what the built images are: each
built image is listed, and its OS, Python and PyTorch (with the CUDA it was built for) are those
the image's own interpreter reports, run in the image (read-only: no bytecode is written)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusters.images import default_image
from clusters.providers.local import images, realnodes
from clusters.providers.local.provider import HostRuntimeProvider
from tests.factories import MachineTypeFactory

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap is not installed (make host)"),
    pytest.mark.django_db,
]

# Run by the image's own python3, in the image: its version, and PyTorch's where it has one.
REPORT = """
import platform
print(platform.python_version())
try:
    import torch
except ImportError:
    print("-", "-")
else:
    print(torch.__version__.split("+")[0], torch.version.cuda or "-")
"""


def in_image(rootfs: Path, *command: str) -> str:
    return subprocess.run(["chroot", str(rootfs), *command], capture_output=True, text=True, check=True,
                          timeout=300).stdout


def test_the_local_offer_lists_the_built_images_with_the_facts_they_report_themselves(settings):
    base = images.ensure("base", say=lambda line: print(line, file=sys.stderr, flush=True))
    settings.LOCAL_NODES = "namespaces"
    offered = HostRuntimeProvider().images(MachineTypeFactory(provider="local"))
    built = [name for name in images.IMAGES if images.cached(name) is not None]
    assert [facts.name for facts in offered] == built and "base" in built
    assert default_image(offered) == ("pytorch" if "pytorch" in built else "base")
    for facts in offered:
        rootfs = images.cached(facts.name)
        assert rootfs is not None
        python, pytorch, cuda = in_image(rootfs, "/usr/bin/python3", "-I", "-B", "-c", REPORT).split()
        release = in_image(rootfs, "/bin/sh", "-c", '. /etc/os-release && echo "$VERSION_ID ($VERSION_CODENAME)"')
        assert facts.os == f"Debian {release.strip()}"
        assert facts.python == python
        assert (facts.pytorch or "-", facts.cuda or "-") == (pytorch, cuda)
    assert offered[0].pytorch is None and offered[0].name == "base" and images.cached("base") == base
