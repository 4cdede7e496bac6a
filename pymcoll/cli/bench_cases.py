"""The collectives that ``python -m pymcoll bench`` measures: buffers, calls, checks.

One :class:`Case` is one collective at one message size on this rank: the
buffers and arguments (the same for pymcoll and the reference), a stamp that
changes the send data before every timed call, and a check that fills the
send buffers with known values, poisons the receive buffers, makes one call
and counts the elements of the result that differ from numpy's (#wrong).
perf/bench_collectives.py builds its cases here too (with its own sizes, the
per-rank message, and its own forms of the calls from ``Case.args``).

Sizes follow nccl-tests: ``size`` is the bytes of the largest buffer of the
call: the message (Bcast), the vector (Reduce, Allreduce, Scan, Exscan) or
ranks x block (the receive buffer of Gather(v) and Allgather(v), the send
buffer of Scatter(v), Alltoall(v) and Reduce_scatter(_block)); ``count`` is
the count each rank passes for one block. The v-forms use equal counts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

# Every collective of the core, in table order, with mpi4py's method name.
METHODS: dict[str, str] = {
    "barrier": "Barrier", "bcast": "Bcast", "gather": "Gather", "gatherv": "Gatherv",
    "scatter": "Scatter", "scatterv": "Scatterv", "allgather": "Allgather",
    "allgatherv": "Allgatherv", "alltoall": "Alltoall", "alltoallv": "Alltoallv",
    "reduce": "Reduce", "allreduce": "Allreduce", "reduce_scatter_block": "Reduce_scatter_block",
    "reduce_scatter": "Reduce_scatter", "scan": "Scan", "exscan": "Exscan",
}
COLLECTIVES: tuple[str, ...] = tuple(METHODS)
TITLES: dict[str, str] = dict(METHODS)
ROOTED = frozenset({"bcast", "gather", "gatherv", "scatter", "scatterv", "reduce"})
REDUCTIONS = frozenset({"reduce", "allreduce", "reduce_scatter_block", "reduce_scatter", "scan", "exscan"})
# Collectives whose size (largest buffer) is ranks x the block each rank passes a count for.
TIMES_RANKS = frozenset({"gather", "gatherv", "scatter", "scatterv", "allgather", "allgatherv",
                         "alltoall", "alltoallv", "reduce_scatter_block", "reduce_scatter"})

SIZE_MEANING: dict[str, str] = {
    "barrier": "no data",
    "bcast": "the message",
    "gather": "the root's receive buffer, ranks x block",
    "scatter": "the root's send buffer, ranks x block",
    "allgather": "the receive buffer, ranks x block",
    "alltoall": "the send (and receive) buffer, ranks x block",
    "reduce": "the vector",
    "allreduce": "the vector",
    "reduce_scatter_block": "the send buffer, ranks x block",
    "scan": "the vector",
    "exscan": "the vector (rank 0's result is undefined, not checked)",
}
for _c in ("gather", "scatter", "allgather", "alltoall"):
    SIZE_MEANING[_c + "v"] = SIZE_MEANING[_c] + " (equal counts)"
SIZE_MEANING["reduce_scatter"] = SIZE_MEANING["reduce_scatter_block"] + " (equal recvcounts)"

DTYPES: tuple[str, ...] = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float16", "float32", "float64")
OPS: tuple[str, ...] = ("sum", "prod", "max", "min")
STAMP_BYTES = 4096  # one element per 4 KiB page of every send block changes before each call


def busbw_factor(coll: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth factor of `coll` on `ranks` ranks.

    Allreduce 2(n-1)/n; Allgather(v), Reduce_scatter(_block), Alltoall(v) (n-1)/n as
    in nccl-tests, and Gather(v), Scatter(v) too (the root's link carries n-1 of the n
    blocks); Bcast, Reduce 1 as in nccl-tests, and Scan, Exscan too (every rank's
    link carries about one vector); Barrier 0 (no data).
    """
    if ranks < 1 or coll == "barrier":
        return 0.0
    if coll == "allreduce":
        return 2 * (ranks - 1) / ranks
    if coll in TIMES_RANKS:
        return (ranks - 1) / ranks
    return 1.0


def block_count(coll: str, size: int, ranks: int, itemsize: int) -> int:
    """Elements of one rank's block (the count argument) for a `size`-byte case; 0 if none fits."""
    if coll == "barrier":
        return 0
    per = itemsize * (ranks if coll in TIMES_RANKS else 1)
    return size // per


