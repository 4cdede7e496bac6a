"""One collective call described by plain values, and everything needed to run it.

A :class:`Case` holds only numbers and names (collective, dtype, counts, root,
op, in-place, seed, and how the buffer specs are written). Every rank rebuilds
every rank's input from the seed, so ranks agree on a case without sending
data, and the oracle can compute the expected result of every rank locally.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional, Sequence

import numpy as np
from mpi4py import MPI

COLLECTIVES = (
    "Barrier", "Bcast", "Scatter", "Scatterv", "Gather", "Gatherv", "Allgather", "Allgatherv",
    "Alltoall", "Alltoallv", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter",
    "Scan", "Exscan",
)
ROOTED = frozenset({"Bcast", "Scatter", "Scatterv", "Gather", "Gatherv", "Reduce"})
REDUCING = frozenset({"Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan"})
VECTOR = frozenset({"Scatterv", "Gatherv", "Allgatherv", "Alltoallv", "Reduce_scatter"})
# MPI defines an in-place form for every collective but these two.
NO_IN_PLACE = frozenset({"Barrier", "Bcast"})
# Collectives whose buffers are vector specs ([buf, counts, displs, datatype]).
VECTOR_SPEC = frozenset({"Scatterv", "Gatherv", "Allgatherv", "Alltoallv"})
# Collectives with an argument MPI ignores off the root: Gather(v)'s recvbuf,
# Scatter(v)'s sendbuf, Reduce's recvbuf.
IGNORED_OFF_ROOT = frozenset({"Gather", "Gatherv", "Scatter", "Scatterv", "Reduce"})

# How a case writes its buffer specs (mpi4py accepts each of these); the
# first of each is the default, the plain form.
SPEC_SHAPES = ("full", "pair", "short")
COUNTS_FORMS = ("list", "int", "none")
DISPLS_FORMS = ("list", "stride", "none")
DTYPE_FORMS = ("datatype", "typecode", "none")
IN_PLACE_FORMS = ("IN_PLACE", "None")
IGNORED_FORMS = ("None", "buffer")
_FORM_FIELDS = {
    "spec": SPEC_SHAPES, "counts_as": COUNTS_FORMS, "displs_as": DISPLS_FORMS, "dtype_as": DTYPE_FORMS,
    "in_place_as": IN_PLACE_FORMS, "ignored_as": IGNORED_FORMS,
}

OPS = ("SUM", "PROD", "MIN", "MAX", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR")

# Sentinel byte of receive memory the collective must not write.
SENTINEL = 0xA5


def base_name(method: str) -> str:
    """'Iallgather' and 'Allgather_init' -> 'Allgather'; blocking names are returned unchanged."""
    if method in COLLECTIVES:
        return method
    if method.endswith("_init") and method[:-5] in COLLECTIVES:
        return method[:-5]
    if method.startswith("I") and method[1:2].islower():
        candidate = method[1].upper() + method[2:]
        if candidate in COLLECTIVES:
            return candidate
    raise ValueError(f"collective: {method!r} is not an MPI collective of the buffer API; "
                     f"expected one of {', '.join(COLLECTIVES)}, its I-prefixed (non-blocking) or its "
                     f"_init (persistent) form")


def ops_for(dtype: str) -> tuple[str, ...]:
    """Predefined ops MPI allows on this numpy dtype."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return ("LAND", "LOR", "LXOR")
    if kind in "iu":
        return OPS
    if kind == "f":
        return ("SUM", "PROD", "MIN", "MAX")
    if kind == "c":
        return ("SUM", "PROD")
    return ()


def mpi_dtypes() -> tuple[str, ...]:
    """numpy dtype names that the running MPI maps to a predefined datatype."""
    names = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
             "float32", "float64", "longdouble", "complex64", "complex128", "clongdouble", "bool")
    table = getattr(MPI, "_typedict", {})
    out = []
    for n in names:
        dt = table.get(np.dtype(n).char)
        if dt is not None and dt != MPI.DATATYPE_NULL:
            out.append(n)
    return tuple(out)


