"""A two-tier embedding table: a memory-mapped slow tier and a small fast tier.

The slow tier holds every row in a file (``numpy.memmap``, float16, float32
or float64, shape ``(n_rows, dim)``), with a JSON sidecar ``path + ".json"``
that records the shape and dtype, so a file is reopened only as what it is.
The fast tier is a preallocated array of ``capacity`` slots; a dict maps each
held row to its slot, and a replacement policy (:mod:`.policies`) names the
row to evict when a slot is needed.

Every access (a row id in :meth:`~TieredEmbeddingStore.lookup`,
:meth:`~TieredEmbeddingStore.update` or :meth:`~TieredEmbeddingStore.add`)
is served from the fast tier: a missing row is read from the file first,
evicting the policy's victim when no slot is free. Accesses are timed
0, 1, 2, ...; a batch is announced whole to the policy (``observe``) before
its first access, then each access is a ``hit`` or an ``insert``, in order,
so duplicates in a batch are hits after the first. The distinct rows of a
batch are pinned while it is served: a batch never evicts its own rows, and
it must fit the fast tier with the rows pinned by the user (else
:class:`CapacityError`, raised before anything changes).

Writes go to the fast tier and mark the slot dirty; a dirty row reaches the
file when it is evicted (write-back), at :meth:`~TieredEmbeddingStore.flush`
or at :meth:`~TieredEmbeddingStore.close`. Rows pinned with
:meth:`~TieredEmbeddingStore.pin` are loaded at once and never evicted until
unpinned; :meth:`~TieredEmbeddingStore.prefetch` brings rows in ahead of use.

The store is not thread-safe, and a policy object belongs to one store (the
store resets it).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional, Union

import numpy as np

from .learned import LearnedCachePolicy
from .policies import CLASSIC, Policy

#: Row dtypes the slow and fast tiers may have.
DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
MODES = ("r+", "w+", "r")

_FORMAT = "pymcoll.tiered_embedding"
_VERSION = 1
_POLICY_METHODS = ("reset", "hit", "insert", "victim", "remove")
_STATS = ("hits", "misses", "prefetched", "prefetch_used", "evictions", "writebacks")

PathLike = Union[str, "os.PathLike[str]"]
PolicyLike = Union[str, Policy, type]


class CapacityError(ValueError):
    """The rows that must be held at once (a batch and the pinned rows) exceed the fast tier."""


# ---------------------------------------------------------------------------
# Checks, policies and the sidecar
# ---------------------------------------------------------------------------

def _check_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}={value!r}: an integer is needed")
    if int(value) < 1:
        raise ValueError(f"{name}={value}: must be at least 1")
    return int(value)


def _check_capacity(capacity: object, n_rows: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        raise TypeError(f"capacity={capacity!r}: an integer number of fast-tier rows is needed")
    if int(capacity) < 1:
        raise ValueError(f"capacity={capacity}: the fast tier needs at least 1 row")
    if int(capacity) > n_rows:
        raise ValueError(f"capacity={capacity} exceeds the table's n_rows={n_rows}: "
                         f"use a capacity of at most {n_rows} (the whole table)")
    return int(capacity)


def _check_dtype(dtype: object) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype={dtype!r} is not a numpy dtype; use float16, float32 or float64") from None
    if dt not in DTYPES:
        raise TypeError(f"dtype={dt}: rows must be float16, float32 or float64")
    return dt


def make_policy(policy: PolicyLike, n_rows: Optional[int] = None) -> Policy:
    """A policy from a name (``"lru"``, ``"lfu"``, ``"arc"``, ``"lecar"``, ``"tinylfu"``, ``"opt"``,
    ``"learned"``), a policy class, or an object (returned as is). ``"learned"`` needs the table's
    `n_rows`; until its ``train()`` is called on the lookups served so far its model's order is
    LRU's, and its guard follows whichever classical policy's shadow is ahead.

    Any object with ``reset``, ``hit``, ``insert``, ``victim`` and ``remove``
    (the interface of :class:`~.policies.Policy`) is accepted; ``observe`` is
    called when it has one.
    """
    if isinstance(policy, str) and policy.lower() == "learned":
        if n_rows is None:
            raise ValueError("policy='learned' needs n_rows (the table size) for its per-row access state")
        return LearnedCachePolicy(n_rows)
    if isinstance(policy, str):
        cls = CLASSIC.get(policy.lower())
        if cls is None:
            raise ValueError(f"policy={policy!r}: unknown name; use one of "
                             f"{', '.join(repr(n) for n in CLASSIC)}, 'learned' or pass a policy object")
        return cls()
    if isinstance(policy, type):
        policy = policy()
    missing = [m for m in _POLICY_METHODS if not callable(getattr(policy, m, None))]
    if missing:
        raise TypeError(f"policy={policy!r} lacks {', '.join(missing)}: pass a name "
                        f"({', '.join(repr(n) for n in CLASSIC)}) or an object with the interface of policies.Policy")
    return policy  # type: ignore[return-value]


def sidecar_path(path: PathLike) -> str:
    """The JSON file beside `path` that records its table's shape and dtype."""
    return os.fspath(path) + ".json"


