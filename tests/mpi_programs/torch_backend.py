"""The torch.distributed backend "pymcoll" against gloo and a local reference.

The default group is "pymcoll" (rank and size from MPI, no environment set by
the launcher); a gloo group over the same ranks shares torch's store. Every
operation runs on both with the same inputs. Inputs are deterministic per
(case, rank), so every rank also computes every result itself: pymcoll's
result is always compared with that local reference, and with gloo's where
gloo takes the dtype and op (gloo has no int16 or uint16/32/64, no complex
gather, no AVG of integers, no bitwise ops on floating types). Integer, bool
and data-movement results must match exactly; floating reductions to a
tolerance (the order of combination may differ).

Parts (select with --parts, default "mabsnxc"):
  m  every operation x every dtype it supports, cycling through the modes
     sync, async wait() and async get_future(); every reduce op per dtype
  a  several async operations outstanding at once, waited in reverse order,
     through futures and is_completed(); barrier; object collectives
  b  bad inputs: each raises an error naming the operation (and argument),
     and the group still works afterwards
  s  new_group subgroups (every other rank; all but rank 0) against gloo subgroups
  n  non-contiguous inputs and outputs
  x  zero-element tensors
  c  sparse COO all_reduce (SUM, AVG; entries that overlap and entries only one rank has) and
     all_gather_coalesced, against gloo and a local reference; their bad inputs; a barrier
     that times out raises what torch's backends raise (RuntimeError, "Timed out")
  e  (alone) RANK/WORLD_SIZE that disagree with MPI: the import raises on every rank

Prints "rank R torch_backend ok" per rank; on a wrong result every rank
prints the failures and exits 1 (the verdict is agreed first, so nothing hangs).

Usage: python -m mpi_programs.torch_backend [--parts mabsnxc]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from datetime import timedelta
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from .common import CI, agree, main

# torch warns about its own deprecated names (all_gather_into_tensor, ...), once per call site.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning, message=".*sparse.*")

ALL_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
              "float16", "bfloat16", "float32", "float64", "complex64", "complex128"]
# CI: fewer dtypes, still one of every kind (and every operation runs).
CI_DTYPES = ["bool", "uint8", "int16", "int64", "uint32", "float16", "bfloat16", "float32", "complex128"]
GLOO_LACKS = {"int16", "uint16", "uint32", "uint64"}  # gloo raises "Invalid scalar type"
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG"]
MODES = ["sync", "wait", "future"]
SIZES = [5, 33, 1000]


def kind(dt: str) -> str:
    if dt == "bool":
        return "b"
    if dt.startswith("complex"):
        return "c"
    if dt.startswith(("float", "bfloat")):
        return "f"
    return "i"


def valid_ops(dt: str) -> list[str]:
    """The reduce ops the backend accepts for dtype `dt` (what the others must refuse)."""
    k = kind(dt)
    if k == "b":
        return [o for o in OPS if o != "AVG"]
    if k == "i":
        return [o for o in OPS if o != "AVG"]
    if k == "f":
        return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
    return ["SUM", "PRODUCT", "AVG"]


class Ctx:
    """What every check needs: ranks, groups, the case counter and the failures."""

    def __init__(self, torch: Any, dist: Any) -> None:
        self.torch, self.dist = torch, dist
        self.world = MPI.COMM_WORLD
        self.rank, self.n = self.world.rank, self.world.size
        self.gloo = dist.new_group(backend="gloo")
        self.case = 0
        self.failures: list[str] = []
        self.checked = 0

    def next_case(self) -> int:
        self.case += 1
        return self.case

    def fail(self, what: str) -> None:
        self.failures.append(f"rank {self.rank}: {what}")


# -- data and reference -------------------------------------------------------------
def np_data(dt: str, count: int, rank: int, case: int) -> np.ndarray:
    """Rank `rank`'s input of case `case` (numpy; bfloat16 as float32 values that bfloat16 holds)."""
    rng = np.random.default_rng([case, rank, 12345])
    k = kind(dt)
    if k == "b":
        return rng.integers(0, 2, count).astype(bool)
    if k == "i":
        if dt.startswith("u"):
            return rng.integers(1, 6, count).astype(dt)
        return rng.integers(-4, 5, count).astype(dt)
    if k == "c":
        return (rng.standard_normal(count) + 1j * rng.standard_normal(count)).astype(dt)
    vals = rng.standard_normal(count)
    if dt == "bfloat16":
        import torch

        return torch.from_numpy(vals.astype(np.float32)).to(torch.bfloat16).float().numpy()
    return vals.astype(dt)


def tensor_of(ctx: Ctx, arr: np.ndarray, dt: str) -> Any:
    torch = ctx.torch
    t = torch.from_numpy(np.ascontiguousarray(arr).copy())
    return t.to(torch.bfloat16) if dt == "bfloat16" else t


def to_np(t: Any) -> np.ndarray:
    import torch

    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).contiguous().numpy().copy()


def reference(op: str, arrays: list[np.ndarray], dt: str) -> np.ndarray:
    """The reduction of `arrays` by torch's op `op`, in a wide type, cast back to `dt`'s numpy type."""
    stack = np.stack(arrays)
    k = kind(dt)
    if k == "b":
        r = {"SUM": np.any, "MAX": np.any, "BOR": np.any, "PRODUCT": np.all, "MIN": np.all,
             "BAND": np.all}.get(op)
        return r(stack, axis=0) if r else np.logical_xor.reduce(stack, axis=0)
    wide = stack.astype(np.complex128 if k == "c" else (np.float64 if k == "f" else stack.dtype))
    out = {"SUM": lambda: wide.sum(axis=0), "PRODUCT": lambda: wide.prod(axis=0), "MIN": lambda: wide.min(axis=0),
           "MAX": lambda: wide.max(axis=0), "AVG": lambda: wide.mean(axis=0),
           "BAND": lambda: np.bitwise_and.reduce(wide, axis=0), "BOR": lambda: np.bitwise_or.reduce(wide, axis=0),
           "BXOR": lambda: np.bitwise_xor.reduce(wide, axis=0)}[op]()
    return out.astype(np.float32 if dt == "bfloat16" else dt)


