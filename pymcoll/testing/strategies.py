"""Hypothesis strategies for collective cases.

Every strategy here draws plain values only (see :class:`Case`), so all ranks
that draw the same example hold the same case. Nothing may depend on the rank:
pass only values every rank agrees on (the communicator size, thresholds).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np
from hypothesis import strategies as st

from .case import (COLLECTIVES, COUNTS_FORMS, DISPLS_FORMS, DTYPE_FORMS, IGNORED_FORMS, IGNORED_OFF_ROOT,
                   IN_PLACE_FORMS, NO_IN_PLACE, REDUCING, ROOTED, SPEC_SHAPES, VECTOR, VECTOR_SPEC, Case,
                   base_name, mpi_dtypes, ops_for, stride_gaps)


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
          vector_gaps: bool = True, spec_forms: bool = False) -> Case:
    """A :class:`Case` of `collective` ("Allgather", or "Iallgather" for the
    non-blocking form) for a communicator of `size` ranks.

    dtypes: numpy dtype names to draw from (default: all the MPI maps);
    ops: predefined op names (default: every op valid for the drawn dtype);
    max_bytes: largest block a rank sends, in bytes; thresholds: block sizes
    in bytes whose neighbours are always candidates; in_place: also draw the
    MPI.IN_PLACE form where MPI defines one; vector_gaps: let vector forms
    leave unused elements between blocks; spec_forms: also draw mpi4py's
    other ways to write the same call (see :class:`Case`: the shapes of
    vector specs, an integer count where the counts are equal, an integer
    stride where the layout is one, None counts and displacements, typecode
    strings, None for MPI.IN_PLACE, buffers where MPI ignores the argument
    off the root, Reduce_scatter without recvcounts). Without spec_forms the
    draws are those of the plain forms only, example for example.
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

    # The argument forms (drawn before the counts: some need equal counts or no gaps).
    forms: dict[str, str] = {}
    if spec_forms:
        if place:
            forms["in_place_as"] = draw(st.sampled_from(IN_PLACE_FORMS))
        if coll in IGNORED_OFF_ROOT:
            forms["ignored_as"] = draw(st.sampled_from(IGNORED_FORMS))
        if coll == "Reduce_scatter" and not place:
            forms["counts_as"] = draw(st.sampled_from(("list", "none")))
        elif coll in VECTOR_SPEC:
            forms["counts_as"] = draw(st.sampled_from(COUNTS_FORMS))
            forms["displs_as"] = draw(st.sampled_from(DISPLS_FORMS))
            # [buf, counts, datatype] has no place for displacements.
            forms["spec"] = draw(st.sampled_from(SPEC_SHAPES if forms["displs_as"] == "none" else SPEC_SHAPES[:2]))
            forms["dtype_as"] = draw(st.sampled_from(DTYPE_FORMS))
    counts_as, displs_as = forms.get("counts_as", "list"), forms.get("displs_as", "list")
    # An integer count or None needs equal counts; None also needs blocks back to back
    # (which is a stride too), as does a stride without gaps.
    equal = coll in VECTOR_SPEC and (counts_as != "list" or (displs_as == "stride" and not vector_gaps))
    packed = counts_as == "none" or displs_as == "none"

    count, vec, gaps = 0, (), ()
    if coll in VECTOR:
        if coll == "Alltoallv":
            per = counts(itemsize, max(0, max_count // max(size, 1)), thresholds)
            if equal:
                flat = [draw(per)] * (size * size)
            else:
                flat = draw(st.lists(per, min_size=size * size, max_size=size * size))
            if place:  # in place, each rank sends what it receives: counts symmetric
                m = np.array(flat).reshape(size, size)
                m = np.triu(m) + np.triu(m, 1).T
                flat = [int(x) for x in m.reshape(-1)]
            vec = tuple(flat)
            if packed:
                pass
            elif displs_as == "stride":
                extra = draw(st.lists(st.integers(0, 3 if vector_gaps else 0), min_size=2 * size,
                                      max_size=2 * size))
                m = np.array(flat, dtype=np.int64).reshape(size, size)
                rows = [m[r] for r in range(size)] + [m[:, r] for r in range(size)]  # send rows, receive columns
                gaps = tuple(g for i, row in enumerate(rows)
                             for g in stride_gaps([int(x) for x in row], int(max(row[:-1], default=0)) + extra[i]))
            elif vector_gaps and draw(st.booleans()):
                gaps = tuple(draw(st.lists(st.integers(0, 3), min_size=2 * size * size, max_size=2 * size * size)))
        else:
            per = counts(itemsize, max_count if coll != "Reduce_scatter" else max(0, max_count // max(size, 1)),
                         thresholds)
            if equal:
                vec = (draw(per),) * size
            else:
                vec = tuple(draw(st.lists(per, min_size=size, max_size=size)))
            if coll == "Reduce_scatter" or packed:
                pass
            elif displs_as == "stride":
                extra = draw(st.integers(0, 3)) if vector_gaps else 0
                gaps = stride_gaps(vec, max(vec[:-1], default=0) + extra)
            elif vector_gaps and draw(st.booleans()):
                gaps = tuple(draw(st.lists(st.integers(0, 3), min_size=size, max_size=size)))
    else:
        if coll in ("Scatter", "Alltoall", "Reduce_scatter_block"):
            count = draw(counts(itemsize, max(0, max_count // max(size, 1)), thresholds))
        else:
            count = draw(count_st)
    seed = draw(st.integers(0, 2**32 - 1))
    return Case(coll, size, dtype=dtype, count=count, root=root, op=op, in_place=place, seed=seed,
                counts=vec, gaps=gaps, method=method, **forms)


# The argument forms that coverage cases take in turn (see coverage_cases).
_VECTOR_FORM_TOUR: tuple[dict[str, Any], ...] = (
    {},                                                                  # [buf, counts, displs, datatype]
    {"spec": "pair"},                                                    # [buf, (counts, displs), datatype]
    {"counts_as": "int", "gaps": 1},                                     # [buf, count, displs, datatype]
    {"displs_as": "stride"},                                             # [buf, counts, stride, datatype]
    {"counts_as": "none", "displs_as": "none", "spec": "short", "dtype_as": "none"},  # buf
    {"counts_as": "none", "displs_as": "none", "spec": "short"},         # [buf, datatype]
    {"displs_as": "none", "spec": "short"},                              # [buf, counts, datatype]
    {"dtype_as": "typecode", "gaps": 1},                                 # [buf, counts, displs, 'i']
    {"spec": "pair", "dtype_as": "none"},                                # [buf, (counts, displs)]
    {"displs_as": "none", "spec": "short", "dtype_as": "none"},          # [buf, counts]
    {"counts_as": "int", "displs_as": "stride", "spec": "pair", "dtype_as": "typecode"},  # [buf, (count, stride), 'i']
    {"counts_as": "none", "displs_as": "none"},                          # [buf, None, None, datatype]
    {"in_place": True, "in_place_as": "None"},
    {"ignored_as": "buffer"},
)


def _form_tour(coll: str) -> list[dict[str, Any]]:
    """The forms one collective's coverage cases take in turn."""
    if coll in VECTOR_SPEC:
        return [f for f in _VECTOR_FORM_TOUR if coll in IGNORED_OFF_ROOT or "ignored_as" not in f]
    tour: list[dict[str, Any]] = [{}]
    if coll == "Reduce_scatter":
        tour.append({"counts_as": "none"})
    if coll not in NO_IN_PLACE:
        tour.append({"in_place": True, "in_place_as": "None"})
    if coll in IGNORED_OFF_ROOT:
        tour.append({"ignored_as": "buffer"})
    return tour


def _with_form(case: Case, form: dict[str, Any]) -> Case:
    """`case` (counts of ones, no gaps) written in `form`; "gaps": 1 puts one
    unused element before every block."""
    form = dict(form)
    gaps: tuple[int, ...] = case.gaps
    n_gaps = case.size * case.size * 2 if case.collective == "Alltoallv" else case.size
    if form.pop("gaps", 0):
        gaps = (1,) * n_gaps
    if form.get("displs_as") == "stride":
        gaps = stride_gaps([1] * case.size, 2) * (2 * case.size if case.collective == "Alltoallv" else 1)
    return Case(**{**case.kwargs(), "gaps": gaps, "method": case.method, **form})


def coverage_cases(collective: str, size: int, *, dtypes: Optional[Iterable[str]] = None,
                   ops: Optional[Iterable[str]] = None, spec_forms: bool = False) -> list[Case]:
    """One small case per dtype (ops taken in turn), run before the drawn
    ones so that every dtype and op is exercised whatever the draws.

    spec_forms: the cases also take the argument forms of :class:`Case` in
    turn, one form per dtype (and more cases where there are more forms than
    dtypes), so that every form of every collective runs whatever the draws.
    """
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
    if spec_forms and out:
        tour = _form_tour(coll)
        plain = list(out)
        out = [_with_form(case, tour[i]) if i < len(tour) else case for i, case in enumerate(plain)]
        out += [_with_form(plain[i % len(plain)], tour[i]) for i in range(len(plain), len(tour))]
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
