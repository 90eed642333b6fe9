"""An image's PyTorch facts are read from the files a real PyTorch wheel installs: the release
without its local part, and the CUDA a CUDA build names (None for a CPU build). The wheels are
the ones this computer keeps on disk (a CPU build and a CUDA build of PyTorch)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from clusters.providers.local import image_facts

WHEELS = {"cpu": "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
          "cuda": "/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"}


def install_metadata(wheel: str, rootfs: Path) -> None:
    """What pip leaves of the wheel that the facts read: its .dist-info and torch/version.py, in
    the system Python's site-packages of an image."""
    site = rootfs / "usr/local/lib/python3.11/dist-packages"
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name == "torch/version.py" or (".dist-info/" in name and name.endswith("/METADATA")):
                archive.extract(name, site)


@pytest.mark.parametrize(("build", "release", "cuda"), [("cpu", "2.13.0", None), ("cuda", "2.14.1", "13.0")])
def test_pytorch_and_its_cuda_are_read_from_what_the_wheel_installs(tmp_path, build, release, cuda):
    assert Path(WHEELS[build]).exists(), f"{WHEELS[build]} is not on this computer"
    install_metadata(WHEELS[build], tmp_path)
    facts = image_facts.read(f"pytorch-{build}", tmp_path)
    assert (facts.pytorch, facts.cuda) == (release, cuda)
    assert facts.summary.endswith(f"PyTorch {release} " + (f"(CUDA {cuda})" if cuda else "(CPU)"))


def test_an_image_without_pytorch_has_none(tmp_path):
    (tmp_path / "usr/lib/python3/dist-packages").mkdir(parents=True)
    assert (image_facts.read("base", tmp_path).pytorch, image_facts.read("base", tmp_path).cuda) == (None, None)