TOL = {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-5, "float64": 1e-12, "complex64": 1e-5,
       "complex128": 1e-12}


def same(ctx: Ctx, what: str, got: Any, want: Any, exact: bool, dt: str) -> None:
    """Record a failure unless `got` equals `want` (exactly, or to the dtype's tolerance)."""
    ctx.checked += 1
    g = to_np(got) if not isinstance(got, np.ndarray) else got
    w = to_np(want) if not isinstance(want, np.ndarray) else want
    w = np.asarray(w).reshape(g.shape) if w.size == g.size else w
    if g.shape != w.shape:
        ctx.fail(f"{what}: shape {g.shape} != {w.shape}")
        return
    if exact or kind(dt) in "bi":
        ok = np.array_equal(g, w)
    else:
        tol = TOL[dt]
        ok = np.allclose(g, w, rtol=tol, atol=tol * 4)
    if not ok:
        diff = np.flatnonzero(~np.isclose(g, w, rtol=0, atol=0) if exact or kind(dt) in "bi" else
                              ~np.isclose(g, w, rtol=TOL[dt], atol=TOL[dt] * 4))
        i = int(diff[0]) if diff.size else 0
        ctx.fail(f"{what}: {diff.size} elements differ, first at {i}: {g.reshape(-1)[i]!r} != {w.reshape(-1)[i]!r}")


# -- running an operation in a mode -----------------------------------------------------
def run(ctx: Ctx, what: str, fn: Callable[[Any, bool], tuple[Any, list]], group: Any, mode: str) -> list:
    """Call fn(group, async_op) in `mode`; return the output tensors (copies)."""
    if mode == "sync":
        work, outs = fn(group, False)
        if work is not None:
            ctx.fail(f"{what}: a blocking call returned {work!r}")
    else:
        work, outs = fn(group, True)
        if work is None:
            ctx.fail(f"{what}: async_op=True returned no work")
            return outs
        if mode == "wait":
            work.wait()
        else:
            value = work.get_future().wait()
            if not isinstance(value, list):
                ctx.fail(f"{what}: the future's value is {type(value).__name__}, not a list of tensors")
            if not work.is_completed():
                ctx.fail(f"{what}: is_completed() is False after the future completed")
    return [o.clone() if hasattr(o, "clone") else [x.clone() for x in o] for o in outs]


def both(ctx: Ctx, what: str, dt: str, fn: Callable[[Any, bool], tuple[Any, list]], mode: str,
         gloo_ok: bool, exact: bool, pm_group: Any = None, gloo_group: Any = "world") -> list:
    """Run fn on pymcoll (in `mode`) and, where gloo takes the case, on gloo; compare the two."""
    pm = run(ctx, what, fn, pm_group, mode)
    if gloo_ok and gloo_group is not None:
        gl = run(ctx, what, fn, ctx.gloo if gloo_group == "world" else gloo_group, "sync")
        for a, b in zip(flatten(pm), flatten(gl)):
            same(ctx, f"{what} vs gloo", a, b, exact, dt)
    return pm


def flatten(outs: list) -> list:
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, list) else [o])
    return flat