def mpi_type(dtype: str) -> MPI.Datatype:
    """The predefined MPI datatype of a numpy dtype name."""
    return MPI._typedict[np.dtype(dtype).char]


@dataclass(frozen=True)
class Case:
    """One call of one collective, described by values only.

    ``counts`` (vector forms) holds one count per rank (Scatterv, Gatherv,
    Allgatherv, Reduce_scatter) or a size x size matrix flattened row by row,
    ``counts[i*size + j]`` elements from rank i to rank j (Alltoallv); ``gaps``
    holds the unused elements before each block, which makes displacements
    that are not packed. ``size`` is the communicator size the case is for.

    The last fields say how the arguments are written, each one of mpi4py's
    equivalent forms (the defaults are the plain ones):

    spec: shape of a vector spec (Scatterv, Gatherv, Allgatherv, Alltoallv):
        ``"full"`` ``[buf, counts, displs, datatype]``, ``"pair"`` ``[buf,
        (counts, displs), datatype]``, ``"short"`` ``[buf, counts,
        datatype]`` (needs ``displs_as="none"``; with ``counts_as="none"``
        it is ``[buf, datatype]``). Without a datatype (``dtype_as="none"``)
        the pair and short shapes drop the item: ``[buf, (counts, displs)]``,
        ``[buf, counts]``, and the bare buffer.
    counts_as: ``"list"`` one count per rank, ``"int"`` one integer for every
        rank (the counts of each spec must be equal), ``"none"`` None: equal
        blocks filling the buffer exactly (equal counts, no gaps). For
        Reduce_scatter: ``"none"`` passes ``recvcounts=None`` (each rank's
        count from its receive buffer; not with in_place).
    displs_as: ``"list"`` one displacement per rank, ``"stride"`` an integer
        d placing rank i's block at i*d (the layout must be a stride: draw
        the gaps with :func:`stride_gaps`), ``"none"`` None: blocks back to
        back (no gaps).
    dtype_as: the spec's datatype as ``"datatype"`` an MPI.Datatype,
        ``"typecode"`` its typecode string ('i', 'd', ...), or ``"none"``
        left out (taken from the buffer; None in the full shape).
    in_place_as: with in_place, ``"IN_PLACE"`` passes MPI.IN_PLACE,
        ``"None"`` passes None (mpi4py reads it as MPI.IN_PLACE).
    ignored_as: the argument MPI ignores off the root (Gather(v)'s recvbuf,
        Scatter(v)'s sendbuf, Reduce's recvbuf) as ``"None"`` or
        ``"buffer"``: a buffer laid out as the root's, which must be left
        untouched.
    """

    collective: str
    size: int
    dtype: str = "int32"
    count: int = 0
    root: int = 0
    op: Optional[str] = None
    in_place: bool = False
    seed: int = 0
    counts: tuple[int, ...] = ()
    gaps: tuple[int, ...] = ()
    method: str = field(default="", compare=False)
    spec: str = "full"
    counts_as: str = "list"
    displs_as: str = "list"
    dtype_as: str = "datatype"
    in_place_as: str = "IN_PLACE"
    ignored_as: str = "None"

    def __post_init__(self) -> None:
        if not self.method:
            object.__setattr__(self, "method", self.collective)
        for name, allowed in _FORM_FIELDS.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        coll = self.collective
        for name in ("spec", "counts_as", "displs_as", "dtype_as"):
            takes = coll in VECTOR_SPEC or (name == "counts_as" and coll == "Reduce_scatter")
            if not takes and getattr(self, name) != _FORM_FIELDS[name][0]:
                raise ValueError(f"{name}: {coll} has no vector spec; only Scatterv, Gatherv, Allgatherv, "
                                 f"Alltoallv (and Reduce_scatter's counts_as) take {name}={getattr(self, name)!r}")
        if self.ignored_as != "None" and coll not in IGNORED_OFF_ROOT:
            raise ValueError(f"ignored_as: {coll} has no argument MPI ignores off the root")
        if self.in_place_as != "IN_PLACE" and not (self.in_place and coll not in NO_IN_PLACE):
            raise ValueError(f"in_place_as: {self.in_place_as!r} writes the in-place form; it needs in_place=True "
                             f"on a collective that has one")
        if self.spec == "short" and self.displs_as != "none":
            raise ValueError(f"spec: 'short' ([buf, counts, datatype]) has no displacements; it needs "
                             f"displs_as='none', got displs_as={self.displs_as!r}")
        if self.collective == "Reduce_scatter":
            if self.counts_as == "int":
                raise ValueError("counts_as: Reduce_scatter's recvcounts are 'list' or 'none', got 'int'")
            if self.counts_as == "none" and self.in_place:
                raise ValueError("counts_as: Reduce_scatter in place needs its recvcounts ('list'); "
                                 "mpi4py takes them from the receive buffers only when not in place")

    def kwargs(self) -> dict[str, Any]:
        """The case as keyword arguments of :class:`Case` (the argument forms
        only where they are not the defaults)."""
        # Every field holds an immutable value: no need for asdict's deep copies.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if d["method"] == d["collective"]:
            del d["method"]
        for name, allowed in _FORM_FIELDS.items():
            if d[name] == allowed[0]:
                del d[name]
        return d

    def forms(self) -> dict[str, str]:
        """The argument forms (spec, counts_as, ...) that are not the plain defaults."""
        return {name: getattr(self, name) for name, allowed in _FORM_FIELDS.items()
                if getattr(self, name) != allowed[0]}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs().items())
        return f"Case({args})"

    # -- shapes --------------------------------------------------------------
    def block_counts(self) -> list[int]:
        """Elements per rank's block (vector forms: counts; else count each)."""
        if self.collective in VECTOR and self.collective != "Alltoallv":
            return list(self.counts)
        return [self.count] * self.size

    def displs(self, counts: list[int], gaps: tuple[int, ...]) -> list[int]:
        """Displacements of blocks laid out in order with `gaps` before each."""
        out, pos = [], 0
        for i, c in enumerate(counts):
            pos += gaps[i] if i < len(gaps) else 0
            out.append(pos)
            pos += c
        return out

    def matrix(self) -> np.ndarray:
        """Alltoallv counts as a size x size array (row: sender)."""
        return np.array(self.counts, dtype=np.int64).reshape(self.size, self.size)


