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

from .common import main


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
            waited = time.monotonic() - t0
            print(f"rank {rank} waited {waited:.2f} s, got {type(exc).__name__}: {exc}", flush=True)
            assert waited < timeout + 2.0, f"waited {waited:.2f} s past a {timeout} s deadline"
            if type(exc) is pymcoll.TimeoutError:
                assert "Allgather #" in str(exc) and f"[{comm.layout.local_of[late]}]" in str(exc), str(exc)
        try:
            comm.Barrier()
            raise AssertionError("a broken communicator accepted another collective")
        except pymcoll.CommBrokenError as exc:
            assert "Free()" in str(exc), str(exc)
    comm.Free()
    world.Barrier()
    with pymcoll.Comm(world) as again:
        again.Allgather(np.full(8, rank, np.int32), recv)
        assert (recv.reshape(size, 8) == np.arange(size)[:, None]).all()
    print(f"rank {rank} recovered", flush=True)


if __name__ == "__main__":
    main(body)
