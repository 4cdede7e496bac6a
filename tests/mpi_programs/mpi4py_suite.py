"""mpi4py's own collective test modules, run against pymcoll.Comm.

Usage: python -m mpi_programs.mpi4py_suite SUITE_DIR OUT_DIR [--plain] [-k PATTERN] MODULE...

SUITE_DIR is the ``test/`` folder of mpi4py's source distribution (the
tests of test_mpi4py_suite.py download it from PyPI; nothing of it lives in
this repository). Every TestCase class of each module runs with its
communicator replaced, per test, by ``pymcoll.Comm`` over a fresh ``Dup`` of
the communicator the class would have used (COMM_SELF or COMM_WORLD, or the
duplicate its own setUp makes), freed in tearDown, so a failing test leaves
nothing behind for the next one. With ``--plain`` the modules run as mpi4py
ships them: the reference for which tests skip.

Each rank writes OUT_DIR/rank<N>.jsonl as it goes (a "start" line before a
test, a "done" line with its outcome after), so a hang names its test. Rank 0
prints one JSON summary line at the end: per test id, the outcome on every
rank.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import unittest
from typing import Any, Optional

from mpi4py import MPI

from .suite_result import Outcomes, print_summary


_SUBSTITUTED = [0]  # tests that ran with a pymcoll.Comm as self.COMM


def _substituted(cls: type) -> type:
    """A subclass of `cls` whose tests see pymcoll.Comm as self.COMM."""
    import pymcoll

    def setUp(self: Any) -> None:  # noqa: N802 - unittest API
        cls.setUp(self)
        under = self.COMM
        self._pymcoll_under = under
        if isinstance(under, MPI.Comm) and under != MPI.COMM_NULL and not under.Is_inter():
            self.COMM = pymcoll.Comm(under.Dup())
            _SUBSTITUTED[0] += 1

    def tearDown(self: Any) -> None:  # noqa: N802 - unittest API
        ours, self.COMM = self.COMM, self._pymcoll_under
        try:
            if isinstance(ours, pymcoll.Comm):
                ours.Free()
        finally:
            cls.tearDown(self)

    return type(cls.__name__, (cls,), {"setUp": setUp, "tearDown": tearDown,
                                      "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def _suite(module: Any, plain: bool, pattern: Optional[str]) -> unittest.TestSuite:
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = [f"*{pattern}*"]
    suite = unittest.TestSuite()
    for name in sorted(vars(module)):
        obj = getattr(module, name)
        if not (isinstance(obj, type) and issubclass(obj, unittest.TestCase)
                and obj.__module__ == module.__name__):
            continue
        cls = obj if plain or not isinstance(getattr(obj, "COMM", None), MPI.Comm) else _substituted(obj)
        suite.addTests(loader.loadTestsFromTestCase(cls))
    return suite


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite_dir")
    ap.add_argument("out_dir")
    ap.add_argument("modules", nargs="+")
    ap.add_argument("--plain", action="store_true", help="run the modules unchanged (reference)")
    ap.add_argument("-k", dest="pattern", default=None, help="only tests whose name contains this")
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    sys.path.insert(0, os.path.abspath(args.suite_dir))
    os.makedirs(args.out_dir, exist_ok=True)
    outcomes: dict[str, str] = {}
    details: dict[str, str] = {}
    with open(os.path.join(args.out_dir, f"rank{rank}.jsonl"), "w") as log:
        for name in args.modules:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - reported as the module's error
                outcomes[f"{name}.<import>"] = "error"
                details[f"{name}.<import>"] = traceback.format_exc()
                continue
            result = Outcomes(log)
            _suite(module, args.plain, args.pattern).run(result)
            outcomes.update(result.outcomes)
            details.update(result.details)
    print_summary(world, outcomes, details, substituted=_SUBSTITUTED[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
