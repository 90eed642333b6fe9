"""Provider drivers by name. New drivers register here."""

from __future__ import annotations

from importlib import import_module

from django.conf import settings

from clusters.providers.base import BootReport, BootState, NodeHealthReport, OutputCallback, Provider, StepOutcome

DRIVERS = {
    "simulated": "clusters.providers.simulated.SimulatedProvider",
    "local": "clusters.providers.local.provider.LocalProvider",
    "ssh": "clusters.providers.ssh.SSHPoolProvider",
}

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


def get_provider(name: str, on_output: OutputCallback | None = None) -> Provider:
    try:
        dotted = DRIVERS[name]
    except KeyError:
        raise LookupError(f"Unknown provider {name!r}; known: {', '.join(sorted(DRIVERS))}") from None
    module, _, cls = dotted.rpartition(".")
    return getattr(import_module(module), cls)(on_output=on_output)


__all__ = [
    "REAL_KUBERNETES", "BootReport", "BootState", "NodeHealthReport", "OutputCallback", "Provider", "StepOutcome",
    "get_provider", "kubernetes_pins", "kubernetes_unpinned",
]
