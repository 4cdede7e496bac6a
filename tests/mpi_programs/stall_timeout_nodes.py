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

from .common import main


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
        waited = time.monotonic() - t0
        print(f"rank {rank} waited {waited:.2f} s, got {type(exc).__name__}: {exc}", flush=True)
        assert waited < timeout + 2.0, f"waited {waited:.2f} s past a {timeout} s deadline"
        if type(exc) is pymcoll.TimeoutError:
            assert "Allgather #" in str(exc) and "PYMCOLL_TIMEOUT" in str(exc), str(exc)
        try:
            comm.Barrier()
            raise AssertionError("a broken communicator accepted another collective")
        except pymcoll.CommBrokenError as broken:
            assert "Free()" in str(broken), str(broken)
    comm.Free()
    world.Barrier()
    with pymcoll.Comm(world) as again:
        again.Allgather(np.full(8, rank, np.int32), recv)
        assert (recv.reshape(size, 8) == np.arange(size)[:, None]).all()
    print(f"rank {rank} recovered", flush=True)


if __name__ == "__main__":
    main(body)
