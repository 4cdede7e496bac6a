"""Runs the collectives named on the command line (COLL:BYTES, in order) on
a pymcoll communicator with a trace ring; the test reads each rank's dump
(PYMCOLL_TRACE) and checks the algorithm family recorded for every call.
Prints "algorithms ok" on each rank."""

from __future__ import annotations

import sys
from typing import Callable

import numpy as np
from mpi4py import MPI

import pymcoll


def calls(comm: pymcoll.Comm) -> dict[str, Callable[[int], None]]:
    """Each collective on `nbytes` per rank (float64 elements for reductions)."""
    n, me = comm.size, comm.rank

    def b(k: int) -> np.ndarray:
        return np.zeros(k, np.uint8)

    def f(k: int) -> np.ndarray:
        return np.ones(k // 8, np.float64)

    def root_only(buf: object) -> object:
        return buf if me == 0 else None

    return {
        "Barrier": lambda k: comm.Barrier(),
        "Bcast": lambda k: comm.Bcast(b(k), root=0),
        "Allreduce": lambda k: comm.Allreduce(f(k), f(k)),
        "Reduce": lambda k: comm.Reduce(f(k), f(k), root=0),
        "Scan": lambda k: comm.Scan(f(k), f(k)),
        "Reduce_scatter_block": lambda k: comm.Reduce_scatter_block(f(k * n), f(k)),
        "Gather": lambda k: comm.Gather(b(k), root_only(b(k * n)), root=0),
        "Gatherv": lambda k: comm.Gatherv(b(k), root_only([b(k * n), [k] * n]), root=0),
        "Scatter": lambda k: comm.Scatter(root_only(b(k * n)), b(k), root=0),
        "Allgather": lambda k: comm.Allgather(b(k), b(k * n)),
        "Allgatherv": lambda k: comm.Allgatherv(b(k), [b(k * n), [k] * n]),
        "Alltoall": lambda k: comm.Alltoall(b(k * n), b(k * n)),
    }


def main() -> None:
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    table = calls(comm)
    for spec in sys.argv[1:]:
        name, _, size = spec.partition(":")
        table[name](int(size))
    print("algorithms ok", flush=True)


if __name__ == "__main__":
    main()
