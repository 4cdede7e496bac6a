"""python -m pymcoll.testing: run the property battery against an implementation.

    python -m pymcoll.testing --np 3 --impl pymcoll --collectives Bcast,Allgather
    python -m pymcoll.testing --np 2 --impl mpi4py --layouts world,halves,reversed
    python -m pymcoll.testing --np 2 --impl mypkg.mymod:make_comm    # make_comm(MPI.COMM_WORLD)

Started without mpiexec, it starts itself under ``mpiexec -n NP``. Exit
status: 0 all passed, 1 a failure was found, 75 the watchdog aborted a hang.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Callable, Optional

from ..cli.launch import DEFAULT_TIMEOUT_S, default_np, is_launched, python_command, run_under_mpiexec
from ..config import parse_bytes


def _factory(spec: str) -> Callable[[Any], Any]:
    if spec == "mpi4py":
        return lambda comm: comm.Dup()
    if spec == "pymcoll":
        import pymcoll

        return lambda comm: pymcoll.Comm(comm)
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"--impl={spec!r}: expected 'pymcoll', 'mpi4py' or 'module:function'")
    # The user's module may live in the working directory, which -P keeps off
    # sys.path; append it, after the installed packages.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--impl={spec!r}: cannot load {name} from {module}: {exc}") from None
    return fn


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m pymcoll.testing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", default="pymcoll",
                   help="'pymcoll', 'mpi4py' or module:function returning an implementation for a communicator")
    p.add_argument("--collectives", default=None, help="comma list of method names (default: all it has)")
    p.add_argument("--examples", type=int, default=100, help="examples per collective and layout")
    p.add_argument("--max-bytes", default="64K", help="largest block a rank sends (K/M suffixes)")
    p.add_argument("--thresholds", default="", help="comma list of block sizes in bytes to straddle")
    p.add_argument("--dtypes", default=None, help="comma list of numpy dtype names (default: all MPI maps)")
    p.add_argument("--layouts", default="world", help="comma list: world, halves, reversed, all-but-first")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds per example before the watchdog aborts")
    p.add_argument("--no-in-place", action="store_true", help="never draw the MPI.IN_PLACE forms")
    p.add_argument("--spec-forms", action="store_true",
                   help="also draw mpi4py's other argument forms (vector spec shapes, integer counts and strides, "
                        "typecodes, None for MPI.IN_PLACE, ...)")
    p.add_argument("--compare-wrapped", action="store_true",
                   help="also run every example on the implementation's wrapped mpi4py communicator (impl.mpi) "
                        "and require identical receive bytes")
    p.add_argument("--json", action="store_true", help="print the report as JSON (rank 0)")
    p.add_argument("--np", type=int, default=None, help="ranks when it starts itself (default min(CPUs, 4))")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds for a self-started job")
    p.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point."""
    args = parser().parse_args(argv)
    try:
        max_bytes = parse_bytes(args.max_bytes, "--max-bytes")
        thresholds = [parse_bytes(t, "--thresholds") for t in args.thresholds.split(",") if t.strip()]
        factory = _factory(args.impl)
    except ValueError as exc:
        print(f"pymcoll.testing: {exc}", file=sys.stderr)
        return 2
    if not args.launched and not is_launched():
        program = python_command("pymcoll.testing", *(argv if argv is not None else sys.argv[1:]), "--launched")
        return run_under_mpiexec(args.np or default_np(), program, timeout=args.timeout,
                                 hint="or test fewer examples (--examples)")
    from mpi4py import MPI

    from . import check

    world = MPI.COMM_WORLD
    impl = factory(world)
    try:
        report = check(impl, world, args.collectives.split(",") if args.collectives else None,
                       args.examples, dtypes=args.dtypes.split(",") if args.dtypes else None,
                       max_bytes=max_bytes, thresholds=thresholds, in_place=not args.no_in_place,
                       layouts=[x for x in args.layouts.split(",") if x], deadline=args.deadline,
                       spec_forms=args.spec_forms, compare_wrapped=args.compare_wrapped)
    except (ValueError, TypeError) as exc:
        if world.Get_rank() == 0:
            print(f"pymcoll.testing: {exc}", file=sys.stderr)
        return 2
    if world.Get_rank() == 0:
        if args.json:
            print(json.dumps({"ok": report.ok, "examples": report.examples,
                              "failures": [f.__dict__ for f in report.failures]}, default=str))
        else:
            print(report)
    if callable(getattr(impl, "Free", None)):
        impl.Free()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