def read_header(path: PathLike) -> dict:
    """Shape and dtype of the table in `path`, from its sidecar: ``{"n_rows", "dim", "dtype"}``.

    Checks the sidecar and that the file's size matches it.
    """
    side = sidecar_path(path)
    try:
        with open(side, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{side} not found: {os.fspath(path)} was not written by TieredEmbeddingStore "
                                "(or its sidecar was removed); write tables with TieredEmbeddingStore.create "
                                "or mode='w+'") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{side} is not valid JSON ({e}): restore it or recreate the table") from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError(f"{side} is not a TieredEmbeddingStore sidecar (no format {_FORMAT!r})")
    if not isinstance(meta.get("version"), int) or meta["version"] > _VERSION:
        raise ValueError(f"{side} has version {meta.get('version')!r}; this code reads version {_VERSION} "
                         "or older: upgrade pymcoll")
    try:
        n_rows = _check_count(meta.get("n_rows"), "n_rows")
        dim = _check_count(meta.get("dim"), "dim")
        dtype = _check_dtype(meta.get("dtype"))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{side} is damaged: {e}") from None
    size = os.path.getsize(path)
    want = n_rows * dim * dtype.itemsize
    if size != want:
        raise ValueError(f"{os.fspath(path)} has {size} bytes but its sidecar {side} says {n_rows} x {dim} "
                         f"{dtype} ({want} bytes): the file was truncated or replaced; recreate the table")
    return {"n_rows": n_rows, "dim": dim, "dtype": dtype}


def _write_sidecar(path: str, n_rows: int, dim: int, dtype: np.dtype) -> None:
    side = sidecar_path(path)
    tmp = side + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"format": _FORMAT, "version": _VERSION, "n_rows": n_rows, "dim": dim, "dtype": dtype.name}, f)
    os.replace(tmp, side)  # atomic: a reader sees the old sidecar or the new one, never half of one


# ---------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------

