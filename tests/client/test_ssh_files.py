"""~/.runcrate/ssh as the CLI writes it: one file per cluster and environment, read by OpenSSH
itself (`ssh -G` resolves a Host as ssh would, without connecting)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from runcrate_client import sshconfig

RUNCRATE = ["/venv/bin/python", "-m", "runcrate_client"]


def cluster(cluster_id: int, environment: str, environment_id: int, name: str = "train") -> dict:
    return {"id": cluster_id, "name": name, "environment": environment, "environment_id": environment_id, "nodes": []}


def proxy_of(home: Path, host: str) -> str:
    """The ProxyCommand ssh would run for `host`, reading every written file as the Include does."""
    config = home / "all.config"
    config.write_text(f"Include {home}/.runcrate/ssh/*.config\n")
    parsed = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True).stdout
    return next((line for line in parsed.splitlines() if line.startswith("proxycommand ")), "")


def test_clusters_of_one_name_in_two_environments_keep_a_file_each(tmp_path):
    prod = sshconfig.write_live_config(cluster(7, "prod", 1), RUNCRATE, home=tmp_path)
    assert prod.config.name == "train.prod.config"
    assert proxy_of(tmp_path, "train-node-3").endswith("clusters _proxy 7 %n")
    dev = sshconfig.write_live_config(cluster(9, "dev", 2), RUNCRATE, home=tmp_path)
    assert dev.config.name == "train.dev.config" and prod.config.exists()
    # Each answers its own full name; the short one would be whichever file ssh read first,
    # so neither answers it any more.
    assert proxy_of(tmp_path, "train.prod-node-3").endswith("clusters _proxy 7 %n")
    assert proxy_of(tmp_path, "train.dev-node-3").endswith("clusters _proxy 9 %n")
    assert proxy_of(tmp_path, "train-node-3") == ""
    # Writing one again keeps it so.
    sshconfig.write_live_config(cluster(7, "prod", 1), RUNCRATE, home=tmp_path)
    assert proxy_of(tmp_path, "train-node-3") == "" and "_proxy 9" in proxy_of(tmp_path, "train.dev-node-1")


def test_an_environment_whose_name_no_file_can_carry_is_named_by_its_id_and_the_old_file_goes(tmp_path):
    old = sshconfig.ssh_dir(tmp_path)
    old.mkdir(parents=True)
    (old / "train.config").write_text("Host train-node-? train-node-??\n    ProxyCommand old\n")
    written = sshconfig.write_live_config(cluster(4, "Team A/B", 12), RUNCRATE, home=tmp_path)
    assert written.config.name == "train.env-12.config" and not (old / "train.config").exists()
    assert proxy_of(tmp_path, "train-node-0").endswith("clusters _proxy 4 %n")