def case_size(coll: str, count: int, ranks: int, itemsize: int) -> int:
    """The nccl-tests size (bytes of the largest buffer) of a case whose block has `count` elements."""
    return count * itemsize * (ranks if coll in TIMES_RANKS else 1)


def planned_sizes(coll: str, sizes: Sequence[int], ranks: int, itemsize: int) -> list[int]:
    """The sizes `coll` is measured at: each of `sizes` rounded down to whole blocks, those
    with no whole element dropped, duplicates dropped; Barrier: [0]."""
    if coll == "barrier":
        return [0]
    out: list[int] = []
    for s in sizes:
        count = block_count(coll, s, ranks, itemsize)
        if count > 0:
            out.append(case_size(coll, count, ranks, itemsize))
    return list(dict.fromkeys(out))


# -- the data ---------------------------------------------------------------------

def poison_value(dtype: np.dtype) -> Any:
    """A receive-buffer filler that no input or expected result equals."""
    if dtype.kind == "u":
        return np.iinfo(dtype).max  # inputs and sums stay below it (see modulus)
    return -1  # inputs are >= 0 and results of them too


def exact_limit(dtype: np.dtype) -> int:
    """Largest integer below which `dtype` holds every integer exactly, and sums don't wrap."""
    if dtype.kind == "f":
        return 2 ** (np.finfo(dtype).nmant + 1)
    return int(np.iinfo(dtype).max) - 1


def modulus(dtype: np.dtype, op: Optional[str], ranks: int) -> int:
    """Inputs are integers in 0..modulus-1: below 251 (a prime, so patterns don't repeat
    with the page stride) and, for a SUM, small enough that the sum over all ranks is exact
    in `dtype` in any order and stays below the unsigned poison."""
    limit = exact_limit(dtype)
    if op == "sum":
        limit //= max(ranks, 1)
    return max(1, min(251, limit))


def pattern(count: int, key: int, dtype: np.dtype, mod: int) -> np.ndarray:
    """`count` integers in 0..mod-1 as `dtype` that depend on position and `key`."""
    return ((np.arange(count, dtype=np.int64) * 7 + key) % mod).astype(dtype)


def contribution(count: int, seed: int, rank: int, ranks: int, dtype: np.dtype, op: str) -> np.ndarray:
    """Rank `rank`'s input to a reduction, chosen so every partial result is exact.

    PROD: each position gets a factor 2..4 from one rank (position + seed mod ranks) and 1
    from the others, so no product of any subset of ranks overflows even int8.
    """
    if op == "prod":
        pos = np.arange(count, dtype=np.int64) + seed
        out = np.ones(count, dtype)
        mine = pos % ranks == rank
        out[mine] = (2 + pos[mine] % 3).astype(dtype)
        return out
    return pattern(count, seed + 13 * rank, dtype, modulus(dtype, op, ranks))


_NUMPY_OPS: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.add.reduce, "prod": np.multiply.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}


def expected_reduction(count: int, seed: int, contributors: Sequence[int], ranks: int,
                       dtype: np.dtype, op: str) -> np.ndarray:
    """`op` over the contributions of `contributors`, in `dtype` (exact by construction)."""
    parts = [contribution(count, seed, r, ranks, dtype, op) for r in contributors]
    return _NUMPY_OPS[op](np.stack(parts), axis=0).astype(dtype)


def mpi_type(dtype: np.dtype) -> Any:
    """The predefined MPI datatype of `dtype`; ValueError naming --dtype when this MPI has none."""
    from mpi4py import MPI

    mpi_dt = getattr(MPI, "_typedict", {}).get(dtype.char)
    if mpi_dt is None or mpi_dt == MPI.DATATYPE_NULL:
        raise ValueError(f"--dtype={dtype.name}: this MPI has no datatype for it; choose another, "
                         f"e.g. float32")
    return mpi_dt


def mpi_op(op: str) -> Any:
    """MPI.SUM, MPI.PROD, MPI.MAX or MPI.MIN for 'sum', 'prod', 'max', 'min'."""
    from mpi4py import MPI

    return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]


# -- one case ---------------------------------------------------------------------

