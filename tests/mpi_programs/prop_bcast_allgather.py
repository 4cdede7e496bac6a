"""Property test of Bcast and Allgather against a numpy reference, under MPI.

Every rank draws the same examples (derandomized hypothesis, no database) and
builds its buffers from the example alone; verdicts are agreed across ranks
on a separate communicator before asserting, so all ranks pass, fail and
shrink in lock step.

Usage: python -m mpi_programs.prop_bcast_allgather [--examples N] [--max-bytes B]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import pymcoll

from .common import CI, MPI_DTYPES, agree, data_for, main, same_bytes

try:
    import torch
except ImportError:  # the torch extra is optional for users, installed in CI
    torch = None

SPEC_FORMS = ["plain", "typed", "counted", "torch"]


def thresholds(layout: pymcoll.Layout) -> list[int]:
    """Byte sizes where the data path changes: chunk and cell boundaries.

    Computed for every node size in the communicator, so that every rank
    gets the same list (the examples drawn from it must agree)."""
    edges = {layout.chunk_bytes, layout.data_bytes, 2 * layout.chunk_bytes}
    for local in range(layout.min_local, layout.max_local + 1):
        region = (layout.data_bytes // local) // 64 * 64
        edges.add(min(region // 2 // 64 * 64, 1 << 20))
    return sorted(e for e in edges if e > 0)


def torch_dtype(np_dtype: str):
    """torch dtype for a numpy dtype name, or None if torch has none."""
    if torch is None:
        return None
    return {
        "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
        "uint8": torch.uint8, "float16": torch.float16, "float32": torch.float32,
        "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128,
        "bool": torch.bool, "bfloat16": torch.bfloat16,
    }.get(np_dtype)


def make_buffer(form: str, arr: np.ndarray, count: int, dtype: str):
    """Wrap arr as the given buffer spec form; returns (spec, view as numpy bytes getter)."""
    if form == "typed":
        mpitype = MPI._typedict[arr.dtype.char] if hasattr(MPI, "_typedict") else None
        if mpitype is not None:
            return [arr, mpitype], lambda: arr
    if form == "counted":
        mpitype = MPI._typedict[arr.dtype.char] if hasattr(MPI, "_typedict") else None
        if mpitype is not None:
            return [arr, count, mpitype], lambda: arr
    if form == "torch" and torch_dtype(dtype) is not None:
        t = torch.from_numpy(arr.copy()) if dtype != "bfloat16" else None
        if t is not None:
            return t, lambda: t.numpy()
    return arr, lambda: arr


@st.composite
def cases(draw, size: int, limits: list[int], max_bytes: int):
    """One collective case: what every rank needs to build its buffers."""
    coll = draw(st.sampled_from(["bcast", "allgather"]))
    dtype = draw(st.sampled_from(MPI_DTYPES + (["bfloat16"] if torch is not None else [])))
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    per_rank_max = max_bytes // (size if coll == "allgather" else 1)
    edge_counts = sorted({max(0, e // itemsize + d) for e in limits for d in (-1, 0, 1)
                          if (e // itemsize + d) * itemsize <= per_rank_max})
    count = draw(st.one_of(st.integers(0, 64), st.integers(0, per_rank_max // itemsize),
                           st.sampled_from(edge_counts or [0])))
    root = draw(st.integers(0, size - 1))
    in_place = draw(st.booleans()) if coll == "allgather" else False
    form = draw(st.sampled_from(SPEC_FORMS if dtype != "bfloat16" else ["torch"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(coll=coll, dtype=dtype, count=count, root=root, in_place=in_place, form=form, seed=seed)


def run_case(comm: pymcoll.Comm, case: dict) -> tuple[bool, str]:
    """Run one case on this rank; (ok, why)."""
    rank, size = comm.rank, comm.size
    dtype, count = case["dtype"], case["count"]
    if dtype == "bfloat16":
        return run_case_bfloat16(comm, case)
    if case["coll"] == "bcast":
        expect = data_for(case["seed"], case["root"], count, dtype)
        arr = expect.copy() if rank == case["root"] else np.zeros(count, dtype)
        spec, view = make_buffer(case["form"], arr, count, dtype)
        comm.Bcast(spec, root=case["root"])
        got = view()
        return same_bytes(got, expect), f"Bcast result differs on rank {rank}"
    blocks = [data_for(case["seed"], r, count, dtype) for r in range(size)]
    expect = np.concatenate(blocks) if blocks else np.zeros(0, dtype)
    recv = np.zeros(size * count, dtype)
    guard = np.full(8, 0x5A, np.uint8)  # bytes past the receive region must stay untouched
    backing = np.concatenate([recv.view(np.uint8), guard])
    recv = backing[: recv.nbytes].view(dtype)
    if case["in_place"]:
        recv[rank * count:(rank + 1) * count] = blocks[rank]
        spec, view = make_buffer(case["form"] if case["form"] != "counted" else "plain", recv, count, dtype)
        comm.Allgather(MPI.IN_PLACE, spec)
    else:
        send = blocks[rank].copy()
        sspec, _ = make_buffer(case["form"], send, count, dtype)
        spec, view = make_buffer(case["form"] if case["form"] != "counted" else "plain", recv, count, dtype)
        comm.Allgather(sspec, spec)
    got = view()
    if not (backing[recv.nbytes:] == 0x5A).all():
        return False, "Allgather wrote past the receive region"
    return same_bytes(got, expect), f"Allgather result differs on rank {rank}"


def run_case_bfloat16(comm: pymcoll.Comm, case: dict) -> tuple[bool, str]:
    """bfloat16 exists only as torch tensors."""
    rank, size, count = comm.rank, comm.size, case["count"]

    def bf(r: int):
        return torch.from_numpy(data_for(case["seed"], r, count, "float32")).to(torch.bfloat16)

    if case["coll"] == "bcast":
        t = bf(rank) if rank == case["root"] else torch.zeros(count, dtype=torch.bfloat16)
        comm.Bcast(t, root=case["root"])
        return bool(torch.equal(t, bf(case["root"]))), "bfloat16 Bcast differs"
    recv = torch.zeros(size * count, dtype=torch.bfloat16)
    if case["in_place"]:
        recv[rank * count:(rank + 1) * count] = bf(rank)
        comm.Allgather(MPI.IN_PLACE, recv)
    else:
        comm.Allgather(bf(rank), recv)
    expect = torch.cat([bf(r) for r in range(size)]) if size else recv
    return bool(torch.equal(recv, expect)), "bfloat16 Allgather differs"


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=25 if CI else 80)
    ap.add_argument("--max-bytes", type=int, default=(256 << 10) if CI else (1 << 20))
    args = ap.parse_args()

    world = MPI.COMM_WORLD
    verdicts = world.Dup()  # verdict traffic never mixes with the tested calls
    comm = pymcoll.Comm(world)
    limits = thresholds(comm.layout)
    max_bytes = args.max_bytes
    failures: list[str] = []
    ran: list[dict] = []

    @settings(max_examples=args.examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink],
              report_multiple_bugs=False)
    @given(case=cases(comm.size, limits, max_bytes))
    def check(case: dict) -> None:
        ran.append(case)
        # Examples drawn from rank-dependent inputs would desynchronise the
        # ranks; catch that as a clear failure, not as a hang.
        drawn = verdicts.allgather(repr(case))
        if len(set(drawn)) != 1:
            raise RuntimeError(f"ranks drew different examples: {drawn}")
        try:
            ok, why = run_case(comm, case)
        except Exception as exc:  # noqa: BLE001 - turned into an agreed verdict
            ok, why = False, f"{type(exc).__name__}: {exc}"
        if not ok and not failures:
            print(f"[rank {comm.rank}] first failure: {case}: {why}", file=sys.stderr, flush=True)
        if not agree(ok, verdicts):
            failures.append(f"rank {comm.rank}: {case} -> {'ok here' if ok else why}")
            raise AssertionError(f"case failed on some rank: {case}; here: {'ok' if ok else why}")

    check()
    # One more agreed verdict: every rank finished every example.
    assert agree(True, verdicts)
    if comm.rank == 0:
        print(f"OK {len(ran)} examples ({sum(c['count'] for c in ran)} elements), {comm.layout.describe()}, shm={comm.layout.shm_active}")
    comm.Free()
    verdicts.Free()


if __name__ == "__main__":
    main(body)
