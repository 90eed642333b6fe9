"""Provider drivers by name. New drivers register here."""

from __future__ import annotations

from importlib import import_module

from clusters.providers.base import BootReport, BootState, NodeHealthReport, OutputCallback, Provider, StepOutcome
from clusters.providers.kubernetes import REAL_KUBERNETES, kubernetes_pins, kubernetes_unpinned

DRIVERS = {
    "simulated": "clusters.providers.simulated.SimulatedProvider",
    "local": "clusters.providers.local.provider.local_provider",
    "ssh": "clusters.providers.ssh.SSHPoolProvider",
}

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