# -- m: every operation x dtype ------------------------------------------------------------
def part_m(ctx: Ctx, dtypes: list[str]) -> None:
    torch, dist = ctx.torch, ctx.dist
    rop, n, rank = dist.ReduceOp, ctx.n, ctx.rank
    modes = iter(int(i) for i in range(10**9))

    def mode() -> str:
        return MODES[next(modes) % len(MODES)]

    for di, dt in enumerate(dtypes):
        gloo_dt = dt not in GLOO_LACKS
        size = SIZES[di % len(SIZES)]
        tdt = getattr(torch, dt)

        # all_reduce, every op the dtype takes (complex: torch itself takes SUM and AVG only)
        for op in valid_ops(dt):
            if kind(dt) == "c" and op == "PRODUCT":
                continue  # torch's all_reduce refuses it for complex before any backend sees it
            case = ctx.next_case()
            xs = [np_data(dt, size, r, case) for r in range(n)]

            def f_allreduce(group: Any, async_op: bool, xs=xs, op=op) -> tuple:
                t = tensor_of(ctx, xs[rank], dt)
                return dist.all_reduce(t, op=getattr(rop, op), group=group, async_op=async_op), [t]

            what = f"all_reduce {dt} {op} n={size}"
            got = both(ctx, what, dt, f_allreduce, mode(), gloo_dt, False)
            same(ctx, what, got[0], reference(op, xs, dt), False, dt)

        # reduce: SUM and one more op per dtype, root cycling
        for op in ["SUM", valid_ops(dt)[-1]]:
            case = ctx.next_case()
            root = case % n
            xs = [np_data(dt, size, r, case) for r in range(n)]

            def f_reduce(group: Any, async_op: bool, xs=xs, op=op, root=root) -> tuple:
                t = tensor_of(ctx, xs[rank], dt)
                return dist.reduce(t, root, op=getattr(rop, op), group=group, async_op=async_op), [t]

            what = f"reduce {dt} {op} root={root}"
            # gloo's reduce leaves non-root tensors in an unspecified state: compare at the root only.
            got = run(ctx, what, f_reduce, None, mode())
            if rank == root:
                same(ctx, what, got[0], reference(op, xs, dt), False, dt)
            else:
                same(ctx, what + " (non-root keeps its input)", got[0], xs[rank], True, dt)
            if gloo_dt and (kind(dt) != "c" or op == "SUM"):
                gl = run(ctx, what, f_reduce, ctx.gloo, "sync")
                if rank == root:
                    same(ctx, what + " vs gloo", got[0], gl[0], False, dt)

        # broadcast
        case = ctx.next_case()
        root = case % n
        xs = [np_data(dt, size, r, case) for r in range(n)]

        def f_bcast(group: Any, async_op: bool, xs=xs, root=root) -> tuple:
            t = tensor_of(ctx, xs[rank], dt)
            return dist.broadcast(t, root, group=group, async_op=async_op), [t]

        what = f"broadcast {dt} root={root}"
        got = both(ctx, what, dt, f_bcast, mode(), gloo_dt, True)
        same(ctx, what, got[0], xs[root], True, dt)

        # all_gather (list)
        case = ctx.next_case()
        xs = [np_data(dt, size, r, case) for r in range(n)]

        def f_allgather(group: Any, async_op: bool, xs=xs) -> tuple:
            outs = [torch.zeros(size, dtype=tdt) for _ in range(n)]
            w = dist.all_gather(outs, tensor_of(ctx, xs[rank], dt), group=group, async_op=async_op)
            return w, [outs]

        what = f"all_gather {dt}"
        got = both(ctx, what, dt, f_allgather, mode(), gloo_dt, True)
        for r in range(n):
            same(ctx, f"{what} [{r}]", got[0][r], xs[r], True, dt)

        # all_gather_into_tensor (gloo takes the concatenated form only; part x tries the stacked one)
        case = ctx.next_case()
        xs = [np_data(dt, size, r, case) for r in range(n)]

        def f_agit(group: Any, async_op: bool, xs=xs) -> tuple:
            out = torch.zeros(n * size, dtype=tdt)
            w = dist.all_gather_into_tensor(out, tensor_of(ctx, xs[rank], dt), group=group, async_op=async_op)
            return w, [out]

        what = f"all_gather_into_tensor {dt}"
        got = both(ctx, what, dt, f_agit, mode(), gloo_dt, True)
        same(ctx, what, got[0], np.concatenate(xs), True, dt)

        # reduce_scatter (list) and reduce_scatter_tensor: SUM, and AVG where it is defined
        for op in ["SUM"] + (["AVG"] if "AVG" in valid_ops(dt) else []):
            case = ctx.next_case()
            xs = [np_data(dt, size * n, r, case) for r in range(n)]
            want = reference(op, xs, dt).reshape(n, size)[rank]

            def f_rs(group: Any, async_op: bool, xs=xs, op=op) -> tuple:
                ins = list(tensor_of(ctx, xs[rank], dt).view(n, size).unbind(0))
                out = torch.zeros(size, dtype=tdt)
                return dist.reduce_scatter(out, ins, op=getattr(rop, op), group=group, async_op=async_op), [out]

            what = f"reduce_scatter {dt} {op}"
            got = both(ctx, what, dt, f_rs, mode(), gloo_dt, False)
            same(ctx, what, got[0], want, False, dt)

            def f_rst(group: Any, async_op: bool, xs=xs, op=op) -> tuple:
                out = torch.zeros(size, dtype=tdt)
                w = dist.reduce_scatter_tensor(out, tensor_of(ctx, xs[rank], dt), op=getattr(rop, op), group=group,
                                               async_op=async_op)
                return w, [out]

            what = f"reduce_scatter_tensor {dt} {op}"
            got = both(ctx, what, dt, f_rst, mode(), gloo_dt, False)
            same(ctx, what, got[0], want, False, dt)

        # all_to_all_single: equal blocks of rows, then uneven splits (rows of 3 elements)
        case = ctx.next_case()
        xs = [np_data(dt, 2 * n * 3, r, case).reshape(2 * n, 3) for r in range(n)]

        def f_a2a(group: Any, async_op: bool, xs=xs) -> tuple:
            out = torch.zeros(2 * n, 3, dtype=tdt)
            return dist.all_to_all_single(out, tensor_of(ctx, xs[rank], dt), group=group, async_op=async_op), [out]

        what = f"all_to_all_single {dt} equal"
        got = both(ctx, what, dt, f_a2a, mode(), gloo_dt, True)
        same(ctx, what, got[0], np.concatenate([xs[r][2 * rank:2 * rank + 2] for r in range(n)]), True, dt)

        # rank s sends (s + d) % 3 + (d == 0) rows to rank d: uneven, some zero-row blocks
        def rows(s: int, d: int) -> int:
            return (s + d) % 3 + (d == 0)

        case = ctx.next_case()
        xs = [np_data(dt, sum(rows(r, d) for d in range(n)) * 3, r, case).reshape(-1, 3) for r in range(n)]
        in_splits = [rows(rank, d) for d in range(n)]
        out_splits = [rows(s, rank) for s in range(n)]

        def f_a2av(group: Any, async_op: bool, xs=xs) -> tuple:
            out = torch.zeros(sum(out_splits), 3, dtype=tdt)
            w = dist.all_to_all_single(out, tensor_of(ctx, xs[rank], dt), out_splits, in_splits, group=group,
                                       async_op=async_op)
            return w, [out]

        what = f"all_to_all_single {dt} splits"
        got = both(ctx, what, dt, f_a2av, mode(), gloo_dt, True)
        pieces = []
        for s in range(n):
            start = sum(rows(s, d) for d in range(rank))
            pieces.append(xs[s][start:start + rows(s, rank)])
        same(ctx, what, got[0], np.concatenate(pieces), True, dt)

        # all_to_all (lists): equal blocks (as gloo takes them), then blocks from s to d
        # of s + d + 1 elements (local reference only: gloo wants equal sizes)
        for uneven in (False, True):
            case = ctx.next_case()

            def count(s: int, d: int, uneven: bool = uneven) -> int:
                return s + d + 1 if uneven else 4

            xs = [[np_data(dt, count(s, d), s * n + d, case) for d in range(n)] for s in range(n)]

            def f_a2al(group: Any, async_op: bool, xs=xs, count=count) -> tuple:
                outs = [torch.zeros(count(s, rank), dtype=tdt) for s in range(n)]
                ins = [tensor_of(ctx, xs[rank][d], dt) for d in range(n)]
                return dist.all_to_all(outs, ins, group=group, async_op=async_op), [outs]

            what = f"all_to_all {dt} {'uneven' if uneven else 'equal'}"
            got = both(ctx, what, dt, f_a2al, mode(), gloo_dt and not uneven, True)
            for s in range(n):
                same(ctx, f"{what} from {s}", got[0][s], xs[s][rank], True, dt)

        # gather and scatter, root cycling (gloo has no complex gather)
        case = ctx.next_case()
        root = case % n
        xs = [np_data(dt, size, r, case) for r in range(n)]

        def f_gather(group: Any, async_op: bool, xs=xs, root=root) -> tuple:
            outs = [torch.zeros(size, dtype=tdt) for _ in range(n)] if rank == root else None
            w = dist.gather(tensor_of(ctx, xs[rank], dt), outs, dst=root, group=group, async_op=async_op)
            return w, [outs or []]

        what = f"gather {dt} root={root}"
        got = both(ctx, what, dt, f_gather, mode(), gloo_dt and kind(dt) != "c", True)
        if rank == root:
            for r in range(n):
                same(ctx, f"{what} [{r}]", got[0][r], xs[r], True, dt)

        case = ctx.next_case()
        root = case % n
        xs = [np_data(dt, size, r, case) for r in range(n)]

        def f_scatter(group: Any, async_op: bool, xs=xs, root=root) -> tuple:
            ins = [tensor_of(ctx, xs[r], dt) for r in range(n)] if rank == root else None
            out = torch.zeros(size, dtype=tdt)
            return dist.scatter(out, ins, src=root, group=group, async_op=async_op), [out]

        what = f"scatter {dt} root={root}"
        got = both(ctx, what, dt, f_scatter, mode(), gloo_dt, True)
        same(ctx, what, got[0], xs[rank], True, dt)

        # send/recv around the ring (blocking: even ranks send first), then isend/irecv
        if n > 1:
            case = ctx.next_case()
            xs = [np_data(dt, size, r, case) for r in range(n)]
            nxt, prv = (rank + 1) % n, (rank - 1) % n
            m = mode()

            def f_ring(group: Any, blocking: bool, xs=xs) -> list:
                out = torch.zeros(size, dtype=tdt)
                send = tensor_of(ctx, xs[rank], dt)
                if blocking:
                    if rank % 2 == 0:
                        dist.send(send, nxt, group=group, tag=7)
                        dist.recv(out, prv, group=group, tag=7)
                    else:
                        dist.recv(out, prv, group=group, tag=7)
                        dist.send(send, nxt, group=group, tag=7)
                else:
                    rw = dist.irecv(out, prv, group=group, tag=9)
                    sw = dist.isend(send, nxt, group=group, tag=9)
                    if m == "future":
                        rw.get_future().wait()
                        sw.get_future().wait()
                    else:
                        sw.wait()
                        rw.wait()
                return [out]

            what = f"send/recv {dt} ({'blocking' if m == 'sync' else m})"
            got = f_ring(None, m == "sync")
            same(ctx, what, got[0], xs[prv], True, dt)
            if gloo_dt:
                same(ctx, what + " vs gloo", got[0], f_ring(ctx.gloo, True)[0], True, dt)


