"""task.py for the Slurm array line: one input per array task."""

import os
import socket
import sys

print(f"task {sys.argv[1]} on {socket.gethostname()} NODE_RANK={os.environ.get('NODE_RANK')}")
