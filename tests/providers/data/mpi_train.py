"""train.py for the `base` image (no PyTorch there): the mpirun line's ranks all-reduce with
mpi4py, and show the variables the line forwards and mpi-rank-env sets."""

import os
import socket
import sys

from mpi4py import MPI  # type: ignore[import-not-found]  # only on the nodes

comm = MPI.COMM_WORLD
total = comm.allreduce(1)
print(f"mpi rank {comm.Get_rank()}/{comm.Get_size()} on {socket.gethostname()} sum={total} "
      f"RANK={os.environ.get('RANK')} WORLD_SIZE={os.environ.get('WORLD_SIZE')} "
      f"NCCL_SOCKET_IFNAME={os.environ.get('NCCL_SOCKET_IFNAME')} MASTER_ADDR={os.environ.get('MASTER_ADDR')}",
      flush=True)
sys.exit(0 if total == comm.Get_size() else 1)
