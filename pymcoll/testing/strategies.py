"""Hypothesis strategies for collective cases.

Every strategy here draws plain values only (see :class:`Case`), so all ranks
that draw the same example hold the same case. Nothing may depend on the rank:
pass only values every rank agrees on (the communicator size, thresholds).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np
from hypothesis import strategies as st

from .case import COLLECTIVES, NO_IN_PLACE, REDUCING, ROOTED, VECTOR, Case, base_name, mpi_dtypes, ops_for


def counts(itemsize: int, max_count: int, thresholds: Sequence[int] = ()) -> st.SearchStrategy[int]:
    """Element counts: 0 and small ones, any up to max_count, and the counts whose
    byte size sits just below, at and just above each threshold (in bytes)."""
    edges = sorted({max(0, t // itemsize + d) for t in thresholds for d in (-1, 0, 1)
                    if 0 <= t // itemsize + d <= max_count})
    options = [st.integers(0, min(8, max_count)), st.integers(0, max_count)]
    if edges:
        options.append(st.sampled_from(edges))
    return st.one_of(*options)


@st.composite
def cases(draw: st.DrawFn, collective: str, size: int, *,
          dtypes: Optional[Iterable[str]] = None, ops: Optional[Iterable[str]] = None,
          max_bytes: int = 1 << 16, thresholds: Sequence[int] = (), in_place: bool = True,
          vector_gaps: bool = True) -> Case:
    """A :class:`Case` of `collective` ("Allgather", or "Iallgather" for the
    non-blocking form) for a communicator of `size` ranks.

    dtypes: numpy dtype names to draw from (default: all the MPI maps);
    ops: predefined op names (default: every op valid for the drawn dtype);
    max_bytes: largest block a rank sends, in bytes; thresholds: block sizes
    in bytes whose neighbours are always candidates; in_place: also draw the
    MPI.IN_PLACE form where MPI defines one; vector_gaps: let vector forms
    leave unused elements between blocks.
    """
    method = collective
    coll = base_name(collective)
    if size < 1:
        raise ValueError(f"size: expected a communicator size >= 1, got {size}")
    if coll == "Barrier":
        return Case(coll, size, seed=draw(st.integers(0, 2**32 - 1)), method=method)
    pool = list(dtypes) if dtypes is not None else list(mpi_dtypes())
    if coll in REDUCING:
        allowed_ops = set(ops) if ops is not None else None
        pool = [d for d in pool if any(o in (allowed_ops or ops_for(d)) for o in ops_for(d))]
    if not pool:
        raise ValueError(f"dtypes: none of the given dtypes can be used with {coll}")
    dtype = draw(st.sampled_from(pool))
    itemsize = np.dtype(dtype).itemsize
    max_count = max(0, max_bytes // itemsize)
    count_st = counts(itemsize, max_count, thresholds)

    op = None
    if coll in REDUCING:
        valid = [o for o in ops_for(dtype) if ops is None or o in set(ops)]
        op = draw(st.sampled_from(valid))
    root = draw(st.integers(0, size - 1)) if coll in ROOTED else 0
    place = bool(in_place and coll not in NO_IN_PLACE and draw(st.booleans()))

    count, vec, gaps = 0, (), ()
    if coll in VECTOR:
        if coll == "Alltoallv":
            per = counts(itemsize, max(0, max_count // max(size, 1)), thresholds)
            flat = draw(st.lists(per, min_size=size * size, max_size=size * size))
            if place:  # in place, each rank sends what it receives: counts symmetric
                m = np.array(flat).reshape(size, size)
                m = np.triu(m) + np.triu(m, 1).T
                flat = [int(x) for x in m.reshape(-1)]
            vec = tuple(flat)
            if vector_gaps and draw(st.booleans()):
                gaps = tuple(draw(st.lists(st.integers(0, 3), min_size=2 * size * size, max_size=2 * size * size)))
        else:
            per = counts(itemsize, max_count if coll != "Reduce_scatter" else max(0, max_count // max(size, 1)),
                         thresholds)
            vec = tuple(draw(st.lists(per, min_size=size, max_size=size)))
            if vector_gaps and coll != "Reduce_scatter" and draw(st.booleans()):
                gaps = tuple(draw(st.lists(st.integers(0, 3), min_size=size, max_size=size)))
    else:
        if coll in ("Scatter", "Alltoall", "Reduce_scatter_block"):
            count = draw(counts(itemsize, max(0, max_count // max(size, 1)), thresholds))
        else:
            count = draw(count_st)
    seed = draw(st.integers(0, 2**32 - 1))
    return Case(coll, size, dtype=dtype, count=count, root=root, op=op, in_place=place, seed=seed,
                counts=vec, gaps=gaps, method=method)


def coverage_cases(collective: str, size: int, *, dtypes: Optional[Iterable[str]] = None,
                   ops: Optional[Iterable[str]] = None) -> list[Case]:
    """One small case per dtype (ops taken in turn), run before the drawn
    ones so that every dtype and op is exercised whatever the draws."""
    coll = base_name(collective)
    if coll == "Barrier":
        return []
    pool = list(dtypes) if dtypes is not None else list(mpi_dtypes())
    root = min(1, size - 1) if coll in ROOTED else 0
    out = []
    for i, dtype in enumerate(pool):
        op = None
        if coll in REDUCING:
            valid = [o for o in ops_for(dtype) if ops is None or o in set(ops)]
            if not valid:
                continue
            op = valid[i % len(valid)]
        vec: tuple[int, ...] = ()
        if coll == "Alltoallv":
            vec = (1,) * (size * size)
        elif coll in VECTOR:
            vec = (1,) * size
        out.append(Case(coll, size, dtype=dtype, count=0 if coll in VECTOR else 1, root=root, op=op,
                        counts=vec, seed=0, method=collective))
    return out


def collective_names(impl: object, names: Optional[Iterable[str]] = None) -> list[str]:
    """The collectives to test on `impl`: the given names, checked, or every
    blocking collective of the buffer API that `impl` has."""
    if names is None:
        return [c for c in COLLECTIVES if callable(getattr(impl, c, None))]
    out = []
    for n in names:
        base_name(n)  # raises for names that are not collectives
        if not callable(getattr(impl, n, None)):
            raise ValueError(f"collectives: the implementation has no method {n!r}")
        out.append(n)
    return out
