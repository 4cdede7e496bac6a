"""A rank on another node arrives late: the ranks waiting for its messages
between nodes raise pymcoll.TimeoutError within the deadline (MPI's own
waits have none) and their communicators are broken; the late rank either
completes from what was already sent or fails too; Free() works, and a new
communicator works once everybody is back.

Usage: python -m mpi_programs.stall_timeout_nodes LATE_RANK SLEEP_SECONDS
       (run with PYMCOLL_TIMEOUT and PYMCOLL_NODE_SIZE set)
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
    assert comm.layout.nnodes > 1, "needs several (virtual) nodes"
    recv = np.zeros(size * 8, np.int32)
    comm.Barrier()
    if rank == late:
        time.sleep(sleep)
    t0 = time.monotonic()
    try:
        comm.Allgather(np.full(8, rank, np.int32), recv)
        # The late rank may find everything it needs already sent (small
        # messages go out eagerly before the others give up).
        assert rank == late, "Allgather returned although a rank never arrived in time"
        print(f"rank {rank} late, its Allgather completed from messages sent before the others gave up",
              flush=True)
    except (pymcoll.TimeoutError, pymcoll.PeerFailedError) as exc:
        waited_within(rank, t0, timeout, exc)
        if type(exc) is pymcoll.TimeoutError:
            assert "Allgather #" in str(exc) and "PYMCOLL_TIMEOUT" in str(exc), str(exc)
        assert_broken(comm)
    free_and_recover(comm, world, recv)

if __name__ == "__main__":
    main(body)
