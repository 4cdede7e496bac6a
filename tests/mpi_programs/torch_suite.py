"""torch's own torch.distributed test suite, run under mpiexec on one backend.

Usage: python -m mpi_programs.torch_suite OUT_DIR --backend NAME [--as NAME] [-k SUBSTRING]... [--list]

The suite is ``DistributedTest._DistTestBase`` of
``torch.testing._internal.distributed.distributed_test``, which ships inside
the torch wheel installed from the package index; nothing of it lives in this
repository. torch runs it with one process per rank, each starting a fresh
process group for every test (``TestDistBackend``); here the ranks are
mpiexec's, and every rank does the same for each test: a fresh process group
(a new ``file://`` rendezvous) on ``--backend``, the test method called as
torch's own runner calls it (unittest's skip marks honoured first), torch's
file barrier before and after it, the group destroyed.

The suite decides what to run by the name in BACKEND, read at its import:
``--as`` sets that name (default: ``--backend``). ``--backend pymcoll --as
gloo`` runs the tests torch runs on its CPU backend, on pymcoll groups;
``--as mpi`` the ones torch keeps to MPI. Under its own name pymcoll tells the
suite what it implements through torch's switches for a plugin backend
(``DistTestCases``): DDP and subgroups. ``--backend gloo`` is the reference.

Skips keep torch's reasons: a ``SkipTest``, unittest's skip mark, or a
``sys.exit`` with one of torch's skip codes (no GPU, world size). Each rank
writes OUT_DIR/rank<N>.jsonl as it goes (see suite_result.py); rank 0 prints
one JSON summary line at the end. ``--list`` prints the test names and exits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import traceback
import unittest
from datetime import timedelta
from typing import Any, Optional

from mpi4py import MPI

from .suite_result import Outcomes, print_summary

#: What pymcoll's backend implements, in the words of torch's DistTestCases (common_distributed.py).
PYMCOLL_FEATURES = ("ddp", "subgroup", "plugin")


def _environment(suite_backend: str, world: Any) -> str:
    """Sets what distributed_test.py reads at import (BACKEND: `suite_backend`, WORLD_SIZE,
    TEMP_DIR, INIT_METHOD) on every rank, with one temporary directory for all (rank 0's, on the
    ranks' shared host)."""
    where = tempfile.mkdtemp(prefix="pymcoll-torch-suite-") if world.Get_rank() == 0 else None
    where = world.bcast(where, root=0)
    if world.Get_rank() == 0:
        for sub in ("barrier", "test_dir", "init_dir"):
            os.mkdir(os.path.join(where, sub))
    world.Barrier()
    os.environ.update({"BACKEND": suite_backend, "WORLD_SIZE": str(world.Get_size()), "TEMP_DIR": where,
                       "INIT_METHOD": "file://" + os.path.join(where, "init_dir", "shared_init_file")})
    return where


def _suite_class(backend: str, suite_backend: str) -> type:
    """The suite's test class, mixed into torch's TestCase as torch's own runner does."""
    if backend == "pymcoll":
        import pymcoll.torch  # noqa: F401 - registers the backend (collective over COMM_WORLD)
    if suite_backend == "pymcoll":
        from torch.testing._internal.common_distributed import DistTestCases

        for feature in PYMCOLL_FEATURES:
            DistTestCases.backend_feature[feature].add(suite_backend)
    # Imported after the environment and the switches: its decorators read both at import.
    from torch.testing._internal.common_utils import TestCase
    from torch.testing._internal.distributed.distributed_test import DistributedTest

    return type("TestDistBackend", (DistributedTest._DistTestBase, TestCase), {"__module__": __name__})


def _test_names(cls: type, patterns: list[str]) -> list[str]:
    names = sorted(n for n in dir(cls) if n.startswith("test_") and callable(getattr(cls, n)))
    return [n for n in names if not patterns or any(p in n for p in patterns)]


def _skip_reason(exc: SystemExit) -> Optional[str]:
    """torch's reason when a test ended its process with one of torch's skip codes, else None."""
    from torch.testing._internal.common_distributed import TEST_SKIPS

    for skip in TEST_SKIPS.values():
        if exc.code == skip.exit_code:
            return skip.message
    return None


def _run_one(cls: type, name: str, backend: str, rank: int, where: str, index: int, result: Outcomes) -> None:
    """One test as torch's TestDistBackend runs it in each rank's process."""
    import torch.distributed as dist
    from torch.testing._internal import common_utils
    from torch.testing._internal.distributed.distributed_test import (CUSTOM_PG_TIMEOUT, Barrier,
                                                                      default_pg_timeout)

    test = cls(name)
    test.rank = rank
    test.world_size = os.environ["WORLD_SIZE"]  # a string, as torch's TestDistBackend has it
    test.file_name = os.path.join(where, "init_dir", f"test{index}")
    result.startTest(test)
    method = getattr(cls, name)
    if getattr(method, "__unittest_skip__", False):  # unittest's own skip mark: the test never starts
        result.addSkip(test, getattr(method, "__unittest_skip_why__", ""))
        result.stopTest(test)
        return
    try:
        Barrier.barrier_id = 0
        common_utils.set_rng_seed()
        dist.init_process_group(init_method="file://" + test.file_name, backend=backend,
                                world_size=int(os.environ["WORLD_SIZE"]), rank=rank,
                                timeout=timedelta(seconds=CUSTOM_PG_TIMEOUT.get(name, default_pg_timeout)))
        try:
            test._barrier()
            getattr(test, name)()
            test._barrier()
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    except unittest.SkipTest as exc:
        result.addSkip(test, str(exc))
    except SystemExit as exc:
        reason = _skip_reason(exc)
        if reason is not None:
            result.addSkip(test, reason)
        else:
            result.addError(test, sys.exc_info())
    except AssertionError:
        result.addFailure(test, sys.exc_info())
    except Exception:  # noqa: BLE001 - every other exception is the test's error, as torch counts it
        result.addError(test, sys.exc_info())
    finally:
        result.stopTest(test)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--backend", required=True, choices=("pymcoll", "gloo"), help="the process groups' backend")
    ap.add_argument("--as", dest="suite_backend", choices=("pymcoll", "gloo", "mpi"), default=None,
                    help="the backend name the suite's own choices see (default: --backend)")
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="only tests whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the selected test names and exit")
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    suite_backend = args.suite_backend or args.backend
    where = _environment(suite_backend, world)
    try:
        cls = _suite_class(args.backend, suite_backend)
        names = _test_names(cls, args.patterns)
        if args.list:
            if rank == 0:
                print("\n".join(names), flush=True)
            return 0
        os.makedirs(args.out_dir, exist_ok=True)
        with open(os.path.join(args.out_dir, f"rank{rank}.jsonl"), "w") as log:
            result = Outcomes(log)
            for index, name in enumerate(names):
                world.Barrier()  # a test left early by one rank does not overlap the next
                if rank == 0:
                    from torch.testing._internal.distributed.distributed_test import Barrier

                    Barrier.init()  # clears the file barrier's directory, as torch's setUp does
                world.Barrier()
                _run_one(cls, name, args.backend, rank, where, index, result)
        print_summary(world, result.outcomes, result.details)
    except Exception:  # noqa: BLE001 - the suite could not even start: say why, on every rank
        traceback.print_exc()
        world.Abort(1)
    finally:
        world.Barrier()
        if rank == 0:
            shutil.rmtree(where, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
