"""Every collective of pymcoll.Comm, in its blocking, non-blocking (I-) and
persistent (_init) forms, under pymcoll.testing: random dtype, op, root,
in-place, counts from 0 up to --max-bytes with the data-path thresholds'
neighbours, vector forms with gaps, checked against the numpy oracle on
several communicator layouts.

Usage: python -m mpi_programs.prop_collectives [--examples N] [--max-bytes B]
           [--forms blocking,nonblocking,persistent] [--colls Gather,Scan,...]
"""

from __future__ import annotations

import argparse

from mpi4py import MPI

import pymcoll
import pymcoll.testing as pt
from pymcoll.testing.case import COLLECTIVES

from .common import CI, main
from .prop_bcast_allgather import thresholds

FORMS = {
    "blocking": lambda c: c,
    "nonblocking": lambda c: "I" + c[0].lower() + c[1:],
    "persistent": lambda c: c + "_init",
}


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=12 if CI else 40)
    ap.add_argument("--max-bytes", type=int, default=(256 << 10) if CI else (4 << 20))
    ap.add_argument("--forms", default="blocking,nonblocking,persistent")
    ap.add_argument("--colls", default=",".join(COLLECTIVES))
    ap.add_argument("--layouts", default="world,halves,reversed")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    colls = [c for c in args.colls.split(",") if c]
    names = [FORMS[f](c) for f in args.forms.split(",") for c in colls]
    layouts = args.layouts.split(",") if world.Get_size() > 1 else ["world"]
    report = pt.check(comm, world, names, args.examples, max_bytes=args.max_bytes,
                      thresholds=thresholds(comm.layout), layouts=layouts, deadline=180)
    if world.Get_rank() == 0:
        print(report, flush=True)
    assert report.ok, str(report)
    if world.Get_rank() == 0:
        print(f"OK {comm.layout.describe()}, shm={comm.layout.shm_active}", flush=True)
    comm.Free()


if __name__ == "__main__":
    main(body)
