#!/usr/bin/env python3
"""torchrun stand-in: the same arguments; starts --nproc-per-node copies of the script with
the variables torchrun sets. Refuses what torchrun refuses (an empty or wrong --node-rank)."""

import argparse
import os
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--nnodes", type=int, required=True)
parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True)
parser.add_argument("--node-rank", "--node_rank", type=int, default=0)
parser.add_argument("--rdzv-backend", "--rdzv_backend", default="static")
parser.add_argument("--rdzv-endpoint", "--rdzv_endpoint", required=True)
parser.add_argument("script")
parser.add_argument("args", nargs=argparse.REMAINDER)
options = parser.parse_args()
if not 0 <= options.node_rank < options.nnodes:
    sys.exit(f"torchrun: --node-rank {options.node_rank} is not in 0..{options.nnodes - 1}")
host, port = options.rdzv_endpoint.rsplit(":", 1)
world = options.nnodes * options.nproc_per_node
children = []
for local in range(options.nproc_per_node):
    env = dict(os.environ, LOCAL_RANK=str(local), RANK=str(options.node_rank * options.nproc_per_node + local),
               WORLD_SIZE=str(world), MASTER_ADDR=host, MASTER_PORT=port)
    children.append(subprocess.Popen([sys.executable, options.script, *options.args], env=env))
sys.exit(max(child.wait() for child in children))