# -- a: async operations outstanding together; barrier; any-source recv; objects -------------
def part_a(ctx: Ctx) -> None:
    torch, dist = ctx.torch, ctx.dist
    n, rank = ctx.n, ctx.rank
    for rnd in range(3):
        case = ctx.next_case()
        xs = [[np_data("float64", 1000 * (k + 1), r, case * 10 + k) for r in range(n)] for k in range(4)]
        ts = [tensor_of(ctx, xs[k][rank], "float64") for k in range(4)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        b = torch.full((64,), float(rank))
        works.append(dist.broadcast(b, n - 1, async_op=True))
        g = torch.zeros(n, 8, dtype=torch.int32)
        works.append(dist.all_gather_into_tensor(g, torch.full((8,), rank, dtype=torch.int32), async_op=True))
        works.append(dist.barrier(async_op=True))
        # futures for some, is_completed polling for one, wait for the rest, in reverse order
        futs = [works[k].get_future() for k in (0, 2)] if rnd != 1 else []
        deadline = time.monotonic() + 60
        while not works[3].is_completed():
            if time.monotonic() > deadline:
                raise TimeoutError("is_completed() never became True")
            time.sleep(0.0005)
        for w in reversed(works):
            w.wait()
        for f in futs:
            f.wait()
        for k in range(4):
            same(ctx, f"async round {rnd}: all_reduce {k}", ts[k], reference("SUM", xs[k], "float64"), False, "float64")
        same(ctx, f"async round {rnd}: broadcast", b, np.full(64, float(n - 1)), True, "float64")
        same(ctx, f"async round {rnd}: all_gather_into_tensor", g,
             np.repeat(np.arange(n, dtype=np.int32), 8).reshape(n, 8), True, "int32")
        # a future's value is the output tensor list, usable in then() chains
        t = torch.ones(5)
        fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
        same(ctx, f"async round {rnd}: future then()", fut.wait(), np.full(5, 2.0 * n, np.float32), True, "float32")
    dist.barrier()

    # large messages (past pymcoll's single-copy threshold), async, against gloo
    big = 48 * 1024  # float32 elements: 192 KiB per rank
    case = ctx.next_case()
    xs = [np_data("float32", big * n, r, case) for r in range(n)]
    for label, fn, want in [
        ("all_reduce", lambda g, a: (lambda t: (dist.all_reduce(t, group=g, async_op=a), [t]))(
            tensor_of(ctx, xs[rank], "float32")), reference("SUM", xs, "float32")),
        ("broadcast", lambda g, a: (lambda t: (dist.broadcast(t, n - 1, group=g, async_op=a), [t]))(
            tensor_of(ctx, xs[rank], "float32")), xs[n - 1]),
        ("all_gather_into_tensor", lambda g, a: (lambda o: (dist.all_gather_into_tensor(
            o, tensor_of(ctx, xs[rank][:big], "float32"), group=g, async_op=a), [o]))(torch.zeros(n * big)),
         np.concatenate([x[:big] for x in xs])),
        ("reduce_scatter_tensor", lambda g, a: (lambda o: (dist.reduce_scatter_tensor(
            o, tensor_of(ctx, xs[rank], "float32"), group=g, async_op=a), [o]))(torch.zeros(big)),
         reference("SUM", xs, "float32")[rank * big:(rank + 1) * big]),
        ("all_to_all_single", lambda g, a: (lambda o: (dist.all_to_all_single(
            o, tensor_of(ctx, xs[rank], "float32"), group=g, async_op=a), [o]))(torch.zeros(n * big)),
         np.concatenate([x[rank * big:(rank + 1) * big] for x in xs])),
    ]:
        got = both(ctx, f"large {label}", "float32", fn, "future", True, label not in ("all_reduce",
                                                                                       "reduce_scatter_tensor"))
        same(ctx, f"large {label}", got[0], want, label not in ("all_reduce", "reduce_scatter_tensor"), "float32")

    # all_reduce_coalesced: several tensors (one dtype), one operation
    ts = [torch.full((k + 1,), float(rank + k)) for k in range(3)]
    dist.all_reduce_coalesced(ts, op=dist.ReduceOp.MAX)
    for k in range(3):
        same(ctx, f"all_reduce_coalesced [{k}]", ts[k], np.full(k + 1, float(n - 1 + k), np.float32), True, "float32")

    # recv from any source: rank 0 hears from every other rank
    if n > 1:
        if rank == 0:
            seen = {}
            for _ in range(n - 1):
                t = torch.zeros(4, dtype=torch.int64)
                src = dist.recv(t, tag=3)
                seen[src] = t.tolist()
            if seen != {r: [r] * 4 for r in range(1, n)}:
                ctx.fail(f"recv from any source got {seen}")
            w = dist.irecv(torch.zeros(4, dtype=torch.int64), tag=4)
            w.wait()
            if w._source_rank() != n - 1:
                ctx.fail(f"irecv from any source: source_rank() {w._source_rank()} != {n - 1}")
        else:
            dist.send(torch.full((4,), rank, dtype=torch.int64), 0, tag=3)
            if rank == n - 1:
                dist.send(torch.zeros(4, dtype=torch.int64), 0, tag=4)

    # object collectives run through the same operations
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "text": "x" * rank})
    if objs != [{"rank": r, "text": "x" * r} for r in range(n)]:
        ctx.fail(f"all_gather_object gave {objs}")
    lst = [("from", rank)] if rank == 0 else [None]
    dist.broadcast_object_list(lst, 0)
    if lst != [("from", 0)]:
        ctx.fail(f"broadcast_object_list gave {lst}")
    if dist.get_backend() != "pymcoll":
        ctx.fail(f"get_backend() is {dist.get_backend()!r}")


