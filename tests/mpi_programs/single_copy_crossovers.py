"""Every collective with a single-copy path, at the block sizes where it
switches between the cells and single copy (one element below the crossover,
and at it), blocking and in place, checked by the toolkit's oracle and
against the wrapped MPI communicator byte for byte. The crossovers reach
tens of MiB, beyond what the property programs draw."""

from __future__ import annotations

import argparse

from mpi4py import MPI

import pymcoll
import pymcoll.testing as pt
from pymcoll.tuning import single_copy_min_now
from pymcoll.testing.case import NO_IN_PLACE, REDUCING

from .common import main, report_cases

ITEM = 4  # int32: every crossover is a whole number of elements


def cases(coll: str, n: int, local: int, root: int) -> list[pt.Case]:
    """The cases of `coll` on `n` ranks around its crossover on nodes of `local` ranks."""
    least = single_copy_min_now(coll, local)
    out: list[pt.Case] = []
    if least == 0:  # never single copy on nodes of this size
        return out
    for block, in_place in ((least - ITEM, False), (least, False), (least, True)):
        if in_place and coll in NO_IN_PLACE:
            continue
        count = block // ITEM
        op = "SUM" if coll in REDUCING else None
        if coll == "Alltoallv":
            extra = dict(counts=(count,) * (n * n))
        elif coll in ("Scatterv", "Gatherv", "Allgatherv", "Reduce_scatter"):
            # Uneven: the root's (or rank 0's) block one element short, so the blocks on
            # either side of the crossover meet in one call.
            extra = dict(counts=tuple(count - (i == 0) for i in range(n)))
        else:
            extra = dict(count=count)
        out.append(pt.Case(collective=coll, size=n, dtype="int32", root=root, op=op, in_place=in_place,
                           seed=block + in_place, **extra))
    return out


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--colls", default="Bcast,Scatter,Scatterv,Gather,Gatherv,Allgather,Allgatherv,Alltoall,"
                                       "Alltoallv,Reduce_scatter_block,Reduce_scatter,Scan,Exscan")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    verdicts = world.Dup()
    n, rank = comm.Get_size(), comm.Get_rank()
    local = comm.layout.max_local
    assert comm.layout.nnodes == 1 and comm.layout.shm_active, comm.layout.describe()
    bad = []
    ran = 0
    for coll in args.colls.split(","):
        for case in cases(coll, n, local, root=n - 1):
            problem = pt.run_case(comm, case, rank, wrapped=comm.mpi)
            failed = verdicts.allgather(problem)
            ran += 1
            bad += [f"{case}: rank {r}: {p}" for r, p in enumerate(failed) if p]
    report_cases(rank, n, ran, bad)
    verdicts.Free()
    comm.Free()


if __name__ == "__main__":
    main(body)
