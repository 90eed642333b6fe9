"""The `runcrate` command line, one module per command group (runcrate_client/cli/<group>.py);
the root command, exit codes and shared options are in base.py."""

from __future__ import annotations

from runcrate_client.cli import (  # noqa: F401
    account,
    audit,
    billing,
    catalogue,
    clusters,
    config,
    instances,
    mcp,
    members,
    network,
    quotes,
    remote,
    top,
    volumes,
    webhooks,
)
from runcrate_client.cli.base import main

__all__ = ["main"]

if __name__ == "__main__":
    main(prog_name="runcrate")
