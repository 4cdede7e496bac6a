"""Reference results of MPI's buffer-API collectives, computed with numpy.

For a :class:`~pymcoll.testing.case.Case` and a rank, :func:`expected`
gives what that rank's receive buffer must hold afterwards: the result where
MPI defines one, the untouched sentinel where the collective must not write
(gaps between blocks of vector forms), and a mask of positions MPI leaves
undefined. Reductions are computed in a wider precision than the data and
compared with a tolerance that a correct implementation, in any reduction
order, always meets, and one that reduces in a narrower type does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .case import SENTINEL, Case, recv_layout, send_data, send_layout


@dataclass
class Expectation:
    """What one rank's receive buffer must hold after the call."""

    values: np.ndarray            # expected contents of the receive region
    checked: np.ndarray           # bool mask: positions MPI defines
    tolerance: Optional[np.ndarray] = None  # per element, for floating reductions


def sentinel_array(dtype: str, n: int) -> np.ndarray:
    """n elements whose bytes are all the sentinel."""
    return np.frombuffer(bytes([SENTINEL]) * (n * np.dtype(dtype).itemsize), dtype=dtype).copy()


def _wide(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "f":
        return np.dtype(np.longdouble) if dtype.itemsize > 8 else np.dtype(np.float64)
    if dtype.kind == "c":
        return np.dtype(np.clongdouble) if dtype.itemsize > 16 else np.dtype(np.complex128)
    return dtype


def reduce_arrays(op: str, arrays: list[np.ndarray], dtype: str) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Reduce equal-length arrays with an MPI op; (result, tolerance or None)."""
    dt = np.dtype(dtype)
    if not arrays:
        raise ValueError("reduce_arrays: nothing to reduce")
    if dt.kind in "fc" and op in ("SUM", "PROD"):
        wide = [a.astype(_wide(dt)) for a in arrays]
        acc = wide[0].copy()
        for a in wide[1:]:
            acc = acc + a if op == "SUM" else acc * a
        eps = float(np.finfo(dt).eps)
        n = len(arrays)
        if op == "SUM":
            scale = np.sum([np.abs(a) for a in wide], axis=0)
        else:
            scale = np.abs(acc)
        tol = (n + 1) * eps * np.asarray(scale, dtype=np.float64) + float(np.finfo(dt).tiny)
        return acc, tol
    acc = arrays[0].copy()
    for a in arrays[1:]:
        if op == "SUM":
            acc = np.add(acc, a, dtype=dt, casting="unsafe")
        elif op == "PROD":
            acc = np.multiply(acc, a, dtype=dt, casting="unsafe")
        elif op == "MIN":
            acc = np.minimum(acc, a)
        elif op == "MAX":
            acc = np.maximum(acc, a)
        elif op == "LAND":
            acc = np.logical_and(acc != 0, a != 0).astype(dt)
        elif op == "LOR":
            acc = np.logical_or(acc != 0, a != 0).astype(dt)
        elif op == "LXOR":
            acc = np.logical_xor(acc != 0, a != 0).astype(dt)
        elif op == "BAND":
            acc = np.bitwise_and(acc, a)
        elif op == "BOR":
            acc = np.bitwise_or(acc, a)
        elif op == "BXOR":
            acc = np.bitwise_xor(acc, a)
        else:
            raise ValueError(f"op: {op!r} is not a predefined MPI op")
    # A single contributor's data is the result as it is (no op applies).
    return acc.astype(dt), None


def expected(case: Case, rank: int) -> Expectation:
    """The receive buffer `rank` must end with (see module docstring)."""
    length, counts, displs = recv_layout(case, rank)
    out = sentinel_array(case.dtype, length)
    checked = np.ones(length, dtype=bool)
    tol: Optional[np.ndarray] = None
    c, size, root = case.collective, case.size, case.root

    if c == "Bcast":
        return Expectation(send_data(case, root), np.ones(case.count, bool))
    if c in ("Scatter", "Scatterv"):
        _, scounts, sdispls = send_layout(case, root)
        src = send_data(case, root)
        out[:] = src[sdispls[rank]:sdispls[rank] + scounts[rank]]
    elif c in ("Gather", "Gatherv", "Allgather", "Allgatherv"):
        for i in range(size):
            out[displs[i]:displs[i] + counts[i]] = send_data(case, i)
    elif c in ("Alltoall", "Alltoallv"):
        for j in range(size):
            _, scounts, sdispls = send_layout(case, j)
            src = send_data(case, j)
            out[displs[j]:displs[j] + counts[j]] = src[sdispls[rank]:sdispls[rank] + scounts[rank]]
    elif c in ("Reduce", "Allreduce", "Scan", "Exscan", "Reduce_scatter_block", "Reduce_scatter"):
        contributors = range(size)
        if c == "Scan":
            contributors = range(rank + 1)
        elif c == "Exscan":
            contributors = range(rank)
        inputs = [send_data(case, i) for i in contributors]
        if not inputs:  # Exscan on rank 0: MPI leaves the buffer undefined
            return Expectation(out, np.zeros(length, bool))
        full, full_tol = reduce_arrays(case.op or "SUM", inputs, case.dtype)
        if c in ("Reduce_scatter_block", "Reduce_scatter"):
            _, parts, offs = send_layout(case, rank)
            lo, n = offs[rank], parts[rank]
            out[:n] = full[lo:lo + n].astype(case.dtype)
            if full_tol is not None:
                tol = np.zeros(length)
                tol[:n] = full_tol[lo:lo + n]
            checked[n:] = False  # in place: the rest of the buffer is undefined
            return Expectation(out, checked, tol)
        out[:] = full.astype(case.dtype) if full.dtype != np.dtype(case.dtype) else full
        if full_tol is not None:
            return Expectation(full if full.dtype != np.dtype(case.dtype) else out, checked, full_tol)
    return Expectation(out, checked, tol)


def compare(case: Case, rank: int, got: np.ndarray, exp: Expectation) -> Optional[str]:
    """None if `got` (this rank's receive region) matches, else why not."""
    if got.shape != exp.values.shape:
        return f"receive region has {got.size} elements, expected {exp.values.size}"
    mask = exp.checked
    if exp.tolerance is not None:
        g = got.astype(exp.values.dtype)
        err = np.abs(g - exp.values)
        bad = mask & ~(err <= exp.tolerance)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return (f"element {i} is {got[i]!r}, expected {exp.values[i]!r} within {exp.tolerance[i]:.3g} "
                    f"({int(bad.sum())} of {got.size} elements out of tolerance: a reduction in too "
                    f"narrow a precision?)")
        return None
    n = got.size
    if n == 0:
        return None
    item = got.dtype.itemsize
    padded = got.dtype in (np.dtype(np.longdouble), np.dtype(np.clongdouble)) and \
        item > 8 * (1 + (got.dtype.kind == "c"))
    if not padded and got.tobytes() == exp.values.tobytes():
        return None  # the usual case, at memcmp speed (every byte as expected, defined or not)
    gb = got.view(np.uint8).reshape(n, item)
    eb = exp.values.view(np.uint8).reshape(n, item)
    untouched = np.all(eb == SENTINEL, axis=1)  # positions that must keep the sentinel
    if padded:
        # long double padding bytes are not part of the value: compare values,
        # and bytes only where the buffer must stay untouched
        same_value = (got == exp.values) | (np.isnan(got) & np.isnan(exp.values))
        same = np.where(untouched, np.all(gb == SENTINEL, axis=1), same_value)
    else:
        same = np.all(gb == eb, axis=1)
    bad = mask & ~same
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = "a position the collective must not write" if untouched[i] else "a result"
        return (f"element {i} is {got[i]!r}, expected {exp.values[i]!r} ({where}; "
                f"{int(bad.sum())} of {got.size} elements wrong)")
    return None
