"""A loop of a large Bcast from rank 0 and a small Allreduce: ranks whose copy of the
broadcast arrives late (a slow link) reach each Allreduce last. Prints "loop ok" on every rank.

Usage: python -m mpi_programs.bcast_then_allreduce ROUNDS BYTES
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import pymcoll


def main() -> None:
    rounds, nbytes = int(sys.argv[1]), int(sys.argv[2])
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    big = np.zeros(nbytes, np.uint8)
    small, out = np.ones(4), np.empty(4)
    for i in range(rounds):
        big[:] = i % 251 if comm.rank == 0 else 0
        comm.Bcast(big, root=0)
        assert big[-1] == i % 251, (comm.rank, i)
        comm.Allreduce(small, out)
        assert (out == comm.size).all()
    print("loop ok", flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
