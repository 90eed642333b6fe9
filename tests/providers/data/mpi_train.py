"""train.py stand-in: no torch here, the same launch lines and variables.

Under mpirun (OMPI_COMM_WORLD_RANK) it all-reduces with mpi4py. Under torchrun or DeepSpeed
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) rank 0 listens on MASTER_ADDR:MASTER_PORT+1 and
every other rank reports to it there, as a c10d/gloo rendezvous would over the private network.
"""

import os
import socket
import sys
import time

if "OMPI_COMM_WORLD_RANK" in os.environ:
    from mpi4py import MPI  # type: ignore[import-not-found]  # only on the nodes

    comm = MPI.COMM_WORLD
    total = comm.allreduce(1)
    print(f"mpi rank {comm.Get_rank()}/{comm.Get_size()} on {socket.gethostname()} sum={total} "
          f"NCCL_SOCKET_IFNAME={os.environ.get('NCCL_SOCKET_IFNAME')} MASTER_ADDR={os.environ.get('MASTER_ADDR')}",
          flush=True)
    sys.exit(0 if total == comm.Get_size() else 1)

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1
if rank == 0:
    server = socket.create_server((socket.gethostbyname(address), port), reuse_port=True)
    server.settimeout(60)
    seen = {0}
    while len(seen) < world:
        connection, _ = server.accept()
        seen.add(int(connection.recv(16).decode()))
        connection.sendall(b"ok")
        connection.close()
    print(f"rank 0/{world} on {socket.gethostname()} gathered {sorted(seen)}", flush=True)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection((address, port), timeout=5) as connection:
                connection.sendall(str(rank).encode())
                assert connection.recv(2) == b"ok"
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    print(f"rank {rank}/{world} on {socket.gethostname()} reported to rank 0", flush=True)
