"""Single-copy Reduce_scatter(_block), whose results are written with streaming
stores, and Reduce beside it (run with PYMCOLL_STREAM_MIN below the results'
sizes and PYMCOLL_COPY=cma): results one element short of, at and past the 4 KiB blocks
the stores go out in and the 512 KiB chunks the inputs are fetched in; result
buffers at a line boundary, one element past it and one byte past it (elements
that straddle lines); integer, floating and complex elements; in place and
not; uneven Reduce_scatter counts. Every rank computes the expected result
from every rank's input with numpy, in rank order, and compares the bytes of
its result and of the buffer around it."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main, report_cases

BLOCK = 4096  # bytes of results made aside, then streamed out (native/src/coll/cma_expose.c)
CHUNK = 512 << 10  # bytes of an input fetched at a time (native/src/coll/node_algos.h)
CASES = (("int32", MPI.SUM, np.add), ("float64", MPI.SUM, np.add), ("complex128", MPI.PROD, np.multiply),
         ("int8", MPI.MAX, np.maximum), ("uint16", MPI.MIN, np.minimum), ("float32", MPI.SUM, np.add))
PAD = 128  # bytes before and after each result, which must stay as they were


def inputs(seed: int, rank: int, count: int, dtype: np.dtype) -> np.ndarray:
    """Small values, so that sums and products of a few ranks are exact in every type."""
    rng = np.random.default_rng([seed, rank])
    values = rng.integers(-3 if dtype.kind != "u" else 0, 4, count)
    if dtype.kind == "c":
        return (values + 1j * rng.integers(-3, 4, count)).astype(dtype)
    return values.astype(dtype)


def placed(count: int, dtype: np.dtype, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """A result view of `count` elements `shift` bytes past a 64-byte boundary inside a guarded
    byte buffer; returns (view, the whole buffer)."""
    raw = np.empty(PAD + shift + count * dtype.itemsize + PAD + 64, np.uint8)
    base = (-raw.ctypes.data) % 64  # first 64-byte boundary in raw
    raw[:] = 0xA5
    start = base + PAD + shift
    return raw[start:start + count * dtype.itemsize].view(dtype), raw


def expected(seed: int, n: int, total: int, dtype: np.dtype, fn) -> np.ndarray:
    acc = inputs(seed, 0, total, dtype)
    for r in range(1, n):
        acc = fn(acc, inputs(seed, r, total, dtype)).astype(dtype)
    return acc


def run_cases(comm: pymcoll.Comm, verdicts: MPI.Comm) -> tuple[int, list[str]]:
    """Every case on every rank; returns how many ran and the failures every rank saw."""
    n, rank = comm.Get_size(), comm.Get_rank()
    bad: list[str] = []
    ran = 0
    for name, op, fn in CASES:
        dtype = np.dtype(name)
        e = dtype.itemsize
        per_rank = sorted({BLOCK // e - 1, BLOCK // e, BLOCK // e + 1, 3 * BLOCK // e + 7,
                           CHUNK // e - 1, CHUNK // e + BLOCK // e + 1})
        for block in per_rank:
            for shift in (0, e, 1):
                for form in ("block", "uneven", "in_place", "reduce"):
                    seed = ran
                    counts = [block + (r if form == "uneven" else 0) for r in range(n)]
                    total = sum(counts)
                    want = expected(seed, n, total, dtype, fn)
                    mine = inputs(seed, rank, total, dtype)
                    lo = sum(counts[:rank])
                    if form == "reduce":
                        root = ran % n
                        recv, raw = placed(total, dtype, shift)
                        comm.Reduce(mine, recv if rank == root else None, op=op, root=root)
                        got_ok = rank != root or recv.tobytes() == want.tobytes()
                    elif form == "in_place":
                        recv, raw = placed(total, dtype, shift)
                        recv[:] = mine
                        comm.Reduce_scatter_block(MPI.IN_PLACE, recv, op=op)
                        got_ok = recv[:block].tobytes() == want[lo:lo + block].tobytes()
                        recv = recv[:block]  # the rest is left as MPI leaves it: not checked
                    else:
                        recv, raw = placed(counts[rank], dtype, shift)
                        if form == "block":
                            comm.Reduce_scatter_block(mine, recv, op=op)
                        else:
                            comm.Reduce_scatter(mine, recv, counts, op=op)
                        got_ok = recv.tobytes() == want[lo:lo + counts[rank]].tobytes()
                    start = recv.ctypes.data - raw.ctypes.data
                    end = start + (recv.nbytes if form != "in_place" else total * e)
                    guards_ok = bool((raw[:start] == 0xA5).all() and (raw[end:] == 0xA5).all())
                    ran += 1
                    problem = "" if got_ok and guards_ok else (
                        f"{form} {name} {block}/rank shift {shift}: "
                        + ("wrong result " if not got_ok else "") + ("wrote outside " if not guards_ok else ""))
                    bad += [f"rank {r}: {p}" for r, p in enumerate(verdicts.allgather(problem)) if p]
    return ran, bad


def body() -> None:
    world = MPI.COMM_WORLD
    verdicts = world.Dup()
    with pymcoll.Comm(world) as comm:
        ran, bad = run_cases(comm, verdicts)
    verdicts.Free()
    report_cases(world.rank, world.size, ran, bad)


if __name__ == "__main__":
    main(body)
