#!/usr/bin/env python3
"""deepspeed launcher stand-in: the same arguments; one process per GPU slot on every host of
the hostfile, started over SSH by name (as pdsh does), with the variables DeepSpeed sets."""

import argparse
import os
import shlex
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--hostfile", required=True)
parser.add_argument("--num_nodes", type=int, required=True)
parser.add_argument("--num_gpus", type=int, required=True)
parser.add_argument("--master_addr", required=True)
parser.add_argument("--master_port", type=int, required=True)
parser.add_argument("script")
parser.add_argument("args", nargs=argparse.REMAINDER)
options = parser.parse_args()
hosts = [line.split()[0] for line in open(options.hostfile) if line.strip()][: options.num_nodes]
world = len(hosts) * options.num_gpus
children = []
for index, host in enumerate(hosts):
    for local in range(options.num_gpus):
        env = {"RANK": index * options.num_gpus + local, "LOCAL_RANK": local, "WORLD_SIZE": world,
               "MASTER_ADDR": options.master_addr, "MASTER_PORT": options.master_port}
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        command = f"cd {shlex.quote(os.getcwd())} && {exports} python {shlex.quote(options.script)} " + " ".join(
            shlex.quote(a) for a in options.args)
        children.append(subprocess.Popen(["ssh", host, command]))
sys.exit(max(child.wait() for child in children))
