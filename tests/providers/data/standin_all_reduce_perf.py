#!/usr/bin/env python3
"""all_reduce_perf stand-in (nccl-tests needs CUDA): an MPI all-reduce per size, printed in
nccl-tests' table layout, so the Connect card's line runs as shown over mpirun."""

import time

from mpi4py import MPI  # type: ignore[import-not-found]  # only on the nodes

comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    print("#       size         count      type   redop    root     time   algbw   busbw #wrong", flush=True)
size = 8
while size <= 1 << 16:
    buffer = bytearray(size)
    started = time.perf_counter()
    comm.allreduce(buffer)
    seconds = time.perf_counter() - started
    if comm.Get_rank() == 0:
        algbw = size / seconds / 1e9
        print(f"{size:>12} {size // 4:>12}     float     sum      -1 {seconds * 1e6:8.1f} {algbw:7.2f} {algbw:7.2f}      0")
    size *= 8
if comm.Get_rank() == 0:
    print("# Avg bus bandwidth    : 0.01", flush=True)
