"""pymcoll.testing.check against a named implementation; prints the report.

Usage: python -m mpi_programs.toolkit_check mpi4py|pymcoll [--examples N] [--layouts a,b]
       [--collectives A,B] [--max-bytes B]
"""

from __future__ import annotations

import argparse

from mpi4py import MPI

import pymcoll
import pymcoll.testing as pt

from .common import main


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("impl", choices=["mpi4py", "pymcoll"])
    ap.add_argument("--examples", type=int, default=40)
    ap.add_argument("--layouts", default="world")
    ap.add_argument("--collectives", default=None)
    ap.add_argument("--max-bytes", type=int, default=1 << 14)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    impl = world.Dup() if args.impl == "mpi4py" else pymcoll.Comm(world)
    report = pt.check(impl, world, args.collectives.split(",") if args.collectives else None,
                      args.examples, max_bytes=args.max_bytes, layouts=args.layouts.split(","), deadline=120)
    if world.Get_rank() == 0:
        print(report, flush=True)
    impl.Free()


if __name__ == "__main__":
    main(body)