@dataclass
class Case:
    """One collective at one size on this rank (see the module docstring for size and count)."""

    coll: str
    size: int
    count: int
    root: Optional[int]  # None unless the collective has one
    redop: Optional[str]  # None unless a reduction
    type_name: Optional[str]  # None for Barrier
    calls: dict[str, Callable[[], None]]  # implementation name -> one call, arguments bound
    stamp: Callable[[], None]  # a new value in every send block; not timed
    verify: Callable[[Callable[[], None], int], int]  # (call, seed) -> wrong elements on this rank
    args: tuple  # the arguments bound in `calls`, for other forms of the method (I-form, _init)
    send_bytes: int  # the most bytes any rank sends from its send buffer
    recv_bytes: int  # the most bytes any rank receives into its receive buffer (its own block included)


# Up to this many stamped elements a call writes them one by one through a memoryview:
# 0.14 us a call for one element against 0.31 us for a numpy assignment. In back-to-back mode the
# root's stamp lies on the other ranks' timed path, so a heavy one dilutes every ratio.
STAMP_SCALAR_MAX = 16
_UINT_FORMATS = {1: "B", 2: "H", 4: "I", 8: "Q"}


def make_stamp(stamped: Sequence[np.ndarray], dtype: np.dtype) -> Callable[[], None]:
    """A function writing a new value (1..100, which every DTYPES type holds) into one
    element per STAMP_BYTES of every row of each 2-D array in `stamped`."""
    stride = max(1, STAMP_BYTES // dtype.itemsize)
    views = [b[:, ::stride] for b in stamped]
    tick = 0
    if (sum(v.size for v in views) <= STAMP_SCALAR_MAX and dtype.itemsize in _UINT_FORMATS
            and all(b.flags.c_contiguous for b in stamped)):
        unsigned = np.dtype(f"u{dtype.itemsize}")
        patterns = [int(np.array(value, dtype).view(unsigned)) for value in range(1, 101)]
        fmt = _UINT_FORMATS[dtype.itemsize]
        targets = [(memoryview(b.reshape(-1)).cast("B").cast(fmt),
                    [r * b.shape[1] + k for r in range(b.shape[0]) for k in range(0, b.shape[1], stride)])
                   for b in stamped if b.size]

        def stamp_scalars() -> None:
            nonlocal tick
            tick += 1
            bits = patterns[tick % 100]
            for mv, indices in targets:
                for i in indices:
                    mv[i] = bits
        return stamp_scalars

    def stamp_views() -> None:
        nonlocal tick
        tick += 1
        value = 1 + tick % 100
        for view in views:
            view[...] = value
    return stamp_views


def make_case(comm: Any, coll: str, size: int, *, root: int = 0, dtype: Any = np.float32,
              op: str = "sum", targets: Optional[dict[str, Any]] = None,
              alloc: Optional[Callable[[int, np.dtype], np.ndarray]] = None) -> Optional[Case]:
    """Buffers, calls, stamp and check of `coll` with a `size`-byte largest buffer.

    Args:
        comm: the pymcoll.Comm (its rank and size are used).
        coll: one of COLLECTIVES.
        size: nccl-tests size in bytes, rounded down to whole blocks; None is returned
            when not one element per block fits.
        root: the root of the rooted collectives.
        dtype: element type of every buffer.
        op: 'sum', 'prod', 'max' or 'min' for the reductions.
        targets: implementation name -> object with mpi4py's methods (default
            {'pymcoll': comm, 'mpi4py': comm.mpi}); every one is called with the same
            arguments. ``{}`` binds none: the caller makes its calls from ``Case.args``.
        alloc: ``alloc(elements, dtype)`` makes each buffer (default numpy.empty), e.g.
            pymcoll.alloc for buffers in the shared heap.
    """
    if coll not in METHODS:
        raise ValueError(f"coll={coll!r}: expected one of {', '.join(COLLECTIVES)}")
    if op not in OPS:
        raise ValueError(f"--op={op!r}: expected one of {', '.join(OPS)}")
    dtype = np.dtype(dtype)
    n, me = comm.size, comm.rank
    if targets is None:
        targets = {"pymcoll": comm, "mpi4py": comm.mpi}
    method = METHODS[coll]

    def bind(args: tuple) -> dict[str, Callable[[], None]]:
        # The method is looked up once, so a timed call costs the same Python work on both sides.
        return {name: functools.partial(getattr(obj, method), *args) for name, obj in targets.items()}

    if coll == "barrier":
        def verify_barrier(call: Callable[[], None], seed: int) -> int:
            call()
            return 0
        return Case(coll, 0, 0, None, None, None, bind(()), lambda: None, verify_barrier, (), 0, 0)

    count = block_count(coll, size, n, dtype.itemsize)
    if count < 1:
        return None
    is_root = me == root
    poison = poison_value(dtype)
    mod = modulus(dtype, None, n)
    v_form = coll.endswith("v")
    mpi_dt = mpi_type(dtype) if v_form else None
    counts = [count] * n
    displs = [i * count for i in range(n)]

    def spec(buf: Optional[np.ndarray]) -> Any:
        """The buffer argument: the array, or [buf, counts, displs, type] for the v-forms."""
        return [buf, counts, displs, mpi_dt] if (v_form and buf is not None) else buf

    def blank(elements: int) -> np.ndarray:
        buf = alloc(elements, dtype) if alloc is not None else np.empty(elements, dtype)
        buf[...] = poison
        return buf

    def blocks(buf: np.ndarray) -> np.ndarray:
        return buf.reshape(-1, count)

    def data(key: int) -> np.ndarray:
        return pattern(count, key, dtype, mod)

    def wrong_blocks(buf: np.ndarray, keys: Sequence[int]) -> int:
        return sum(int(np.count_nonzero(b != data(k))) for b, k in zip(blocks(buf), keys))

    # Keys: rank r's block for destination j is data(seed + 13 r + 101 j).
    stamped: list[np.ndarray] = []
    fill: Callable[[int], None]
    check: Callable[[int], int]
    redop: Optional[str] = None
    block = count * dtype.itemsize
    if coll == "bcast":
        buf = blank(count)
        args: tuple = (buf, root)
        send_bytes = recv_bytes = block
        stamped = [buf] if is_root else []

        def fill(seed: int) -> None:
            buf[:] = data(seed) if is_root else poison

        def check(seed: int) -> int:
            return wrong_blocks(buf, [seed])
    elif coll in ("gather", "gatherv", "allgather", "allgatherv"):
        everyone = coll.startswith("all")
        send = blank(count)
        recv = blank(n * count) if (everyone or is_root) else None
        args = (send, spec(recv)) if everyone else (send, spec(recv), root)
        send_bytes, recv_bytes = block, n * block
        stamped = [send]

        def fill(seed: int) -> None:
            send[:] = data(seed + 13 * me)
            if recv is not None:
                recv[:] = poison

        def check(seed: int) -> int:
            return 0 if recv is None else wrong_blocks(recv, [seed + 13 * r for r in range(n)])
    elif coll in ("scatter", "scatterv"):
        send = blank(n * count) if is_root else None
        recv = blank(count)
        args = (spec(send), recv, root)
        send_bytes, recv_bytes = n * block, block
        stamped = [send] if send is not None else []

        def fill(seed: int) -> None:
            if send is not None:
                for j, b in enumerate(blocks(send)):
                    b[:] = data(seed + 101 * j)
            recv[:] = poison

        def check(seed: int) -> int:
            return wrong_blocks(recv, [seed + 101 * me])
    elif coll in ("alltoall", "alltoallv"):
        send, recv = blank(n * count), blank(n * count)
        args = (spec(send), spec(recv))
        send_bytes = recv_bytes = n * block
        stamped = [send]

        def fill(seed: int) -> None:
            for j, b in enumerate(blocks(send)):
                b[:] = data(seed + 13 * me + 101 * j)
            recv[:] = poison

        def check(seed: int) -> int:
            return wrong_blocks(recv, [seed + 13 * i + 101 * me for i in range(n)])
    elif coll in ("reduce_scatter_block", "reduce_scatter"):
        redop = op
        send, recv = blank(n * count), blank(count)
        args = ((send, recv, mpi_op(op)) if coll == "reduce_scatter_block"
                else (send, recv, counts, mpi_op(op)))
        send_bytes, recv_bytes = n * block, block
        stamped = [send]

        def fill(seed: int) -> None:
            for j, b in enumerate(blocks(send)):
                b[:] = contribution(count, seed + 101 * j, me, n, dtype, op)
            recv[:] = poison

        def check(seed: int) -> int:
            want = expected_reduction(count, seed + 101 * me, range(n), n, dtype, op)
            return int(np.count_nonzero(recv != want))
    else:  # reduce, allreduce, scan, exscan
        redop = op
        send = blank(count)
        recv = blank(count) if (coll != "reduce" or is_root) else None
        args = (send, recv, mpi_op(op), root) if coll == "reduce" else (send, recv, mpi_op(op))
        send_bytes = recv_bytes = block
        stamped = [send]
        contributors = {"reduce": range(n), "allreduce": range(n), "scan": range(me + 1),
                        "exscan": range(me)}[coll]

        def fill(seed: int) -> None:
            send[:] = contribution(count, seed, me, n, dtype, op)
            if recv is not None:
                recv[:] = poison

        def check(seed: int) -> int:
            if recv is None or len(contributors) == 0:  # not the root; Exscan's rank 0
                return 0
            want = expected_reduction(count, seed, contributors, n, dtype, op)
            return int(np.count_nonzero(recv != want))

    # One element per page of every block changes before each timed call, so a result
    # cached from an earlier call (or a copy skipped for unchanged data) would be stale.
    stamp = make_stamp([blocks(b) for b in stamped], dtype)

    def verify(call: Callable[[], None], seed: int) -> int:
        fill(seed)
        call()
        return check(seed)

    return Case(coll, case_size(coll, count, n, dtype.itemsize), count,
                root if coll in ROOTED else None, redop, dtype.name, bind(args), stamp, verify, args,
                send_bytes, recv_bytes)


# -- memory traffic -----------------------------------------------------------------

#: Smallest size whose mem_frac is measured: below it a memcpy's own call overhead dominates.
MEM_FRAC_MIN = 64 << 10


def rank_traffic(coll: str, size: int, ranks: int) -> Optional[int]:
    """Bytes the busiest rank must read plus write for `coll` at `size` (the CLI's size) on
    `ranks` ranks sharing memory, moving each byte once (a copy counts its read and its write;
    a rooted collective's blocks copied by their own ranks); None for Barrier, Scan, Exscan."""
    n = ranks
    if coll == "bcast":
        return 2 * size  # read the root's message, write one's own
    if coll in ("scatter", "scatterv", "gather", "gatherv"):
        return 2 * (size // n)  # one's own block, read and written once
    if coll in ("allgather", "allgatherv", "alltoall", "alltoallv"):
        return 2 * size  # read every block once, write every block once
    if coll in ("reduce", "allreduce"):
        # reduce a 1/n slice of every input, then copy the other n-1 slices of the result
        return size + size // n + 2 * (size - size // n)
    if coll in ("reduce_scatter_block", "reduce_scatter"):
        return size + size // n  # one block of every rank's send buffer, one block written
    return None


# -- call forms -------------------------------------------------------------------

#: How a timed call is made: the blocking call, its I-form then Wait, or X_init once and
#: Start + Wait per call.
MODES = ("plain", "nonblocking", "persistent")


def nonblocking_name(method: str) -> str:
    """'Allgather' -> 'Iallgather' (mpi4py's name of the I-form)."""
    return "I" + method[0].lower() + method[1:]


def form_name(method: str, mode: str) -> str:
    """The method called in `mode`: 'Allgather', 'Iallgather' or 'Allgather_init'."""
    return {"plain": method, "nonblocking": nonblocking_name(method), "persistent": method + "_init"}[mode]


def make_call(obj: Any, method: str, args: tuple, mode: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(call, release) for `method` of `obj` (a pymcoll.Comm or mpi4py communicator) in `mode`.

    The method (and the persistent request) is looked up once, so a timed call costs the same
    Python work on both sides. Raises what `obj` raises for a form it lacks (mpi4py:
    NotImplementedError for X_init on an MPI without it).
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "plain":
        fn = getattr(obj, method)
        return (lambda: fn(*args)), (lambda: None)
    if mode == "nonblocking":
        ifn = getattr(obj, nonblocking_name(method))

        def run_nonblocking() -> None:
            ifn(*args).Wait()
        return run_nonblocking, (lambda: None)
    req = getattr(obj, method + "_init")(*args)
    start, wait = req.Start, req.Wait

    def run_persistent() -> None:
        start()
        wait()
    return run_persistent, req.Free


def reference_call(mpi: Any, method: str, args: tuple, mode: str
                   ) -> tuple[Optional[tuple[Callable[[], None], Callable[[], None]]], Optional[str]]:
    """mpi4py's (call, release), or (None, reason) when this MPI lacks the form on some rank.
    Collective over `mpi` (ranks agree, so all time the reference or none does)."""
    from mpi4py import MPI

    made, reason = None, None
    try:
        made = make_call(mpi, method, args, mode)
    except NotImplementedError as exc:
        reason = f"NotImplementedError: {exc or form_name(method, mode)}"
    everyone = mpi.allreduce(made is not None, op=MPI.LAND)
    if not everyone:
        if made is not None:
            made[1]()
        return None, reason or "not available on another rank"
    return made, None