def stride_gaps(counts: Sequence[int], stride: int) -> tuple[int, ...]:
    """Gaps (see :class:`Case`) that place block i at element i*stride; the
    stride must be at least every count but the last."""
    if stride < 0 or any(c > stride for c in list(counts)[:-1]):
        raise ValueError(f"stride: {stride} is smaller than a block (counts {list(counts)}); blocks would overlap")
    return tuple(0 if i == 0 else stride - int(counts[i - 1]) for i in range(len(counts)))


def _rng(seed: int, rank: int, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, rank, salt])


def values(case: Case, rank: int, n: int) -> np.ndarray:
    """Deterministic input elements of `rank`, shaped so that the case's
    reduction cannot overflow and stays well conditioned."""
    dt = np.dtype(case.dtype)
    rng = _rng(case.seed, rank)
    op = case.op
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if op == "PROD":
            lo, hi = (-1, 1) if dt.kind == "i" else (0, 1)
            return rng.integers(lo, hi, n, endpoint=True).astype(dt)
        if op == "SUM":
            bound = int(info.max) // (4 * max(case.size, 1))
            lo = -bound if dt.kind == "i" else 0
            return rng.integers(lo, bound, n, endpoint=True).astype(dt)
        return rng.integers(info.min, info.max, n, endpoint=True, dtype=dt)
    if dt.kind == "f":
        if op == "PROD":
            return rng.uniform(0.5, 1.5, n).astype(dt)
        return rng.standard_normal(n).astype(dt)
    if dt.kind == "c":
        if op == "PROD":
            return (rng.uniform(0.5, 1.5, n) * np.exp(1j * rng.uniform(-0.3, 0.3, n))).astype(dt)
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    raise ValueError(f"dtype: {case.dtype!r} is not supported")


