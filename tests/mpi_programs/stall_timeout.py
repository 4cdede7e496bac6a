"""A rank arrives late: the others raise pymcoll.TimeoutError within the
deadline, the communicator is broken afterwards, Free() works, and a new
communicator works again once everybody is back.

Usage: python -m mpi_programs.stall_timeout LATE_RANK SLEEP_SECONDS (run with PYMCOLL_TIMEOUT set)
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import assert_broken, free_and_recover, main, waited_within


def body() -> None:
    late, sleep = int(sys.argv[1]), float(sys.argv[2])
    timeout = float(os.environ["PYMCOLL_TIMEOUT"])
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    rank, size = comm.rank, comm.size
    recv = np.zeros(size * 8, np.int32)
    comm.Barrier()
    if rank == late:
        time.sleep(sleep)
        # The others gave up meanwhile: the first wait here must say so.
        try:
            for _ in range(3):
                comm.Barrier()
            raise AssertionError("the late rank was never told that its peers gave up")
        except pymcoll.PeerFailedError as exc:
            print(f"rank {rank} late, got {type(exc).__name__}: {exc}", flush=True)
    else:
        t0 = time.monotonic()
        try:
            comm.Allgather(np.full(8, rank, np.int32), recv)
            raise AssertionError("Allgather returned although a rank never arrived")
        except pymcoll.TimeoutError as exc:
            waited_within(rank, t0, timeout, exc)
            if type(exc) is pymcoll.TimeoutError:
                assert "Allgather #" in str(exc) and f"[{comm.layout.local_of[late]}]" in str(exc), str(exc)
        assert_broken(comm)
    free_and_recover(comm, world, recv)

if __name__ == "__main__":
    main(body)