class TieredEmbeddingStore:
    """An embedding table of `n_rows` x `dim` in the file `path`, with a fast tier of `capacity` rows.

    mode ``"w+"`` creates (or overwrites) the file, filled with `init` (a
    scalar, or an array of shape ``(n_rows, dim)``; zeros if None) in
    `dtype` (float32 if None). Modes ``"r+"`` (read and write) and ``"r"``
    (read only) open an existing table; `n_rows`, `dim` and `dtype` may be
    None there and are taken from the sidecar, else they must match it.
    :meth:`create` and :meth:`open` are the short forms.

    `policy`: ``"lru"``, ``"lfu"``, ``"opt"``, a policy class, or a policy
    object (any object with the interface of :class:`~.policies.Policy`);
    the store resets it to `capacity` and owns it from then on.

    Counters (reset by :meth:`reset_stats`): ``hits``; ``misses`` (rows read
    from the file on demand); ``prefetched`` (rows brought in by
    :meth:`prefetch`); ``prefetch_used`` (of those, rows accessed before
    their eviction); ``evictions``; ``writebacks`` (dirty rows written to
    the file, at eviction or flush).
    """

    def __init__(self, path: PathLike, n_rows: Optional[int], dim: Optional[int], capacity: int,
                 policy: PolicyLike = "lru", *, dtype: object = None, mode: str = "r+",
                 init: object = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}: use 'r+' (read and write an existing table), 'w+' (create or "
                             "overwrite) or 'r' (read only)")
        self.path = os.fspath(path)
        # Every check runs before the file is touched: a bad argument must not clobber an existing table.
        if mode == "w+":
            if n_rows is None or dim is None:
                raise ValueError("mode='w+' creates a table: give n_rows and dim")
            n_rows = _check_count(n_rows, "n_rows")
            dim = _check_count(dim, "dim")
            dt = _check_dtype(np.float32 if dtype is None else dtype)
        else:
            if init is not None:
                raise ValueError(f"init fills a new table only (mode='w+'), not an existing one (mode={mode!r})")
            head = read_header(self.path)
            for name, asked in (("n_rows", n_rows), ("dim", dim)):
                if asked is not None and _check_count(asked, name) != head[name]:
                    raise ValueError(
                        f"{name}={asked}, but {self.path} holds {head['n_rows']} rows of dim {head['dim']} "
                        f"({head['dtype']}, per {sidecar_path(self.path)}): pass {name}={head[name]}, or use "
                        "TieredEmbeddingStore.open(path, capacity), which takes the shape from the file")
            if dtype is not None and _check_dtype(dtype) != head["dtype"]:
                raise ValueError(f"dtype={np.dtype(dtype)}, but {self.path} holds {head['dtype']} rows "
                                 f"(per {sidecar_path(self.path)}): pass dtype={head['dtype']} or None")
            n_rows, dim, dt = head["n_rows"], head["dim"], head["dtype"]
        capacity = _check_capacity(capacity, n_rows)
        pol = make_policy(policy, n_rows)
        fill = None
        if init is not None:
            fill = np.asarray(init)
            if fill.dtype.kind not in "iuf":
                raise TypeError(f"init has dtype {fill.dtype}; expected real numbers")
            if fill.ndim != 0 and fill.shape != (n_rows, dim):
                raise ValueError(f"init has shape {fill.shape}; expected ({n_rows}, {dim}) or a scalar")
        pol.reset(capacity)

        if mode == "w+":
            # Drop a stale sidecar first: a crash while writing must not leave it describing the new file.
            try:
                os.remove(sidecar_path(self.path))
            except FileNotFoundError:
                pass
            mm = np.memmap(self.path, dtype=dt, mode="w+", shape=(n_rows, dim))
            if fill is not None:
                mm[:] = fill  # cast to the table's dtype
            mm.flush()
            _write_sidecar(self.path, n_rows, dim, dt)
        else:
            mm = np.memmap(self.path, dtype=dt, mode=mode, shape=(n_rows, dim))

        self._mm: Optional[np.memmap] = mm
        self._mode = "r+" if mode == "w+" else mode
        self._n_rows, self._dim, self._dtype, self._capacity = n_rows, dim, dt, capacity
        self._policy = pol
        self._observe = getattr(pol, "observe", None)
        self._fast = np.zeros((capacity, dim), dtype=dt)
        self._row_of = np.full(capacity, -1, dtype=np.int64)  # row held in each slot, -1 if free
        self._dirty = np.zeros(capacity, dtype=bool)
        self._slot: dict[int, int] = {}
        self._free = list(range(capacity - 1, -1, -1))  # a stack: slot 0 is used first
        self._pins: dict[int, int] = {}
        self._pf_unused: set[int] = set()  # prefetched rows not accessed since
        self._t = 0
        self.reset_stats()

    # -- construction shortcuts ---------------------------------------------

    @classmethod
    def create(cls, path: PathLike, table: object, capacity: int, policy: PolicyLike = "lru", *,
               dtype: object = None) -> "TieredEmbeddingStore":
        """Write `table` (n_rows x dim) to a new file `path` (overwriting it) and open it.

        dtype: of the file; None keeps the table's if it is float16/32/64, else float32.
        """
        arr = np.asarray(table)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"table has dtype {arr.dtype}; expected real numbers")
        if arr.ndim != 2:
            raise ValueError(f"table has shape {arr.shape}; expected (n_rows, dim)")
        if dtype is None:
            dtype = arr.dtype if arr.dtype in DTYPES else np.float32
        return cls(path, arr.shape[0], arr.shape[1], capacity, policy, dtype=dtype, mode="w+", init=arr)

    @classmethod
    def open(cls, path: PathLike, capacity: int, policy: PolicyLike = "lru", *,
             mode: str = "r+") -> "TieredEmbeddingStore":
        """Open the existing table in `path` (shape and dtype from its sidecar); mode ``"r+"`` or ``"r"``."""
        if mode not in ("r+", "r"):
            raise ValueError(f"mode={mode!r}: open() reads an existing table, use 'r+' or 'r' "
                             "(create() writes a new one)")
        return cls(path, None, None, capacity, policy, mode=mode)

    # -- properties -------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def mode(self) -> str:
        """``"r+"`` (writable) or ``"r"`` (read only)."""
        return self._mode

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def time(self) -> int:
        """Accesses served so far: the time of the next one."""
        return self._t

    @property
    def closed(self) -> bool:
        return self._mm is None

    @property
    def n_held(self) -> int:
        """Rows in the fast tier now."""
        return len(self._slot)

    def __contains__(self, row: object) -> bool:
        """Whether `row` is in the fast tier now."""
        return row in self._slot

    def held_rows(self) -> np.ndarray:
        """The rows in the fast tier, increasing."""
        return np.array(sorted(self._slot), dtype=np.int64)

    def pin_count(self, row: int) -> int:
        """How many times `row` is pinned (0 if not)."""
        return self._pins.get(int(row), 0)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._slot)}/{self._capacity} held"
        return (f"TieredEmbeddingStore({self.path!r}, {self._n_rows} x {self._dim} {self._dtype}, "
                f"policy={getattr(self._policy, 'name', type(self._policy).__name__)!r}, {state})")

    # -- checks -----------------------------------------------------------------

    def _check_open(self) -> np.memmap:
        if self._mm is None:
            raise ValueError(f"the store of {self.path} is closed: reopen it with TieredEmbeddingStore.open")
        return self._mm

    def _check_writable(self) -> None:
        self._check_open()
        if self._mode == "r":
            raise ValueError(f"the store of {self.path} is read only (mode='r'): open it with mode='r+' to write rows")

    def _ids(self, ids: object, name: str = "ids") -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim == 1 and arr.size == 0:
            return np.zeros(0, dtype=np.int64)  # [] comes as float64
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name} has dtype {arr.dtype}; row ids must be integers (a list or 1-D integer array)")
        if arr.ndim != 1:
            raise ValueError(f"{name} has shape {arr.shape}; expected a 1-D sequence of row ids "
                             "(write a single id as [id])")
        bad = (arr < 0) | (arr >= self._n_rows)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise IndexError(f"{name}[{i}]={arr[i]} is outside the table of {self._n_rows} rows "
                             f"(ids must be in 0..{self._n_rows - 1})")
        return arr.astype(np.int64, copy=False)

    def _values(self, values: object, n: int, name: str) -> np.ndarray:
        arr = np.asarray(values)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"{name} has dtype {arr.dtype}; expected real numbers")
        if arr.shape != (n, self._dim):
            raise ValueError(f"{name} has shape {arr.shape}; expected ({n}, {self._dim}): one row of "
                             f"{self._dim} values per id")
        return arr.astype(self._dtype, copy=False)

    def _check_room(self, rows: np.ndarray, what: str) -> None:
        """Raise CapacityError unless `rows` (distinct) and the pinned rows fit the fast tier together."""
        others = len(self._pins.keys() - set(rows.tolist())) if self._pins else 0
        need = rows.size + others
        if need > self._capacity:
            raise CapacityError(
                f"{what} of {rows.size} distinct rows needs them in the fast tier at once, with the {others} "
                f"other pinned rows: {need} slots, but capacity is {self._capacity}; split the batch, unpin "
                "rows, or use a larger capacity")

    def check_invariants(self) -> None:
        """Raise AssertionError if the fast tier's bookkeeping is inconsistent (for tests)."""
        held = self._slot
        assert len(held) + len(self._free) == self._capacity, "slots lost or duplicated"
        assert len(set(self._free)) == len(self._free), "a free slot listed twice"
        for row, s in held.items():
            assert self._row_of[s] == row, f"slot {s} maps to row {self._row_of[s]}, not {row}"
        for s in self._free:
            assert self._row_of[s] == -1 and not self._dirty[s], f"free slot {s} holds a row or is dirty"
        if hasattr(self._policy, "__len__"):
            assert len(self._policy) == len(held), f"policy holds {len(self._policy)} rows, store {len(held)}"
        if hasattr(self._policy, "__contains__"):
            for row in held:
                assert row in self._policy, f"row {row} held but unknown to the policy"
        for row, c in self._pins.items():
            assert c > 0 and row in held, f"pinned row {row} (count {c}) not held"
        assert self._pf_unused <= held.keys(), "an evicted row still counted as prefetched"

    # -- moving rows ------------------------------------------------------------

    def _evict(self, row: int, s: int) -> None:
        if self._dirty[s]:
            self._mm[row] = self._fast[s]  # type: ignore[index]
            self._dirty[s] = False
            self.writebacks += 1
        self._release(row, s)
        self.evictions += 1

    def _release(self, row: int, s: int) -> None:
        """`row` leaves slot `s` (its data already written back or not wanted)."""
        self._policy.remove(row)
        del self._slot[row]
        self._row_of[s] = -1
        self._pf_unused.discard(row)

    def _take_slot(self, t: int, pinned: frozenset) -> int:
        """A free slot, evicting the policy's victim if none is free."""
        if self._free:
            return self._free.pop()
        row = int(self._policy.victim(t, pinned))
        s = self._slot.get(row)
        if s is None or row in pinned:
            why = "not held" if s is None else "pinned"
            raise RuntimeError(f"policy {self._policy!r} chose row {row} to evict, which is {why}: a policy bug")
        self._evict(row, s)
        return s

    def _enter(self, row: int, t: int, pinned: frozenset, prefetched: bool) -> int:
        """Give `row` (not held) a slot and tell the policy; its data are loaded later by _load."""
        s = self._take_slot(t, pinned)
        try:
            if prefetched:
                self._policy.insert(row, t, prefetched=True)
            else:
                self._policy.insert(row, t)
        except BaseException:
            self._free.append(s)
            raise
        self._slot[row] = s
        self._row_of[s] = row
        return s

    def _load(self, rows: list, slots: list) -> None:
        # One gather from the file, in row order. A slot can wait for its data until the end of a
        # call: rows entered in a call are pinned for it, so their slots are never reused in it.
        if not rows:
            return
        try:
            r = np.asarray(rows, dtype=np.int64)
            order = np.argsort(r, kind="stable")
            self._fast[np.asarray(slots, dtype=np.int64)[order]] = self._mm[r[order]]  # type: ignore[index]
        except BaseException:
            # Not read (an I/O error, MemoryError, Ctrl-C): the rows leave again, so that no later
            # access returns what their slots held before.
            for row, s in zip(rows, slots, strict=True):
                if self._slot.get(row) == s:
                    self._release(row, s)
                    self._dirty[s] = False
                    self._free.append(s)
            raise

    def _serve(self, ids: np.ndarray) -> np.ndarray:
        """Bring every row of the batch `ids` into the fast tier, as accesses; their slots."""
        self._check_open()
        n = ids.size
        slots = np.empty(n, dtype=np.int64)
        if n == 0:
            return slots
        rows = np.unique(ids)
        self._check_room(rows, "a batch")
        t0 = self._t
        if self._observe is not None:
            try:
                self._observe(ids, t0)
            except BaseException:
                self._catch_up()
                raise
        # Frozen: the heap policies pass over a batch's pinned rows once for the whole batch.
        pinned = frozenset(rows.tolist()).union(self._pins)
        slot_of, pol, unused = self._slot, self._policy, self._pf_unused
        load_rows: list[int] = []
        load_slots: list[int] = []
        hits = used = 0
        try:
            for i, row in enumerate(ids.tolist()):
                s = slot_of.get(row)
                if s is not None:
                    pol.hit(row, t0 + i)
                    hits += 1
                    if unused and row in unused:
                        unused.discard(row)
                        used += 1
                else:
                    s = self._enter(row, t0 + i, pinned, False)
                    load_rows.append(row)
                    load_slots.append(s)
                slots[i] = s
        finally:
            try:
                self._load(load_rows, load_slots)
            finally:
                # The policy was told of the whole batch: its clock moves past it even if a call failed.
                self._t = t0 + n
                self.hits += hits
                self.misses += len(load_rows)
                self.prefetch_used += used
        return slots

    def _admit(self, rows: list, pinned: frozenset) -> None:
        """Bring `rows` (distinct, not held) in ahead of use, at the current time."""
        t = self._t
        loaded: list[int] = []
        slots: list[int] = []
        try:
            for row in rows:
                slots.append(self._enter(row, t, pinned, True))
                loaded.append(row)
        finally:
            self._load(loaded, slots)

    # -- accesses ---------------------------------------------------------------

    def lookup(self, ids: object) -> np.ndarray:
        """The rows `ids` (a 1-D integer sequence), as a new ``(len(ids), dim)`` array of the store's dtype.

        Each id is one access; rows missing from the fast tier are read from
        the file. Raises CapacityError, changing nothing, if the distinct
        rows of `ids` and the other pinned rows exceed the capacity.
        """
        ids = self._ids(ids)
        slots = self._serve(ids)
        return self._fast[slots]

    def lookup_batches(self, batches: Iterable[object]) -> list[np.ndarray]:
        """Several batches of ids, looked up in order: the same rows, counters and fast tier as
        :meth:`lookup` called on each in turn; a list of one array per batch.

        A policy that prepares batches ahead (``"learned"``: its shadows, features and
        predictions) prepares all of them in one pass, which costs it less per lookup than one
        batch at a time (the batches a data loader has queued are the natural call; a 2-D array
        is a batch per row). Their predictions come from the model as it is at the call, so a
        learned policy that retrains as it goes (``retrain_every``) may serve the later batches
        of a call with the model before. Every batch is checked before any is served
        (TypeError, ValueError or IndexError naming ``batches[i]``, CapacityError if a batch's
        distinct rows and the other pinned rows exceed the capacity), so a bad batch changes
        nothing. If serving fails part way (an I/O error), the batches not served are dropped,
        and the store's clock moves past them to where the policy's stream is.
        """
        self._check_open()
        if isinstance(batches, np.ndarray):
            # A batch per row of a 2-D array, or a 1-D array of arrays (batches of different lengths).
            what = None if batches.ndim == 2 or (batches.ndim == 1 and batches.dtype == object) \
                else f"an array of shape {batches.shape}"
        else:
            what = type(batches).__name__ if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable) \
                else None
        if what is not None:
            raise TypeError(f"batches must be a list of 1-D id arrays, one per batch (or a 2-D array, a batch "
                            f"per row), got {what}; for one batch call lookup(ids)")
        batches = list(batches)
        for i, b in enumerate(batches):
            if np.ndim(b) == 0:
                raise TypeError(f"batches[{i}] is a single id ({b!r}): batches must be a list of 1-D id arrays, "
                                "one per batch; for one batch call lookup(ids)")
        arrays = [self._ids(b, f"batches[{i}]") for i, b in enumerate(batches)]
        for i, a in enumerate(arrays):
            self._check_room(np.unique(a), f"batches[{i}]")
        prepare = getattr(self._policy, "prepare_batches", None)
        ahead = [a for a in arrays if a.size]
        out: list[np.ndarray] = []
        try:
            if prepare is not None and len(ahead) > 1:
                t, parts = self._t, []
                for a in ahead:
                    parts.append((t, a))
                    t += a.size
                prepare(parts)
            for a in arrays:
                out.append(self._fast[self._serve(a)])
        except BaseException:
            self._catch_up()
            raise
        return out

    def _catch_up(self) -> None:
        """After a failure: drop what the policy prepared and was not served, and move the clock to
        where the policy's stream is (its shadows and features have seen those lookups)."""
        drop = getattr(self._policy, "drop_prepared", None)
        if drop is not None:
            self._t = max(self._t, int(drop()))

    def update(self, ids: object, values: object) -> None:
        """Set the rows `ids` to `values` (shape ``(len(ids), dim)``, cast to the store's dtype).

        The rows are accessed as by :meth:`lookup` (times, counters, policy)
        and held dirty until written back. An id repeated in `ids`: the last
        of its values wins.
        """
        self._check_writable()
        ids = self._ids(ids)
        values = self._values(values, ids.size, "values")
        slots = self._serve(ids)
        if ids.size:
            # Last write wins; fancy assignment with repeated indices leaves the order unspecified,
            # so keep only the last position of each row.
            _, first_rev = np.unique(slots[::-1], return_index=True)
            last = ids.size - 1 - first_rev
            self._fast[slots[last]] = values[last]
            self._dirty[slots] = True

    def add(self, ids: object, deltas: object) -> None:
        """Add `deltas` (shape ``(len(ids), dim)``, cast to the store's dtype) to the rows `ids`.

        As ``np.add.at(table, ids, deltas)``: an id repeated in `ids` takes
        each of its deltas, in order. Accesses and dirtiness as in :meth:`update`.
        """
        self._check_writable()
        ids = self._ids(ids)
        deltas = self._values(deltas, ids.size, "deltas")
        slots = self._serve(ids)
        if ids.size:
            np.add.at(self._fast, slots, deltas)
            self._dirty[slots] = True

    # -- pinning and prefetching ------------------------------------------------

    def pin(self, ids: object) -> None:
        """Pin the rows `ids`: load the missing ones now; none is evicted until unpinned.

        Pins are counted: each occurrence of an id pins it once more, and
        takes one :meth:`unpin` to undo. Loading for a pin is not an access
        (no time, no hit or miss). Raises CapacityError, changing nothing, if
        the pinned rows would exceed the capacity.
        """
        self._check_open()
        ids = self._ids(ids)
        if ids.size == 0:
            return
        rows = np.unique(ids)
        self._check_room(rows, "pin")
        pinned = frozenset(rows.tolist()).union(self._pins)
        self._admit([r for r in rows.tolist() if r not in self._slot], pinned)
        for row in ids.tolist():
            self._pins[row] = self._pins.get(row, 0) + 1

    def unpin(self, ids: object) -> None:
        """Undo one :meth:`pin` per occurrence of each id; raises ValueError, changing nothing, for a row
        not pinned that many times."""
        self._check_open()
        ids = self._ids(ids)
        rows, counts = np.unique(ids, return_counts=True)
        asked = dict(zip(rows.tolist(), counts.tolist(), strict=True))
        for row, c in asked.items():
            have = self._pins.get(row, 0)
            if c > have:
                if have == 0:
                    raise ValueError(f"unpin: row {row} is not pinned")
                raise ValueError(f"unpin: row {row} is pinned {have} time(s), cannot unpin it {c} times")
        for row, c in asked.items():
            left = self._pins[row] - c
            if left:
                self._pins[row] = left
            else:
                del self._pins[row]

    @contextmanager
    def pinned(self, ids: object) -> Iterator["TieredEmbeddingStore"]:
        """``with store.pinned(ids):`` the rows stay in the fast tier for the block."""
        ids = self._ids(ids)
        self.pin(ids)
        try:
            yield self
        finally:
            self.unpin(ids)

    def prefetch(self, ids: object) -> int:
        """Bring the rows `ids` into the fast tier ahead of use; how many were brought in.

        Rows already held are skipped; neither pinned rows nor rows of `ids`
        are evicted for it, and rows that do not fit then are left out (in
        the order of `ids`). Not an access: the policy gets
        ``insert(row, t, prefetched=True)``, the counters ``prefetched``.
        """
        self._check_open()
        ids = self._ids(ids)
        if ids.size == 0:
            return 0
        _, first = np.unique(ids, return_index=True)
        rows = ids[np.sort(first)].tolist()
        protect = frozenset(rows).union(self._pins)
        want = [r for r in rows if r not in self._slot]
        # Slots neither pinned nor holding a row of `ids` (pinned rows are always held).
        room = self._capacity - (len(protect) - len(want))
        want = want[:max(room, 0)]
        self._admit(want, protect)
        self._pf_unused.update(want)
        self.prefetched += len(want)
        return len(want)

    # -- the slow tier ----------------------------------------------------------

    def flush(self) -> None:
        """Write every dirty row to the file (counted in ``writebacks``) and flush the file."""
        mm = self._check_open()
        dirty = np.flatnonzero(self._dirty)
        if dirty.size:
            rows = self._row_of[dirty]
            order = np.argsort(rows, kind="stable")
            mm[rows[order]] = self._fast[dirty[order]]
            self._dirty[dirty] = False
            self.writebacks += int(dirty.size)
        if self._mode != "r":
            mm.flush()

    def close(self) -> None:
        """Flush and release the file; later calls other than close raise. Closing twice is fine."""
        if self._mm is None:
            return
        try:
            self.flush()
        finally:
            self._mm = None  # drops the mapping once nothing else refers to it

    def __enter__(self) -> "TieredEmbeddingStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def to_array(self) -> np.ndarray:
        """The whole table as a new array: the file with the dirty fast-tier rows laid over it."""
        mm = self._check_open()
        out = np.array(mm)
        dirty = np.flatnonzero(self._dirty)
        out[self._row_of[dirty]] = self._fast[dirty]
        return out

    # -- counters ---------------------------------------------------------------

    def stats(self) -> dict:
        """The counters, plus ``hit_rate`` (hits over hits and misses; 0.0 before any access)."""
        out = {k: int(getattr(self, k)) for k in _STATS}
        served = out["hits"] + out["misses"]
        out["hit_rate"] = out["hits"] / served if served else 0.0
        return out

    def reset_stats(self) -> None:
        """Zero the counters. Rows prefetched before no longer count as prefetched (so
        ``prefetch_used <= prefetched`` holds); the time and the policy's state are kept."""
        for k in _STATS:
            setattr(self, k, 0)
        self._pf_unused.clear()
