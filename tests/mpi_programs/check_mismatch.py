"""With PYMCOLL_CHECK=1, calls whose arguments disagree across ranks raise
ValueError on every rank, naming what differs, and the communicator keeps
working.

Usage: PYMCOLL_CHECK=1 python -m mpi_programs.check_mismatch
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def body() -> None:
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    first = rank == 0

    def expect(words: str, call) -> None:
        try:
            call()
        except ValueError as exc:
            assert "PYMCOLL_CHECK" in str(exc) and words in str(exc), str(exc)
        else:
            raise AssertionError(f"no error for a disagreement on {words}")
        buf = np.arange(5) if first else np.zeros(5, np.int64)
        comm.Bcast(buf, root=0)
        assert (buf == np.arange(5)).all()

    expect("message bytes", lambda: comm.Bcast(np.zeros(4 if first else 8)))
    expect("root", lambda: comm.Bcast(np.zeros(4), root=0 if first else 1))
    expect("collective", lambda: comm.Barrier() if first else comm.Bcast(np.zeros(2)))
    expect("op", lambda: comm.Allreduce(np.ones(3), np.zeros(3), op=MPI.SUM if first else MPI.MAX))
    expect("element type", lambda: comm.Allreduce(np.ones(3, np.float32 if first else np.int32),
                                                  np.zeros(3, np.float32 if first else np.int32)))
    expect("message bytes", lambda: comm.Allgather(np.zeros(2 if first else 3), np.zeros(size * (2 if first else 3))))
    # v forms: each pair's count is known to its two ranks only.
    last = size - 1
    counts = [2] * size
    mine = 3 if rank == last and size > 1 else 2  # the last rank sends one element more than the root expects
    expect(f"rank {last} sends to rank 0", lambda: comm.Gatherv(
        np.zeros(mine), [np.zeros(2 * size), counts, MPI.DOUBLE] if first else None, root=0))
    expect(f"rank 0 sends to rank {last}", lambda: comm.Scatterv(
        [np.zeros(2 * size), counts, MPI.DOUBLE] if first else None, np.zeros(mine), root=0))
    # Alltoallv: rank 0 sends the last rank 3 elements, which expects 2.
    scounts = [3 if (first and j == last) else 2 for j in range(size)]
    expect(f"rank 0 sends to rank {last}", lambda: comm.Alltoallv(
        [np.zeros(sum(scounts)), scounts, MPI.DOUBLE], [np.zeros(2 * size), counts, MPI.DOUBLE]))
    # Agreeing v calls pass the check and move the data.
    out = np.zeros(size * 2) if first else None
    comm.Gatherv(np.full(2, float(rank)), [out, counts, MPI.DOUBLE] if first else None, root=0)
    if first:
        assert (out == np.repeat(np.arange(size), 2)).all(), out
    comm.Free()
    print(f"rank {rank} check ok", flush=True)


if __name__ == "__main__":
    main(body)
