"""The demo catalogue: what a real GPU cloud lists, seeded idempotently by `seed_demo`."""

from __future__ import annotations

from decimal import Decimal

GPUS = [
    ("B200", "NVIDIA B200 180GB SXM", 180),
    ("H200", "NVIDIA H200 141GB SXM", 141),
    ("H100", "NVIDIA H100 80GB SXM", 80),
    ("A100", "NVIDIA A100 80GB SXM", 80),
    ("L40S", "NVIDIA L40S 48GB PCIe", 48),
    ("RTX4090", "NVIDIA GeForce RTX 4090 24GB", 24),
]

LOCATIONS = [
    ("us-east-1", "Ashburn, Virginia", "US", ""),
    ("us-west-2", "Hillsboro, Oregon", "US", "gw.us-west-2.runcrate.example"),
    ("eu-north-1", "Helsinki, Finland", "FI", "gw.eu-north-1.runcrate.example"),
    ("eu-central-1", "Frankfurt, Germany", "DE", ""),
    ("community-global", "Community hosts (various)", "ZZ", ""),
]

# Self-serve offers are Ethernet only (the machine's own link; between machines the cluster
# gets the encrypted private network). InfiniBand and RoCE are sold through a quote.
# (gpu, location, kind, gpus/machine, link, $/machine-hour, deadline min, community, hosts)
MACHINE_TYPES = [
    ("H100", "us-east-1", "bare_metal", 8, "eth_100g", "23.92", 40, False, 16),
    ("H100", "us-east-1", "vm", 8, "eth_100g", "21.52", 25, False, 24),
    ("H100", "eu-north-1", "vm", 4, "eth_100g", "10.36", 25, False, 12),
    ("H100", "us-west-2", "container", 1, "eth_25g", "2.49", 25, False, 32),
    ("H100", "community-global", "container", 1, "eth_10g", "1.89", 25, True, 8),
    ("H200", "us-east-1", "bare_metal", 8, "eth_100g", "31.60", 40, False, 8),
    ("H200", "eu-central-1", "vm", 8, "eth_100g", "28.72", 25, False, 8),
    ("B200", "us-east-1", "bare_metal", 8, "eth_100g", "47.92", 45, False, 4),
    ("A100", "eu-north-1", "vm", 8, "eth_100g", "11.92", 25, False, 16),
    ("A100", "us-west-2", "container", 2, "eth_25g", "2.78", 25, False, 20),
    ("A100", "community-global", "container", 4, "eth_10g", "4.40", 25, True, 10),
    ("L40S", "eu-central-1", "vm", 4, "eth_25g", "3.96", 25, False, 16),
    ("L40S", "us-west-2", "container", 1, "eth_10g", "0.99", 25, False, 40),
    ("RTX4090", "community-global", "container", 2, "eth_10g", "0.78", 25, True, 24),
    ("RTX4090", "community-global", "vm", 1, "eth_10g", "0.42", 25, True, 12),
]


def price(value: str) -> Decimal:
    return Decimal(value)