# -- b: bad inputs -------------------------------------------------------------------------------
def part_b(ctx: Ctx) -> None:
    torch, dist = ctx.torch, ctx.dist
    n, rank = ctx.n, ctx.rank
    rop = dist.ReduceOp

    def still_works(after: str) -> None:
        t = torch.full((3,), rank + 1, dtype=torch.int64)
        dist.all_reduce(t)
        same(ctx, f"all_reduce after {after}", t, np.full(3, n * (n + 1) // 2), True, "int64")

    def expect(label: str, fn: Callable[[], Any], error: type, *words: str) -> None:
        try:
            fn()
        except error as exc:
            msg = str(exc)
            missing = [w for w in words if w not in msg]
            if missing or "pymcoll" not in msg:
                ctx.fail(f"{label}: message {msg!r} lacks {missing}")
        except Exception as exc:  # noqa: BLE001 - the wrong class is a failure, recorded
            ctx.fail(f"{label}: raised {type(exc).__name__}: {exc}, expected {error.__name__}")
        else:
            ctx.fail(f"{label}: no error")
        still_works(label)

    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,))
    expect("meta tensor", lambda: dist.all_reduce(torch.ones(3, device="meta")), ValueError, "all_reduce", "meta")
    expect("sparse tensor broadcast", lambda: dist.broadcast(sparse, 0), ValueError, "broadcast", "sparse")
    expect("sparse all_reduce MAX", lambda: dist.all_reduce(sparse, op=rop.MAX), ValueError, "all_reduce", "SUM or AVG")
    expect("sparse all_reduce AVG of int64",
           lambda: dist.all_reduce(torch.sparse_coo_tensor(torch.tensor([[1]]), torch.tensor([3]), (4,)), op=rop.AVG),
           ValueError, "all_reduce", "AVG")
    expect("sparse all_reduce shapes differ",
           lambda: dist.all_reduce(torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (4 + rank % 2,))),
           ValueError, "all_reduce", "shape") if n > 1 else None
    expect("float8 broadcast", lambda: dist.broadcast(torch.zeros(4, dtype=torch.float8_e5m2), 0), TypeError,
           "broadcast", "float8_e5m2")
    expect("PREMUL_SUM", lambda: dist.all_reduce(torch.ones(3), op=dist._make_nccl_premul_sum(2.0)), ValueError,
           "all_reduce", "PREMUL_SUM")
    expect("AVG of int32", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=rop.AVG), ValueError,
           "all_reduce", "AVG", "int32")
    expect("BAND of float32", lambda: dist.all_reduce(torch.ones(3), op=rop.BAND), ValueError, "all_reduce", "BAND")
    expect("MAX of complex (reduce)", lambda: dist.reduce(torch.ones(3, dtype=torch.complex64), 0, op=rop.MAX),
           ValueError, "reduce", "MAX", "complex")
    expect("all_gather list too long",
           lambda: dist.all_gather([torch.zeros(2) for _ in range(n + 1)], torch.ones(2)), ValueError,
           "all_gather", "tensor_list", str(n + 1))
    expect("all_gather element count",
           lambda: dist.all_gather([torch.zeros(3) for _ in range(n)], torch.ones(2)), ValueError,
           "all_gather", "tensor_list[0]")
    expect("all_gather_into_tensor size",
           lambda: dist.all_gather_into_tensor(torch.zeros(2 * n + 1), torch.ones(2)), ValueError,
           "all_gather_into_tensor", "output_tensor")
    expect("reduce_scatter_tensor size",
           lambda: dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * n + 1)), ValueError,
           "reduce_scatter_tensor", "input")
    expect("all_to_all_single split sum",
           lambda: dist.all_to_all_single(torch.zeros(n), torch.ones(n), [1] * n, [1] * (n - 1) + [2]),
           ValueError, "all_to_all_single", "input_split_sizes", "dim 0")
    expect("all_to_all_single split count",
           lambda: dist.all_to_all_single(torch.zeros(n), torch.ones(n), [1] * (n + 1), [1] * n),
           ValueError, "all_to_all_single", "output_split_sizes")
    expect("all_to_all_single equal split",
           lambda: dist.all_to_all_single(torch.zeros(n + 1), torch.ones(n + 1)) if n > 1 else
           dist.all_to_all_single(torch.zeros(1, 2), torch.ones(1, 3)),
           ValueError, "all_to_all_single")
    expect("all_to_all list length",
           lambda: dist.all_to_all([torch.zeros(1)] * (n + 1), [torch.ones(1)] * (n + 1)), ValueError,
           "all_to_all", "output_tensor_list")
    expect("negative tag", lambda: dist.isend(torch.ones(2), (rank + 1) % n, tag=-3), ValueError, "send", "tag")
    expect("async meta tensor", lambda: dist.all_reduce(torch.ones(3, device="meta"), async_op=True), ValueError,
           "all_reduce", "meta")
    expect("all_gather_coalesced list count",
           lambda: dist.all_gather_coalesced([[torch.zeros(1)]] * (n + 1), [torch.ones(1)]), ValueError,
           "all_gather_coalesced", "output_tensor_lists", str(n + 1))
    expect("all_gather_coalesced element count",
           lambda: dist.all_gather_coalesced([[torch.zeros(2)] for _ in range(n)], [torch.ones(1)]), ValueError,
           "all_gather_coalesced", "output_tensor_lists[0][0]")
    expect("monitored_barrier on the group", lambda: dist.group.WORLD.monitored_barrier(), NotImplementedError,
           "monitored_barrier", "gloo")


