"""Every collective of pymcoll.Comm, in its blocking, non-blocking (I-) and
persistent (_init) forms, under pymcoll.testing: random dtype, op, root,
in-place, counts from 0 up to --max-bytes with the data-path thresholds'
neighbours, vector forms with gaps, the arguments in each of mpi4py's forms
(vector spec shapes, integer counts and strides, None counts and
displacements, typecode strings, None for MPI.IN_PLACE, buffers where MPI
ignores the argument, Reduce_scatter without recvcounts), checked against the
numpy oracle and, byte for byte, against the same call on the wrapped mpi4py
communicator (comm.mpi), on several communicator layouts.

With --heap every buffer is copied into arrays from pymcoll.alloc() first
(and back after the call), so the direct data path (peers reading the shared
heap) carries the data; blocking forms only.

Usage: python -m mpi_programs.prop_collectives [--examples N] [--max-bytes B]
           [--forms blocking,nonblocking,persistent] [--colls Gather,Scan,...] [--heap]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from mpi4py import MPI

import pymcoll
import pymcoll.testing as pt
from pymcoll.testing.case import COLLECTIVES

from .common import CI, main
from .thresholds import thresholds

FORMS = {
    "blocking": lambda c: c,
    "nonblocking": lambda c: "I" + c[0].lower() + c[1:],
    "persistent": lambda c: c + "_init",
}


class HeapAdapter:
    """A pymcoll.Comm whose collectives get their buffers in the shared heap."""

    def __init__(self, comm: pymcoll.Comm) -> None:
        self.comm = comm

    def _to_heap(self, arg: Any) -> tuple[Any, Any, Any]:
        """(argument for the call, original array, heap array)."""
        if isinstance(arg, np.ndarray):
            h = pymcoll.alloc(arg.shape, arg.dtype, self.comm)
            h[...] = arg
            return h, arg, h
        if isinstance(arg, list) and arg and isinstance(arg[0], np.ndarray):
            h, orig, _ = self._to_heap(arg[0])
            return [h, *arg[1:]], orig, h
        return arg, None, None

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.comm, name)
        if name not in COLLECTIVES:
            return fn

        def call(*args: Any) -> None:
            conv = [self._to_heap(a) for a in args]
            fn(*[c[0] for c in conv])
            for _, orig, h in conv:
                if orig is not None and orig.flags.writeable:
                    orig[...] = h
        return call

    def Split(self, color: int = 0, key: int = 0) -> Any:  # noqa: N802
        sub = self.comm.Split(color, key)
        return HeapAdapter(sub) if isinstance(sub, pymcoll.Comm) else None


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=12 if CI else 40)
    ap.add_argument("--max-bytes", type=int, default=(256 << 10) if CI else (4 << 20))
    ap.add_argument("--forms", default="blocking,nonblocking,persistent")
    ap.add_argument("--colls", default=",".join(COLLECTIVES))
    ap.add_argument("--layouts", default="world,halves,reversed")
    ap.add_argument("--heap", action="store_true")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    colls = [c for c in args.colls.split(",") if c]
    names = [FORMS[f](c) for f in args.forms.split(",") for c in colls]
    layouts = args.layouts.split(",") if world.Get_size() > 1 else ["world"]
    impl = HeapAdapter(comm) if args.heap else comm
    report = pt.check(impl, world, names, args.examples, max_bytes=args.max_bytes,
                      thresholds=thresholds(comm.layout), layouts=layouts, deadline=180,
                      spec_forms=True, compare_wrapped=True)
    if world.Get_rank() == 0:
        print(report, flush=True)
    assert report.ok, str(report)
    if world.Get_rank() == 0:
        print(f"OK {comm.layout.describe()}, shm={comm.layout.shm_active}", flush=True)
    comm.Free()


if __name__ == "__main__":
    main(body)
