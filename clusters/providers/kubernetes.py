"""Which drivers' machines run the real Kubernetes install, and the manifests' pins it needs."""

from __future__ import annotations

from django.conf import settings

# Drivers whose machines run install_kubernetes.sh's real branch (kubeadm, flannel and the
# NVIDIA device plugin); `local` machines get the kubelet stand-in, `simulated` runs no script.
REAL_KUBERNETES = frozenset({"ssh"})


def kubernetes_pins() -> dict[str, str]:
    """What install_kubernetes.sh fetches on real machines: each manifest by version and the
    sha256 it must have (settings.KUBERNETES_*; empty checksums make the script refuse)."""
    return {
        "RUNCRATE_FLANNEL_VERSION": settings.KUBERNETES_FLANNEL_VERSION,
        "RUNCRATE_FLANNEL_SHA256": settings.KUBERNETES_FLANNEL_SHA256,
        "RUNCRATE_DEVICE_PLUGIN_VERSION": settings.KUBERNETES_DEVICE_PLUGIN_VERSION,
        "RUNCRATE_DEVICE_PLUGIN_SHA256": settings.KUBERNETES_DEVICE_PLUGIN_SHA256,
    }


def kubernetes_unpinned(provider: str) -> bool:
    """Kubernetes cannot be installed on this driver's machines yet: they run the real install
    and an operator has not set both manifests' checksums (docs/nodeops.md)."""
    pins = kubernetes_pins()
    return provider in REAL_KUBERNETES and not (pins["RUNCRATE_FLANNEL_SHA256"] and pins["RUNCRATE_DEVICE_PLUGIN_SHA256"])