# -- s: subgroups --------------------------------------------------------------------------------
def part_s(ctx: Ctx) -> None:
    torch, dist = ctx.torch, ctx.dist
    n, rank = ctx.n, ctx.rank
    # Every rank calls new_group for every group (torch's rule); members only get one back.
    specs = {"every other rank": list(range(0, n, 2)), "all but rank 0": list(range(1, n))}
    for label, ranks in specs.items():
        if not ranks:
            continue
        pm = dist.new_group(ranks, backend="pymcoll")
        gl = dist.new_group(ranks, backend="gloo")
        base = ctx.next_case()  # on every rank, so that the case numbers stay in step
        if rank not in ranks:
            continue
        g, me = len(ranks), ranks.index(rank)
        if dist.get_world_size(pm) != g or dist.get_rank(pm) != me:
            ctx.fail(f"{label}: size/rank {dist.get_world_size(pm)}/{dist.get_rank(pm)} != {g}/{me}")
        for mi, m in enumerate(MODES):
            case = 100_000 + 10 * base + mi
            xs = {r: np_data("float32", 17, r, case) for r in ranks}

            def f_ar(group: Any, async_op: bool, xs=xs) -> tuple:
                t = tensor_of(ctx, xs[rank], "float32")
                return dist.all_reduce(t, group=group, async_op=async_op), [t]

            what = f"{label} {ranks}: all_reduce ({m})"
            got = both(ctx, what, "float32", f_ar, m, True, False, pm, gl)
            same(ctx, what, got[0], reference("SUM", list(xs.values()), "float32"), False, "float32")

            src = ranks[-1]  # a global rank, as torch's API takes it

            def f_bc(group: Any, async_op: bool, xs=xs, src=src) -> tuple:
                t = tensor_of(ctx, xs[rank], "float32")
                return dist.broadcast(t, src, group=group, async_op=async_op), [t]

            what = f"{label} {ranks}: broadcast from global rank {src} ({m})"
            got = both(ctx, what, "float32", f_bc, m, True, True, pm, gl)
            same(ctx, what, got[0], xs[src], True, "float32")

            def f_ag(group: Any, async_op: bool, xs=xs) -> tuple:
                out = torch.zeros(g * 17)
                w = dist.all_gather_into_tensor(out, tensor_of(ctx, xs[rank], "float32"), group=group,
                                                async_op=async_op)
                return w, [out]

            what = f"{label} {ranks}: all_gather_into_tensor ({m})"
            got = both(ctx, what, "float32", f_ag, m, True, True, pm, gl)
            same(ctx, what, got[0], np.concatenate([xs[r] for r in ranks]), True, "float32")

            def f_a2a(group: Any, async_op: bool, g: int = g) -> tuple:
                inp = torch.tensor([rank * 100 + d for d in range(g)], dtype=torch.int64)
                out = torch.zeros(g, dtype=torch.int64)
                return dist.all_to_all_single(out, inp, group=group, async_op=async_op), [out]

            what = f"{label} {ranks}: all_to_all_single ({m})"
            got = both(ctx, what, "int64", f_a2a, m, True, True, pm, gl)
            same(ctx, what, got[0], np.array([r * 100 + me for r in ranks]), True, "int64")

        dist.barrier(group=pm)
        if g > 1:  # send/recv within the group, by global rank
            peer = ranks[(me + 1) % g]
            prev = ranks[(me - 1) % g]
            out = torch.zeros(3, dtype=torch.int32)
            rw = dist.irecv(out, prev, group=pm, tag=5)
            dist.isend(torch.full((3,), rank, dtype=torch.int32), peer, group=pm, tag=5).wait()
            rw.wait()
            same(ctx, f"{label} {ranks}: send/recv", out, np.full(3, prev, np.int32), True, "int32")
        dist.destroy_process_group(pm)


