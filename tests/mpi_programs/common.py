"""Helpers shared by the MPI test programs."""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Callable

import numpy as np
from mpi4py import MPI

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Every numpy dtype that MPI maps to a predefined datatype.
MPI_DTYPES = [
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "longdouble", "complex64", "complex128", "clongdouble", "bool",
]


def agree(ok: bool, comm: MPI.Comm) -> bool:
    """True only if every rank says ok (over `comm`, a duplicate kept for verdicts)."""
    return bool(comm.allreduce(bool(ok), op=MPI.LAND))


def data_for(seed: int, rank: int, count: int, dtype: str) -> np.ndarray:
    """Deterministic test data that differs per rank and per example."""
    rng = np.random.default_rng([seed, rank])
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, count).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, count, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(count) + 1j * rng.standard_normal(count)).astype(dt)
    return rng.standard_normal(count).astype(dt)


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN-safe); long doubles compare by value because
    their padding bytes are not part of the value."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc" and a.dtype in (np.dtype("longdouble"), np.dtype("clongdouble")):
        return bool(np.array_equal(a, b, equal_nan=True))
    return a.tobytes() == b.tobytes()


def waited_within(rank: int, t0: float, timeout: float, exc: BaseException) -> None:
    """A rank that gave up on a late peer: report the wait, which must end near the deadline."""
    waited = time.monotonic() - t0
    print(f"rank {rank} waited {waited:.2f} s, got {type(exc).__name__}: {exc}", flush=True)
    assert waited < timeout + 2.0, f"waited {waited:.2f} s past a {timeout} s deadline"


def assert_broken(comm) -> None:
    """A communicator broken by a timeout refuses the next collective, naming Free()."""
    import pymcoll
    try:
        comm.Barrier()
        raise AssertionError("a broken communicator accepted another collective")
    except pymcoll.CommBrokenError as broken:
        assert "Free()" in str(broken), str(broken)


def free_and_recover(comm, world: MPI.Comm, recv: np.ndarray) -> None:
    """Free() works after a failure, and a new communicator works once every rank is back."""
    import pymcoll
    rank, size = world.rank, world.size
    comm.Free()
    world.Barrier()
    with pymcoll.Comm(world) as again:
        again.Allgather(np.full(8, rank, np.int32), recv)
        assert (recv.reshape(size, 8) == np.arange(size)[:, None]).all()
    print(f"rank {rank} recovered", flush=True)


def main(body: Callable[[], None]) -> None:
    """Run body; on an exception print it with the rank and abort the job."""
    try:
        body()
    except BaseException:  # noqa: BLE001 - report and abort every rank
        sys.stdout.flush()
        print(f"[rank {MPI.COMM_WORLD.Get_rank()}] FAILED", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


def gapped(counts: list[int]) -> tuple[list[int], int]:
    """Displacements leaving one unused element after each block, and the total length."""
    displs, at = [], 0
    for c in counts:
        displs.append(at)
        at += c + 1
    return displs, at


def report_cases(rank: int, n: int, ran: int, bad: list[str]) -> None:
    """Rank 0 prints how many cases ran and every failure ("N cases on n ranks, K failed",
    which the tests look for); every rank then fails if any case did."""
    if rank == 0:
        print(f"{ran} cases on {n} ranks, {len(bad)} failed", flush=True)
        for line in bad:
            print(line, flush=True)
    assert not bad, bad[:3]
