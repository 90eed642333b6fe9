from __future__ import annotations

from runcrate_client.cli import main

if __name__ == "__main__":
    main(prog_name="runcrate")