# -- n: non-contiguous tensors --------------------------------------------------------------------
def part_n(ctx: Ctx, dtypes: list[str]) -> None:
    torch, dist = ctx.torch, ctx.dist
    n, rank = ctx.n, ctx.rank

    def nc(arr: np.ndarray, dt: str) -> Any:
        """A non-contiguous tensor holding `arr` (shape (a, b)): a transposed view."""
        t = tensor_of(ctx, np.ascontiguousarray(arr.T), dt).t()
        assert not t.is_contiguous() or t.numel() <= 1
        return t

    for dt in dtypes:
        case = ctx.next_case()
        xs = [np_data(dt, 12, r, case).reshape(3, 4) for r in range(n)]
        t = nc(xs[rank], dt)
        dist.all_reduce(t)
        same(ctx, f"non-contiguous all_reduce {dt}", t, reference("SUM", xs, dt), False, dt)
        t = nc(xs[rank], dt)
        dist.all_reduce(t, async_op=True).get_future().wait()
        same(ctx, f"non-contiguous async all_reduce {dt}", t, reference("SUM", xs, dt), False, dt)
        t = nc(xs[rank], dt)
        dist.broadcast(t, n - 1)
        same(ctx, f"non-contiguous broadcast {dt}", t, xs[n - 1], True, dt)
        outs = [nc(np.zeros((3, 4), xs[0].dtype), dt) for _ in range(n)]
        dist.all_gather(outs, nc(xs[rank], dt))
        for r in range(n):
            same(ctx, f"non-contiguous all_gather {dt} [{r}]", outs[r], xs[r], True, dt)
        big = torch.zeros(4, 3 * n, dtype=getattr(torch, dt)).t()  # (3n, 4), non-contiguous
        dist.all_gather_into_tensor(big, nc(xs[rank], dt))
        same(ctx, f"non-contiguous all_gather_into_tensor {dt}", big, np.concatenate(xs), True, dt)
        ys = [np_data(dt, 12 * n, r, case + 1).reshape(3 * n, 4) for r in range(n)]
        out = nc(np.zeros((3, 4), xs[0].dtype), dt)
        dist.reduce_scatter_tensor(out, nc(ys[rank], dt))
        same(ctx, f"non-contiguous reduce_scatter_tensor {dt}", out,
             reference("SUM", ys, dt)[3 * rank:3 * rank + 3], False, dt)
        out = nc(np.zeros((3 * n, 4), xs[0].dtype), dt)
        dist.all_to_all_single(out, nc(ys[rank], dt))
        same(ctx, f"non-contiguous all_to_all_single {dt}", out,
             np.concatenate([ys[r][3 * rank:3 * rank + 3] for r in range(n)]), True, dt)
        out = nc(np.zeros((3, 4), xs[0].dtype), dt)
        dist.scatter(out, [nc(x, dt) for x in xs] if rank == 0 else None, src=0)
        same(ctx, f"non-contiguous scatter {dt}", out, xs[rank], True, dt)
        outs = [nc(np.zeros((3, 4), xs[0].dtype), dt) for _ in range(n)] if rank == 0 else None
        dist.gather(nc(xs[rank], dt), outs, dst=0)
        if rank == 0:
            for r in range(n):
                same(ctx, f"non-contiguous gather {dt} [{r}]", outs[r], xs[r], True, dt)
        if n > 1:
            out = nc(np.zeros((3, 4), xs[0].dtype), dt)
            rw = dist.irecv(out, (rank - 1) % n, tag=11)
            dist.isend(nc(xs[rank], dt), (rank + 1) % n, tag=11).wait()
            rw.wait()
            same(ctx, f"non-contiguous send/recv {dt}", out, xs[(rank - 1) % n], True, dt)


# -- x: zero-element tensors ---------------------------------------------------------------------
def part_x(ctx: Ctx) -> None:
    torch, dist = ctx.torch, ctx.dist
    n = ctx.n
    t = torch.zeros(0)
    dist.all_reduce(t)
    dist.all_reduce(torch.zeros(0), async_op=True).wait()
    dist.broadcast(torch.zeros(0, dtype=torch.int8), 0)
    out = torch.zeros(0, 3)
    dist.all_gather_into_tensor(out, torch.zeros(0, 3))
    dist.all_to_all_single(torch.zeros(0, 2), torch.zeros(0, 2), [0] * n, [0] * n)
    dist.reduce_scatter_tensor(torch.zeros(0), torch.zeros(0))
    ctx.checked += 1
    # all_gather_into_tensor's stacked output form, (group size, *input shape)
    out = torch.zeros(n, 2, 3, dtype=torch.int16)
    dist.all_gather_into_tensor(out, torch.full((2, 3), ctx.rank, dtype=torch.int16))
    same(ctx, "all_gather_into_tensor stacked", out,
         np.repeat(np.arange(n, dtype=np.int16), 6).reshape(n, 2, 3), True, "int16")


