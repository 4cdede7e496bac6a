"""Every bad input of every collective, in blocking, non-blocking and
persistent form, raises at the call (before any data moves and before a
request exists) the exception class mpi4py raises for the same mistake, with
a message naming the argument; a correct call of the same collective in the
same form then works on every rank.

A mistake every rank can see (a bad root, a bad receive buffer where every
rank receives) is made on every rank. A mistake only some ranks can see (the
root's receive buffer of Gather, IN_PLACE on a non-root) is made only by the
ranks that can see it, and the others skip the call: were they to enter the
collective, they would wait for ranks that never come.

Usage: python -m mpi_programs.bad_input_collectives [--forms blocking,I,init]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import gapped, main

D = MPI.DOUBLE
K = 3  # elements per block in the bad calls
B = 8 * K  # bytes per float64 block
FORMS = {"blocking": "", "I": "I", "init": "_init"}
COLLECTIVES = [
    "Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
    "Alltoall", "Alltoallv", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan",
]


# -- buffers -----------------------------------------------------------------
def z(count: int, dtype: Any = np.float64) -> np.ndarray:
    """A writable, contiguous buffer."""
    return np.zeros(count, dtype)


def ro(count: int, dtype: Any = np.float64) -> np.ndarray:
    """A read-only buffer."""
    a = np.zeros(count, dtype)
    a.flags.writeable = False
    return a


def strided(count: int, dtype: Any = np.float64) -> np.ndarray:
    """A writable view that is not contiguous (every other element)."""
    return np.zeros(2 * count, dtype)[::2]


def c16(count: int) -> np.ndarray:
    return np.ones(count, np.complex128)


# -- running a collective in one of its forms ----------------------------------
def method_name(coll: str, form: str) -> str:
    if form == "I":
        return "I" + coll[0].lower() + coll[1:]
    return coll + form


def invoke(comm: pymcoll.Comm, coll: str, form: str, *args: Any, **kwargs: Any) -> None:
    """Run `coll` to completion in the given form ('', 'I' or '_init')."""
    result = getattr(comm, method_name(coll, form))(*args, **kwargs)
    if form == "I":
        result.Wait()
    elif form == "_init":
        # Two rounds: a persistent request must be reusable after completion.
        for _ in range(2):
            result.Start()
            result.Wait()
        result.Free()


def check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


# -- correct calls, verified ---------------------------------------------------
def good(comm: pymcoll.Comm, coll: str, form: str, s: int) -> None:
    """A correct call of `coll` on every rank (root size-1), its result checked;
    `s` varies the data from call to call."""
    n, r = comm.size, comm.rank
    root = n - 1
    ar = np.arange
    if coll == "Barrier":
        invoke(comm, coll, form)
    elif coll == "Bcast":
        ref = ar(7, dtype=np.int64) * (s + 1)
        buf = ref.copy() if r == root else np.zeros(7, np.int64)
        invoke(comm, coll, form, buf, root=root)
        check(np.array_equal(buf, ref), f"Bcast gave {buf}")
    elif coll == "Gather":
        recv = np.full(n * K, -1.0) if r == root else None
        invoke(comm, coll, form, np.full(K, 10.0 * r + s), recv, root=root)
        if r == root:
            check(np.array_equal(recv.reshape(n, K), np.repeat(10.0 * ar(n) + s, K).reshape(n, K)),
                  f"Gather gave {recv}")
    elif coll == "Gatherv":
        counts = [i + 1 for i in range(n)]
        displs, total = gapped(counts)
        recv = np.full(total, -1.0) if r == root else None
        invoke(comm, coll, form, np.full(r + 1, 10.0 * r + s), [recv, counts, displs, D] if recv is not None else None,
               root=root)
        if r == root:
            want = np.full(total, -1.0)
            for i in range(n):
                want[displs[i]:displs[i] + counts[i]] = 10.0 * i + s
            check(np.array_equal(recv, want), f"Gatherv gave {recv}")
    elif coll == "Scatter":
        send = ar(n * K, dtype=np.float64) + 100 * s if r == root else None
        recv = np.full(K, -1.0)
        invoke(comm, coll, form, send, recv, root=root)
        check(np.array_equal(recv, ar(r * K, r * K + K) + 100.0 * s), f"Scatter gave {recv}")
    elif coll == "Scatterv":
        counts = [i + 1 for i in range(n)]
        displs, total = gapped(counts)
        send = [ar(total, dtype=np.float64) + 100 * s, counts, displs, D] if r == root else None
        recv = np.full(r + 1, -1.0)
        invoke(comm, coll, form, send, recv, root=root)
        check(np.array_equal(recv, ar(displs[r], displs[r] + r + 1) + 100.0 * s), f"Scatterv gave {recv}")
    elif coll == "Allgather":
        recv = np.full(n * K, -1.0)
        invoke(comm, coll, form, np.full(K, 10.0 * r + s), recv)
        check(np.array_equal(recv, np.repeat(10.0 * ar(n) + s, K)), f"Allgather gave {recv}")
    elif coll == "Allgatherv":
        counts = [i + 1 for i in range(n)]
        displs, total = gapped(counts)
        recv = np.full(total, -1.0)
        invoke(comm, coll, form, np.full(r + 1, 10.0 * r + s), [recv, counts, displs, D])
        want = np.full(total, -1.0)
        for i in range(n):
            want[displs[i]:displs[i] + counts[i]] = 10.0 * i + s
        check(np.array_equal(recv, want), f"Allgatherv gave {recv}")
    elif coll == "Alltoall":
        send = np.repeat(100.0 * r + ar(n) + s, K)
        recv = np.full(n * K, -1.0)
        invoke(comm, coll, form, send, recv)
        check(np.array_equal(recv, np.repeat(100.0 * ar(n) + r + s, K)), f"Alltoall gave {recv}")
    elif coll == "Alltoallv":
        scounts = [(r + j) % 3 + 1 for j in range(n)]
        rcounts = [(i + r) % 3 + 1 for i in range(n)]
        rdispls, total = gapped(rcounts)
        send = np.concatenate([np.full(scounts[j], 1000.0 * r + j + s) for j in range(n)])
        recv = np.full(total, -1.0)
        invoke(comm, coll, form, [send, scounts, None, D], [recv, rcounts, rdispls, D])
        want = np.full(total, -1.0)
        for i in range(n):
            want[rdispls[i]:rdispls[i] + rcounts[i]] = 1000.0 * i + r + s
        check(np.array_equal(recv, want), f"Alltoallv gave {recv}")
    elif coll in ("Reduce", "Allreduce"):
        recv = np.full(K, -1.0) if coll == "Allreduce" or r == root else None
        kw = {"root": root} if coll == "Reduce" else {}
        invoke(comm, coll, form, ar(K) + r + s + 0.0, recv, MPI.SUM, **kw)
        if recv is not None:
            check(np.array_equal(recv, n * ar(K) + n * (n - 1) / 2 + n * s), f"{coll} gave {recv}")
    elif coll == "Reduce_scatter_block":
        recv = np.full(K, -1.0)
        invoke(comm, coll, form, ar(n * K) + r + s + 0.0, recv, MPI.SUM)
        check(np.array_equal(recv, n * ar(r * K, r * K + K) + n * (n - 1) / 2 + n * s),
              f"Reduce_scatter_block gave {recv}")
    elif coll == "Reduce_scatter":
        counts = [i + 1 for i in range(n)]
        off = sum(counts[:r])
        recv = np.full(r + 1, -1.0)
        invoke(comm, coll, form, ar(sum(counts)) + r + s + 0.0, recv, counts, MPI.SUM)
        check(np.array_equal(recv, n * ar(off, off + r + 1) + n * (n - 1) / 2 + n * s),
              f"Reduce_scatter gave {recv}")
    elif coll == "Scan":
        recv = np.full(K, -1.0)
        invoke(comm, coll, form, np.full(K, r + 1.0 + s), recv, MPI.SUM)
        check(np.array_equal(recv, np.full(K, (r + 1) * (r + 2) / 2 + (r + 1) * s)), f"Scan gave {recv}")
    elif coll == "Exscan":
        recv = np.full(K, -7.0)
        invoke(comm, coll, form, np.full(K, r + 1.0 + s), recv, MPI.SUM)
        want = np.full(K, -7.0) if r == 0 else np.full(K, r * (r + 1) / 2 + r * s)
        check(np.array_equal(recv, want), f"Exscan gave {recv} on rank {r}")
    else:
        raise KeyError(coll)


# -- the bad calls ---------------------------------------------------------------
@dataclass
class Case:
    """One bad call of `coll`; `call` gets the bound method of the form under test."""

    coll: str
    what: str
    exc: type
    words: tuple[str, ...]  # each must occur in the message (MPI.Exception: lower-cased)
    call: Callable[[Callable[..., Any]], Any]
    who: str = "all"  # ranks that make the call: all, root (size-1) or nonroot
    error_class: int | None = None  # MPI error class of an MPI.Exception
    applies: bool = True  # False where the mistake cannot be made at this size


def bad_root(coll: str, n: int, call: Callable[[int], Callable[[Callable[..., Any]], Any]]) -> list[Case]:
    return [Case(coll, f"root={root}", MPI.Exception, ("root",), call(root), error_class=MPI.ERR_ROOT)
            for root in (-1, n)]


def bad_op(coll: str, call: Callable[[Any, Any], Callable[[Callable[..., Any]], Any]]) -> list[Case]:
    """MPI.MAX on complex128 and MPI.BAND on float64 (no order, no bits)."""
    return [
        Case(coll, "op=MAX on complex128", MPI.Exception, ("op",), call(MPI.MAX, c16), error_class=MPI.ERR_OP),
        Case(coll, "op=BAND on float64", MPI.Exception, ("op",), call(MPI.BAND, lambda m: np.ones(m)),
             error_class=MPI.ERR_OP),
    ]


def cases(n: int) -> list[Case]:
    """Every bad input that applies to each collective, for `n` ranks."""
    rt = n - 1
    nk = n * K
    out: list[Case] = []
    # X: mpi4py leaves negative counts of the vector forms to MPI (MPI.Exception, MPI_ERR_COUNT).
    V, E, X = ValueError, BufferError, MPI.Exception

    # Barrier takes no buffers, counts or root: no bad input applies.

    # Bcast
    out += bad_root("Bcast", n, lambda root: lambda m: m(z(K), root=root))
    out += [
        Case("Bcast", "root of type str", TypeError, ("Bcast: root must be an int, got str",),
             lambda m: m(z(K), root="0")),
        Case("Bcast", "count larger than the buffer", V,
             (f"buf: count={K + 2} needs {8 * (K + 2)} bytes but the buffer holds {B}",),
             lambda m: m([z(K), K + 2, D], root=rt)),
        Case("Bcast", "negative count", V, ("buf: negative count -1",),
             lambda m: m([z(K), -1, D], root=rt)),
        Case("Bcast", "negative displacement", V, ("buf: negative displacement -1",),
             lambda m: m([z(K), (1, -1), D], root=rt)),
        Case("Bcast", "non-contiguous buf", E, ("buf: buffer is not contiguous",),
             lambda m: m(strided(K), root=rt)),
        Case("Bcast", "read-only buf on the receivers", E, ("buf: buffer is read-only",),
             lambda m: m(ro(K), root=rt), who="nonroot"),
    ]

    # Gather
    out += bad_root("Gather", n, lambda root: lambda m: m(z(K), z(nk), root=root))
    out += [
        Case("Gather", "recvbuf too small", V,
             (f"recvbuf: count={K} per rank needs {nk * 8} bytes but the buffer holds {(nk - 1) * 8}",),
             lambda m: m(z(K), [z(nk - 1), K, D], root=rt), who="root"),
        Case("Gather", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(K), ro(nk), root=rt), who="root"),
        Case("Gather", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(K), strided(nk), root=rt), who="root"),
        Case("Gather", "recv blocks larger than sendbuf", V,
             (f"recvbuf: Gather receives {B + 8} bytes per block but sendbuf sends {B}",
              "type signatures must match"),
             lambda m: m(z(K), z(n * (K + 1)), root=rt), who="root"),
        Case("Gather", "IN_PLACE on a non-root", V, ("sendbuf: only the root of Gather may pass MPI.IN_PLACE",),
             lambda m: m(MPI.IN_PLACE, z(nk), root=rt), who="nonroot"),
        Case("Gather", "non-contiguous sendbuf", E, ("sendbuf: buffer is not contiguous",),
             lambda m: m(strided(K), z(nk), root=rt)),
        Case("Gather", "negative send count", V, ("sendbuf: negative count",),
             lambda m: m([z(K), -1, D], z(nk), root=rt)),
    ]

    # Gatherv
    kc = [K] * n
    out += bad_root("Gatherv", n, lambda root: lambda m: m(z(K), [z(nk), kc, None, D], root=root))
    out += [
        Case("Gatherv", "recvbuf too small", V,
             (f"recvbuf: the blocks reach element {nk} ({nk * 8} bytes) but the buffer holds {(nk - 1) * 8} bytes",),
             lambda m: m(z(K), [z(nk - 1), kc, None, D], root=rt), who="root"),
        Case("Gatherv", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(K), [ro(nk), kc, None, D], root=rt), who="root"),
        Case("Gatherv", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(K), [strided(nk), kc, None, D], root=rt), who="root"),
        Case("Gatherv", "negative count", X, ("count",),
             lambda m: m(z(K), [z(nk), [-1] + kc[1:], None, D], root=rt), who="root", error_class=MPI.ERR_COUNT),
        Case("Gatherv", "negative displacement", V, ("recvbuf: a block starts at element -1, before the buffer",),
             lambda m: m(z(K), [z(nk), kc, [-1] + [K * i for i in range(1, n)], D], root=rt), who="root"),
        Case("Gatherv", "one count too many", V, (f"recvbuf: counts has {n + 1} entries; the communicator has {n} ranks",),
             lambda m: m(z(K), [z(nk + K), kc + [K], None, D], root=rt), who="root"),
        Case("Gatherv", "one displacement too many", V,
             (f"recvbuf: displacements has {n + 1} entries; the communicator has {n} ranks",),
             lambda m: m(z(K), [z(nk), kc, [K * i for i in range(n + 1)], D], root=rt), who="root"),
        Case("Gatherv", "root's block differs from its sendbuf", V,
             (f"recvbuf: the root's block holds {B + 8} bytes but its sendbuf sends {B}", "type signatures must match"),
             lambda m: m(z(K), [z(n * (K + 1)), [K + 1] * n, None, D], root=rt), who="root"),
        Case("Gatherv", "IN_PLACE on a non-root", V, ("sendbuf: only the root of Gatherv may pass MPI.IN_PLACE",),
             lambda m: m(MPI.IN_PLACE, [z(nk), kc, None, D], root=rt), who="nonroot"),
    ]

    # Scatter
    out += bad_root("Scatter", n, lambda root: lambda m: m(z(nk), z(K), root=root))
    out += [
        Case("Scatter", "recvbuf too small", V, (f"recvbuf: count={K} needs {B} bytes but the buffer holds {B - 8}",),
             lambda m: m(z(nk), [z(K - 1), K, D], root=rt)),
        Case("Scatter", "sendbuf too small at the root", V,
             (f"sendbuf: count={K} per rank needs {nk * 8} bytes but the buffer holds {(nk - 1) * 8}",),
             lambda m: m([z(nk - 1), K, D], z(K), root=rt), who="root"),
        Case("Scatter", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(nk), ro(K), root=rt)),
        Case("Scatter", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(nk), strided(K), root=rt)),
        Case("Scatter", "root's recvbuf larger than a block", V,
             (f"recvbuf: Scatter receives {B + 8} bytes per block but sendbuf sends {B}", "type signatures must match"),
             lambda m: m(z(nk), z(K + 1), root=rt), who="root"),
        Case("Scatter", "IN_PLACE on a non-root", V, ("recvbuf: only the root of Scatter may pass MPI.IN_PLACE",),
             lambda m: m(z(nk), MPI.IN_PLACE, root=rt), who="nonroot"),
    ]

    # Scatterv
    out += bad_root("Scatterv", n, lambda root: lambda m: m([z(nk), kc, None, D], z(K), root=root))
    out += [
        Case("Scatterv", "sendbuf too small at the root", V,
             (f"sendbuf: the blocks reach element {nk} ({nk * 8} bytes) but the buffer holds {(nk - 1) * 8} bytes",),
             lambda m: m([z(nk - 1), kc, None, D], z(K), root=rt), who="root"),
        Case("Scatterv", "negative count", X, ("count",),
             lambda m: m([z(nk), [-1] + kc[1:], None, D], z(K), root=rt), who="root", error_class=MPI.ERR_COUNT),
        Case("Scatterv", "negative displacement", V, ("sendbuf: a block starts at element -1, before the buffer",),
             lambda m: m([z(nk), kc, [-1] + [K * i for i in range(1, n)], D], z(K), root=rt), who="root"),
        Case("Scatterv", "one count too few", V, (f"sendbuf: counts has {n - 1} entries; the communicator has {n} ranks",),
             lambda m: m([z(nk), kc[1:], None, D], z(K), root=rt), who="root"),
        Case("Scatterv", "recvbuf too small", V, (f"recvbuf: count={K} needs {B} bytes but the buffer holds {B - 8}",),
             lambda m: m([z(nk), kc, None, D], [z(K - 1), K, D], root=rt)),
        Case("Scatterv", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m([z(nk), kc, None, D], ro(K), root=rt)),
        Case("Scatterv", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m([z(nk), kc, None, D], strided(K), root=rt)),
        Case("Scatterv", "root's recvbuf differs from its block", V,
             (f"recvbuf: holds {B + 8} bytes but the root's block of sendbuf has {B}", "type signatures must match"),
             lambda m: m([z(nk), kc, None, D], z(K + 1), root=rt), who="root"),
        Case("Scatterv", "IN_PLACE on a non-root", V, ("recvbuf: only the root of Scatterv may pass MPI.IN_PLACE",),
             lambda m: m([z(nk), kc, None, D], MPI.IN_PLACE, root=rt), who="nonroot"),
    ]

    # Allgather
    out += [
        Case("Allgather", "recvbuf too small", V,
             (f"recvbuf: count={K} per rank needs {nk * 8} bytes but the buffer holds {(nk - 1) * 8}",),
             lambda m: m(z(K), [z(nk - 1), K, D])),
        Case("Allgather", "read-only recvbuf", E, ("recvbuf: buffer is read-only",), lambda m: m(z(K), ro(nk))),
        Case("Allgather", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(K), strided(nk))),
        Case("Allgather", "recv blocks larger than sendbuf", V,
             (f"recvbuf: holds {B + 8} bytes per rank but sendbuf sends {B}",),
             lambda m: m(z(K), z(n * (K + 1)))),
        Case("Allgather", "non-contiguous sendbuf", E, ("sendbuf: buffer is not contiguous",),
             lambda m: m(strided(K), z(nk))),
    ]

    # Allgatherv
    out += [
        Case("Allgatherv", "recvbuf too small", V,
             (f"recvbuf: the blocks reach element {nk} ({nk * 8} bytes) but the buffer holds {(nk - 1) * 8} bytes",),
             lambda m: m(z(K), [z(nk - 1), kc, None, D])),
        Case("Allgatherv", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(K), [ro(nk), kc, None, D])),
        Case("Allgatherv", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(K), [strided(nk), kc, None, D])),
        Case("Allgatherv", "negative count", X, ("count",),
             lambda m: m(z(K), [z(nk), [-1] + kc[1:], None, D]), error_class=MPI.ERR_COUNT),
        Case("Allgatherv", "negative displacement", V, ("recvbuf: a block starts at element -1, before the buffer",),
             lambda m: m(z(K), [z(nk), kc, [-1] + [K * i for i in range(1, n)], D])),
        Case("Allgatherv", "one count too many", V, (f"recvbuf: counts has {n + 1} entries; the communicator has {n} ranks",),
             lambda m: m(z(K), [z(nk + K), kc + [K], None, D])),
        Case("Allgatherv", "this rank's block differs from sendbuf", V,
             (f"recvbuf: this rank's block holds {B + 8} bytes but sendbuf sends {B}", "type signatures must match"),
             lambda m: m(z(K), [z(n * (K + 1)), [K + 1] * n, None, D])),
    ]

    # Alltoall
    out += [
        Case("Alltoall", "recvbuf too small", V,
             (f"recvbuf: count={K} per rank needs {nk * 8} bytes but the buffer holds {(nk - 1) * 8}",),
             lambda m: m(z(nk), [z(nk - 1), K, D])),
        Case("Alltoall", "sendbuf too small", V,
             (f"sendbuf: count={K} per rank needs {nk * 8} bytes but the buffer holds {(nk - 1) * 8}",),
             lambda m: m([z(nk - 1), K, D], z(nk))),
        Case("Alltoall", "read-only recvbuf", E, ("recvbuf: buffer is read-only",), lambda m: m(z(nk), ro(nk))),
        Case("Alltoall", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(nk), strided(nk))),
        Case("Alltoall", "recv blocks larger than send blocks", V,
             (f"recvbuf: Alltoall receives {B + 8} bytes per block but sendbuf sends {B}", "type signatures must match"),
             lambda m: m(z(nk), z(n * (K + 1)))),
    ]

    # Alltoallv
    sv = [z(nk), kc, None, D]
    out += [
        Case("Alltoallv", "recvbuf too small", V,
             (f"recvbuf: the blocks reach element {nk} ({nk * 8} bytes) but the buffer holds {(nk - 1) * 8} bytes",),
             lambda m: m(sv, [z(nk - 1), kc, None, D])),
        Case("Alltoallv", "sendbuf too small", V,
             (f"sendbuf: the blocks reach element {nk} ({nk * 8} bytes) but the buffer holds {(nk - 1) * 8} bytes",),
             lambda m: m([z(nk - 1), kc, None, D], [z(nk), kc, None, D])),
        Case("Alltoallv", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(sv, [ro(nk), kc, None, D])),
        Case("Alltoallv", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(sv, [strided(nk), kc, None, D])),
        Case("Alltoallv", "negative receive count", X, ("count",),
             lambda m: m(sv, [z(nk), [-1] + kc[1:], None, D]), error_class=MPI.ERR_COUNT),
        Case("Alltoallv", "negative send displacement", V, ("sendbuf: a block starts at element -1, before the buffer",),
             lambda m: m([z(nk), kc, [-1] + [K * i for i in range(1, n)], D], [z(nk), kc, None, D])),
        Case("Alltoallv", "one receive count too many", V,
             (f"recvbuf: counts has {n + 1} entries; the communicator has {n} ranks",),
             lambda m: m(sv, [z(nk + K), kc + [K], None, D])),
        Case("Alltoallv", "one send count too few", V,
             (f"sendbuf: counts has {n - 1} entries; the communicator has {n} ranks",),
             lambda m: m([z(nk), kc[1:], None, D], [z(nk), kc, None, D])),
        Case("Alltoallv", "own block differs between send and receive", V,
             (f"recvbuf: this rank's own block is {B + 8} bytes on the receive side but {B} on the send side",
              "type signatures must match"),
             lambda m: m(sv, [z(n * (K + 1)), [K + 1] * n, None, D])),
    ]

    # Reduce
    out += bad_root("Reduce", n, lambda root: lambda m: m(z(K), z(K), MPI.SUM, root=root))
    out += bad_op("Reduce", lambda op, mk: lambda m: m(mk(K), mk(K), op, root=rt))
    out += [
        Case("Reduce", "recvbuf too small", V, (f"recvbuf: holds {B - 8} bytes but Reduce delivers {B} ({K} elements)",),
             lambda m: m(z(K), z(K - 1), MPI.SUM, root=rt), who="root"),
        Case("Reduce", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(K), ro(K), MPI.SUM, root=rt), who="root"),
        Case("Reduce", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(K), strided(K), MPI.SUM, root=rt), who="root"),
        Case("Reduce", "recvbuf larger than sendbuf", V, (f"recvbuf: holds {B + 8} bytes but sendbuf holds {B}",),
             lambda m: m(z(K), z(K + 1), MPI.SUM, root=rt), who="root"),
        Case("Reduce", "element types differ", V, ("recvbuf: its element type differs from sendbuf's",),
             lambda m: m(z(K), z(K, np.int64), MPI.SUM, root=rt), who="root"),
        Case("Reduce", "IN_PLACE on a non-root", V, ("sendbuf: only the root of Reduce may pass MPI.IN_PLACE",),
             lambda m: m(MPI.IN_PLACE, z(K), MPI.SUM, root=rt), who="nonroot"),
    ]

    # Allreduce, Scan, Exscan: one block in, one block out.
    for coll in ("Allreduce", "Scan", "Exscan"):
        out += bad_op(coll, lambda op, mk: lambda m: m(mk(K), mk(K), op))
        out += [
            Case(coll, "recvbuf too small", V, (f"recvbuf: holds {B - 8} bytes but {coll} delivers {B} ({K} elements)",),
                 lambda m: m(z(K), z(K - 1), MPI.SUM)),
            Case(coll, "read-only recvbuf", E, ("recvbuf: buffer is read-only",), lambda m: m(z(K), ro(K), MPI.SUM)),
            Case(coll, "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
                 lambda m: m(z(K), strided(K), MPI.SUM)),
            Case(coll, "recvbuf larger than sendbuf", V, (f"recvbuf: holds {B + 8} bytes but sendbuf holds {B}",),
                 lambda m: m(z(K), z(K + 1), MPI.SUM)),
            Case(coll, "element types differ", V, ("recvbuf: its element type differs from sendbuf's",),
                 lambda m: m(z(K), z(K, np.int64), MPI.SUM)),
        ]
    # The same mistakes through a [buf, datatype] spec (not the numpy fast path).
    out += [
        Case("Allreduce", "op=MAX on [complex128, C_DOUBLE_COMPLEX]", MPI.Exception, ("op",),
             lambda m: m([c16(K), MPI.C_DOUBLE_COMPLEX], [c16(K), MPI.C_DOUBLE_COMPLEX], MPI.MAX),
             error_class=MPI.ERR_OP),
        Case("Allreduce", "read-only [recvbuf, DOUBLE]", E, ("recvbuf: buffer is read-only",),
             lambda m: m([z(K), D], [ro(K), D], MPI.SUM)),
    ]

    # Reduce_scatter_block: size blocks in, one out.
    out += bad_op("Reduce_scatter_block", lambda op, mk: lambda m: m(mk(nk), mk(K), op))
    out += [
        Case("Reduce_scatter_block", "recvbuf too small", V,
             (f"recvbuf: holds {B - 8} bytes but Reduce_scatter_block delivers {B} ({K} elements)",),
             lambda m: m(z(nk), z(K - 1), MPI.SUM)),
        Case("Reduce_scatter_block", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(nk), ro(K), MPI.SUM)),
        Case("Reduce_scatter_block", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(nk), strided(K), MPI.SUM)),
        Case("Reduce_scatter_block", "sendbuf not a whole number of blocks", V,
             (f"sendbuf: {nk + 1} elements do not split into {n} equal blocks",),
             lambda m: m(z(nk + 1), z(K), MPI.SUM), applies=n > 1),
        Case("Reduce_scatter_block", "element types differ", V, ("recvbuf: its element type differs from sendbuf's",),
             lambda m: m(z(nk), z(K, np.int64), MPI.SUM)),
    ]

    # Reduce_scatter (recvcounts in elements)
    out += bad_op("Reduce_scatter", lambda op, mk: lambda m: m(mk(nk), mk(K), kc, op))
    out += [
        Case("Reduce_scatter", "recvbuf too small", V,
             (f"recvbuf: holds {B - 8} bytes but Reduce_scatter delivers {B} ({K} elements)",),
             lambda m: m(z(nk), z(K - 1), kc, MPI.SUM)),
        Case("Reduce_scatter", "read-only recvbuf", E, ("recvbuf: buffer is read-only",),
             lambda m: m(z(nk), ro(K), kc, MPI.SUM)),
        Case("Reduce_scatter", "non-contiguous recvbuf", E, ("recvbuf: buffer is not contiguous",),
             lambda m: m(z(nk), strided(K), kc, MPI.SUM)),
        Case("Reduce_scatter", "negative count", V, ("recvcounts: recvcounts must be >= 0, got -1",),
             lambda m: m(z(nk), z(K), [-1] + [K] * (n - 1), MPI.SUM)),
        Case("Reduce_scatter", "one count too many", V,
             (f"recvcounts: recvcounts has {n + 1} entries; the communicator has {n} ranks",),
             lambda m: m(z(nk), z(K), kc + [0], MPI.SUM)),
        Case("Reduce_scatter", "counts do not add up to the input", V,
             (f"recvcounts: they add up to {n * (K + 1)} elements but the input holds {nk}",),
             lambda m: m(z(nk), z(K + 1), [K + 1] * n, MPI.SUM)),
    ]

    # A missing receive buffer where this rank receives.
    need = "recvbuf: a buffer is required here, got None"
    out += [
        Case("Gather", "recvbuf None at the root", TypeError, (need,), lambda m: m(z(K), None, root=rt), who="root"),
        Case("Gatherv", "recvbuf None at the root", TypeError, (need,), lambda m: m(z(K), None, root=rt),
             who="root"),
        # (at the root, None is MPI.IN_PLACE, as in mpi4py)
        Case("Scatter", "recvbuf None off the root", TypeError, (need,), lambda m: m(z(nk), None, root=rt),
             who="nonroot", applies=n > 1),
        Case("Allgather", "recvbuf None", TypeError, (need,), lambda m: m(z(K), None)),
        Case("Alltoallv", "recvbuf None", TypeError, (need,), lambda m: m(sv, None)),
        Case("Reduce", "recvbuf None at the root", TypeError,
             ("recvbuf: Reduce needs a receive buffer on this rank, got None",),
             lambda m: m(z(K), None, MPI.SUM, root=rt), who="root"),
        Case("Allreduce", "recvbuf None", TypeError,
             ("recvbuf: Allreduce needs a receive buffer on this rank, got None",), lambda m: m(z(K), None, MPI.SUM)),
        Case("Reduce_scatter_block", "recvbuf None", TypeError,
             ("recvbuf: Reduce_scatter_block needs a receive buffer on this rank, got None",),
             lambda m: m(z(nk), None, MPI.SUM)),
    ]
    return out


# -- running the cases -----------------------------------------------------------
_created = [0]  # pymcoll requests constructed in this process
_request_init = pymcoll.Request.__init__


def _counting_init(self: pymcoll.Request, *args: Any, **kwargs: Any) -> None:
    _created[0] += 1
    _request_init(self, *args, **kwargs)


# Counting constructions (Prequest inherits __init__) shows whether a failed
# I-/_init call got as far as making a request, even one dropped at once.
pymcoll.Request.__init__ = _counting_init  # type: ignore[method-assign]


def problem_with(e: BaseException, case: Case) -> str | None:
    """None if `e` is the expected exception, else what is wrong with it."""
    if type(e) is not case.exc and not (case.exc is MPI.Exception and isinstance(e, MPI.Exception)):
        return f"raised {type(e).__name__}: {e} (expected {case.exc.__name__})"
    if isinstance(e, MPI.Exception):
        if e.Get_error_class() != case.error_class:
            return f"MPI error class {e.Get_error_class()} ({e.Get_error_string()}), expected {case.error_class}"
        msg = e.Get_error_string().lower()
        missing = [w for w in case.words if w.lower() not in msg]
    else:
        msg = str(e)
        missing = [w for w in case.words if w not in msg]
    if missing:
        return f"message {msg!r} lacks {missing}"
    return None


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--forms", default="blocking,I,init")
    args = ap.parse_args()
    forms = [FORMS[f] for f in args.forms.split(",")]
    world = MPI.COMM_WORLD
    verdicts = world.Dup()  # agreement on each case, outside the communicator under test
    # A deadline turns a rank stuck in a collective it should not have entered into an error.
    comm = pymcoll.Comm(world, timeout=30)
    n, r = comm.size, comm.rank
    root = n - 1
    all_cases = cases(n)
    covered = {c.coll for c in all_cases} | {"Barrier"}
    check(covered == set(COLLECTIVES), f"collectives without cases: {set(COLLECTIVES) - covered}")
    failures: list[str] = []
    seq = raised = 0
    for form in forms:
        for coll in COLLECTIVES:
            good(comm, coll, form, seq)  # works before any mistake, too
            seq += 1
        for case in all_cases:
            seq += 1
            label = f"{method_name(case.coll, form)}: {case.what}"
            makes_call = case.applies and (case.who == "all" or (case.who == "root") == (r == root))
            problem = None
            if makes_call:
                method = getattr(comm, method_name(case.coll, form))
                before = _created[0]
                try:
                    case.call(method)
                except Exception as e:  # noqa: BLE001 - judged below
                    problem = problem_with(e, case)
                    raised += 1
                else:
                    problem = "no exception"
                if problem is None and _created[0] != before:
                    problem = "the failed call made a request"
            every = verdicts.allgather(problem)
            bad = [f"{label}: rank {i}: {p}" for i, p in enumerate(every) if p is not None]
            failures += bad
            if r == 0 and bad:
                print("\n".join(bad), file=sys.stderr, flush=True)
            # The communicator still works: the same collective, same form, correct arguments.
            good(comm, case.coll, form, seq)
    # The correct I-/_init calls made requests: the counting that vouches for
    # "no request" above does see pymcoll's requests.
    check(_created[0] > 0 or forms == [""], "pymcoll.Request construction was not counted")
    comm.Barrier()
    comm.Free()
    verdicts.Free()
    if failures:
        raise AssertionError(f"{len(failures)} failed checks:\n" + "\n".join(failures))
    print(f"rank {r} bad input collectives ok ({len(all_cases)} cases x {len(forms)} forms, "
          f"{raised} raised here)", flush=True)


if __name__ == "__main__":
    main(body)
