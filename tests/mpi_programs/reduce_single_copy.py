"""Reduce by single copy, where each rank stores its slice into the root chunk
by chunk as it reduces it: slices one element short of, at and one past one
and two chunks (and a slice shorter than the others), every root, in place at
the root and not, integer, floating and complex elements, several ops;
checked by the toolkit's oracle and against the wrapped MPI communicator.
With --heap the buffers are copied into arrays from pymcoll.alloc() first."""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import pymcoll
import pymcoll.testing as pt

from .common import main, report_cases
from .prop_collectives import HeapAdapter

CHUNK = 512 << 10  # bytes a single-copy reduction combines at a time (native/src/coll/node_algos.h)
CASES = (("int32", "SUM"), ("float64", "SUM"), ("complex64", "PROD"), ("int8", "MAX"), ("uint16", "BXOR"))


def counts(n: int, itemsize: int) -> list[int]:
    """Element counts whose slices straddle one and two chunks: n equal slices of
    k chunks -1/0/+1 elements, and one more element, so the first slice is longer."""
    per = CHUNK // itemsize
    out = []
    for k in (1, 2):
        for d in (-1, 0, 1):
            out.append(n * (k * per + d))
    out.append(n * per + 1)
    return out


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heap", action="store_true")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    impl = HeapAdapter(comm) if args.heap else comm
    verdicts = world.Dup()
    n, rank = comm.Get_size(), comm.Get_rank()
    bad, ran = [], 0
    for dtype, op in CASES:
        for count in counts(n, np.dtype(dtype).itemsize):
            for root in sorted({0, n - 1}):
                for in_place in (False, True):
                    case = pt.Case(collective="Reduce", size=n, dtype=dtype, count=count, root=root, op=op,
                                   in_place=in_place, seed=count + root + in_place)
                    problem = pt.run_case(impl, case, rank, wrapped=comm.mpi)
                    ran += 1
                    bad += [f"{case}: rank {r}: {p}" for r, p in enumerate(verdicts.allgather(problem)) if p]
    report_cases(rank, n, ran, bad)
    verdicts.Free()
    comm.Free()


if __name__ == "__main__":
    main(body)