# -- c: sparse all_reduce, all_gather_coalesced, timeouts -------------------------------------------
def part_c(ctx: Ctx) -> None:
    torch, dist = ctx.torch, ctx.dist
    n, rank = ctx.n, ctx.rank
    rop = dist.ReduceOp

    def sparse_of(r: int, dense_dims: int, dtype: Any) -> Any:
        # Rows 0..r (shared with lower ranks) plus a row only rank r has; dense rows of 2s or 3s.
        rows = list(range(r + 1)) + [10 + r]
        values = torch.arange(1, len(rows) * 2 ** dense_dims + 1, dtype=dtype).reshape(len(rows), *[2] * dense_dims)
        return torch.sparse_coo_tensor(torch.tensor([rows]), values * (r + 1), (10 + n, *[2] * dense_dims))

    for dense_dims in (0, 2):
        for dtype, dt in ((torch.float32, "float32"), (torch.int64, "int64")):
            for kind in ((rop.SUM, rop.AVG) if dtype.is_floating_point else (rop.SUM,)):
                want = sum(sparse_of(r, dense_dims, dtype).to_dense() for r in range(n))
                if kind == rop.AVG:
                    want = want / n
                for label, group in (("pymcoll", None), ("gloo", ctx.gloo)):
                    if label == "gloo" and kind == rop.AVG:
                        continue  # gloo sums sparse tensors only
                    t = sparse_of(rank, dense_dims, dtype)
                    dist.all_reduce(t, op=kind, group=group)
                    same(ctx, f"sparse all_reduce {label} {kind} {dt} dense_dims={dense_dims}", t.to_dense(),
                         to_np(want), True, dt)
                    if not t.is_sparse:
                        ctx.fail(f"sparse all_reduce {label}: the result is not sparse any more")
    # all_gather_coalesced: mixed shapes and an empty tensor, against gloo
    for group in (None, ctx.gloo):
        ins = [torch.full((2, 3), float(rank)), torch.zeros(0), torch.arange(4.0) + 10 * rank]
        outs = [[torch.empty_like(x) for x in ins] for _ in range(n)]
        work = dist.all_gather_coalesced(outs, ins, group=group, async_op=group is None)
        if work is not None:
            work.wait()
        for r in range(n):
            for i, want in enumerate((np.full((2, 3), float(r)), np.zeros(0), np.arange(4.0) + 10 * r)):
                same(ctx, f"all_gather_coalesced {'gloo' if group else 'pymcoll'} [{r}][{i}]", outs[r][i],
                     want.astype(np.float32), True, "float32")
    # A barrier only rank 0 enters, on a subgroup of everyone with a 1 s timeout: rank 0 raises what
    # torch's backends raise for a timeout, and pymcoll's own error.
    if n > 1:
        import pymcoll

        late = dist.new_group(list(range(n)), backend="pymcoll", timeout=timedelta(seconds=1))
        if rank == 0:
            t0 = time.monotonic()
            try:
                dist.barrier(group=late)
            except RuntimeError as exc:
                kinds = (isinstance(exc, dist.DistBackendError), isinstance(exc, pymcoll.TimeoutError),
                         " Timed out " in str(exc), time.monotonic() - t0 >= 0.9)
                if not all(kinds):
                    ctx.fail(f"barrier timeout: {type(exc).__name__}: {exc} (DistBackendError, pymcoll.TimeoutError, "
                             f"'Timed out', waited 1 s: {kinds})")
            else:
                ctx.fail("barrier of rank 0 alone did not time out")
        ctx.world.Barrier()
        dist.destroy_process_group(late)
    ctx.checked += 1


# -- e: environment that disagrees with MPI ---------------------------------------------------------
def part_e() -> None:
    rank = MPI.COMM_WORLD.rank
    os.environ["RANK"] = str(rank + 1)  # wrong on every rank
    try:
        import pymcoll.torch  # noqa: F401
    except RuntimeError as exc:
        msg = str(exc)
        assert "RANK=" in msg and "MPI rank" in msg and "unset RANK" in msg.replace("Unset", "unset"), msg
        print(f"rank {rank} env mismatch refused: {msg}", flush=True)
        return
    raise AssertionError("import pymcoll.torch accepted RANK that disagrees with MPI")


def body(verdict: list[bool]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="mabsnxc")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    verdicts = world.Dup()
    if args.parts == "e":
        part_e()
        verdict[0] = agree(True, verdicts)
        print(f"rank {world.rank} torch_backend ok", flush=True)
        return
    t0 = time.monotonic()
    import torch
    import torch.distributed as dist

    import pymcoll.torch  # noqa: F401 - registers the backend, sets RANK/WORLD_SIZE/MASTER_* from MPI

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        assert os.environ.get(var), f"{var} was not set from MPI"
    dist.init_process_group("pymcoll")
    assert dist.get_rank() == world.rank and dist.get_world_size() == world.size
    ctx = Ctx(torch, dist)
    dtypes = CI_DTYPES if CI else ALL_DTYPES
    timings = []
    for part, fn in (("m", lambda: part_m(ctx, dtypes)), ("a", lambda: part_a(ctx)), ("b", lambda: part_b(ctx)),
                     ("s", lambda: part_s(ctx)), ("n", lambda: part_n(ctx, ["float32", "bfloat16", "int64", "bool"])),
                     ("x", lambda: part_x(ctx)), ("c", lambda: part_c(ctx))):
        if part in args.parts:
            t = time.monotonic()
            fn()
            timings.append(f"{part} {time.monotonic() - t:.1f}s")
    ok = agree(not ctx.failures, verdicts)
    for f in ctx.failures[:40]:
        print(f, flush=True)
    dist.destroy_process_group()
    verdicts.Free()
    verdict[0] = ok
    if not ok:
        return
    print(f"rank {world.rank} torch_backend ok: {ctx.checked} comparisons, {', '.join(timings)}, "
          f"total {time.monotonic() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    passed = [False]
    main(lambda: body(passed))
    sys.exit(0 if passed[0] else 1)