def send_layout(case: Case, rank: int) -> tuple[int, list[int], list[int]]:
    """(length, counts, displs) of `rank`'s send buffer (counts/displs per peer
    where the collective sends a block to each; else a single block)."""
    c, size = case.collective, case.size
    if c == "Bcast":
        return case.count, [case.count], [0]
    if c in ("Scatter", "Alltoall", "Reduce_scatter_block"):
        counts = [case.count] * size
        return case.count * size, counts, case.displs(counts, ())
    if c == "Scatterv":
        counts = list(case.counts)
        displs = case.displs(counts, case.gaps)
        return (displs[-1] + counts[-1]) if counts else 0, counts, displs
    if c == "Alltoallv":
        if case.in_place:  # the data to send sits in the receive layout
            return recv_layout(case, rank)
        counts = [int(x) for x in case.matrix()[rank]]
        displs = case.displs(counts, alltoallv_gaps(case, rank, send=True))
        return (displs[-1] + counts[-1]) if counts else 0, counts, displs
    if c == "Reduce_scatter":
        total = sum(case.counts)
        return total, list(case.counts), case.displs(list(case.counts), ())
    if c in ("Gather", "Allgather", "Gatherv", "Allgatherv"):
        n = case.block_counts()[rank]
        return n, [n], [0]
    if c in ("Reduce", "Allreduce", "Scan", "Exscan"):
        return case.count, [case.count], [0]
    return 0, [], []


def recv_layout(case: Case, rank: int) -> tuple[int, list[int], list[int]]:
    """(length, counts, displs) of `rank`'s receive buffer; length 0 where the
    rank receives nothing (non-roots of Gather and Reduce)."""
    c, size = case.collective, case.size
    if c in ("Gather", "Gatherv") and rank != case.root:
        return 0, [], []
    if c == "Reduce" and rank != case.root:
        return 0, [], []
    if c in ("Gather", "Allgather", "Gatherv", "Allgatherv"):
        counts = case.block_counts()
        gaps = case.gaps if c in ("Gatherv", "Allgatherv") else ()
        displs = case.displs(counts, gaps)
        return (displs[-1] + counts[-1]) if counts else 0, counts, displs
    if c == "Alltoall":
        counts = [case.count] * size
        return case.count * size, counts, case.displs(counts, ())
    if c == "Alltoallv":
        counts = [int(x) for x in case.matrix()[:, rank]]
        displs = case.displs(counts, alltoallv_gaps(case, rank, send=False))
        return (displs[-1] + counts[-1]) if counts else 0, counts, displs
    if c in ("Scatter", "Scatterv"):
        n = case.block_counts()[rank] if c == "Scatterv" else case.count
        return n, [n], [0]
    if c == "Reduce_scatter_block":
        if case.in_place:
            return case.count * size, [case.count], [0]
        return case.count, [case.count], [0]
    if c == "Reduce_scatter":
        if case.in_place:
            return sum(case.counts), [case.counts[rank]], [0]
        return case.counts[rank], [case.counts[rank]], [0]
    if c in ("Reduce", "Allreduce", "Scan", "Exscan"):
        return case.count, [case.count], [0]
    return 0, [], []


def alltoallv_gaps(case: Case, rank: int, send: bool) -> tuple[int, ...]:
    """Alltoallv gaps of `rank`: ``case.gaps`` holds size x size send gaps
    (row per sender), then size x size receive gaps (row per receiver)."""
    size = case.size
    start = (0 if send else size * size) + rank * size
    return tuple(case.gaps[start:start + size]) if len(case.gaps) >= start + size else ()


def send_data(case: Case, rank: int) -> np.ndarray:
    """`rank`'s whole send buffer (gaps hold values that must never be sent)."""
    length, _, _ = send_layout(case, rank)
    return values(case, rank, length)
