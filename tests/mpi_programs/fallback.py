"""The node segment cannot be created (or is switched off): the
communicator warns once, runs the wrapped MPI collectives, and every
collective still gives the right answer.

Usage: python -m mpi_programs.fallback EXPECT_WARNING(0|1) REASON_SUBSTRING
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def body() -> None:
    expect_warning, reason = sys.argv[1] == "1", sys.argv[2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    ours = [w for w in caught if "pymcoll" in str(w.message)]
    if rank == 0 and expect_warning:
        assert len(ours) == 1 and issubclass(ours[0].category, RuntimeWarning), [str(w.message) for w in ours]
        assert reason in str(ours[0].message), str(ours[0].message)
        print(f"warning: {ours[0].message}", flush=True)
    else:
        assert not ours, [str(w.message) for w in ours]
    assert not comm.layout.shm_active and comm.layout.segment_bytes == 0
    assert reason in comm.note, comm.note
    comm.Barrier()
    for n in (0, 1, 1000, 300_000):
        for root in range(size):
            buf = np.arange(n, dtype=np.int32) * (root + 1) if rank == root else np.zeros(n, np.int32)
            comm.Bcast(buf, root=root)
            assert (buf == np.arange(n, dtype=np.int32) * (root + 1)).all()
        recv = np.zeros(size * n, np.float64)
        comm.Allgather(np.full(n, rank, np.float64), recv)
        assert (recv.reshape(size, n) == np.arange(size)[:, None]).all()
        recv[:] = 0
        recv[rank * n:(rank + 1) * n] = rank + 0.5
        comm.Allgather(MPI.IN_PLACE, recv)
        assert (recv.reshape(size, n) == np.arange(size)[:, None] + 0.5).all()
    comm.Free()
    print(f"rank {rank} fallback ok", flush=True)


if __name__ == "__main__":
    main(body)
