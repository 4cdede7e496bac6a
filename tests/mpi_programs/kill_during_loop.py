"""One rank is SIGKILLed while all ranks loop over collectives.

Survivors must end with pymcoll.TimeoutError (or its subclass
PeerFailedError) or be stopped by MPI's abort; they print what they caught.

Usage: python -m mpi_programs.kill_during_loop VICTIM DELAY_SECONDS
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

import pymcoll


def main() -> None:
    victim, delay = int(sys.argv[1]), float(sys.argv[2])
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank = comm.rank
    print(f"rank {rank} pid {os.getpid()} ready", flush=True)
    if rank == victim:
        threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    send = np.zeros(4096, np.int64)
    recv = np.zeros(4096 * comm.size, np.int64)
    big = np.zeros(1 << 18, np.float64)
    start = time.monotonic()
    i = 0
    try:
        while time.monotonic() - start < 120:
            send[:] = i
            comm.Allgather(send, recv)
            comm.Bcast(big, root=i % comm.size)
            comm.Barrier()
            i += 1
    except pymcoll.TimeoutError as exc:
        print(f"rank {rank} CAUGHT {type(exc).__name__} after {i} iterations: {exc}", flush=True)
        os._exit(0)  # MPI cannot finalize with a dead peer
    print(f"rank {rank} never noticed the failure", flush=True)
    os._exit(3)


if __name__ == "__main__":
    main()
