"""Replacement policies of the fast tier, behind one interface.

A policy tracks which rows the fast tier holds and names the row to evict
when a slot is needed; it never stores row data (the store and the
simulator do). Times are lookup positions in the trace (0, 1, 2, ...).

The interface, used by :class:`~.store.TieredEmbeddingStore` and
:func:`~pymcoll.algorithms.tiered_cache.simulate.simulate`:

* ``reset(capacity)``: forget everything, for a fast tier of `capacity` rows;
* ``hit(row, t)``: `row`, held, was looked up at time `t`;
* ``insert(row, t, prefetched=False)``: `row` entered the fast tier at `t`
  (looked up, or brought in ahead of use by a prefetcher);
* ``victim(t, pinned)``: the held row to evict next, never one in `pinned`
  (a container of rows in use); it is not removed until ``remove``;
* ``remove(row)``: `row` left the fast tier.

Policies that use the trace itself (Belady's optimum, the learned ones, and
the adaptive ones, which learn from the row being missed) also have
``observe(ids, t0)``: the lookups ``ids`` at times ``t0, t0+1, ...`` are
about to be served (a whole batch, before its first lookup).

The policies: :class:`LRUPolicy`, :class:`LFUPolicy`, Belady's optimum
:class:`OPTPolicy` (offline: the limit), and three adaptive ones that need
no future: :class:`ARCPolicy` (recency and frequency lists with a
self-tuning split), :class:`LeCaRPolicy` (LRU and LFU mixed by regret
weights) and :class:`TinyLFUPolicy` (a frequency admission filter in front
of LRU).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from typing import Container, Optional

import numpy as np

from .native import NativeShadow

_NO_PIN: frozenset = frozenset()
_NEVER = int(np.iinfo(np.int64).max)  # the next use of a row never looked up again


class Policy:
    """Base class of replacement policies (see the module docstring)."""

    name = "policy"

    def __init__(self) -> None:
        self.capacity = 0

    def reset(self, capacity: int) -> None:
        """Forget every row, for a fast tier of `capacity` rows."""
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 row, got {capacity}")
        self.capacity = int(capacity)

    def observe(self, ids: np.ndarray, t0: int) -> None:
        """The lookups `ids` at times t0, t0+1, ... come next (default: unused)."""

    def hit(self, row: int, t: int) -> None:
        raise NotImplementedError

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        raise NotImplementedError

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        raise NotImplementedError

    def victims(self, t: int, k: int, skip: Container[int] = _NO_PIN) -> list[int]:
        """The next `k` victims at time `t` in order (at most the rows held, those in `skip` passed
        over), none removed: what inserting k rows would evict."""
        pinned = set(skip) if skip is not _NO_PIN else set()
        # Rows in `skip` that are not held take no slot: only the held ones can run out.
        left = len(self) - sum(1 for row in pinned if row in self)
        out: list[int] = []
        while len(out) < min(k, left):
            out.append(self.victim(t, pinned))
            pinned.add(out[-1])
        return out

    def remove(self, row: int) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __contains__(self, row: object) -> bool:
        raise NotImplementedError

    def native_config(self) -> Optional[dict]:
        """The parameters of this policy's C shadow (:mod:`.native`) after ``reset``, or None.

        Only the classes whose decisions the C engine reproduces exactly have
        one; a subclass may change a decision, so it has none unless it says so.
        """
        return None


def _all_pinned(capacity: int) -> RuntimeError:
    return RuntimeError(f"every one of the {capacity} fast-tier rows is pinned: nothing can be evicted "
                        "(unpin rows or use a larger capacity than the rows of one batch)")


class LRUPolicy(Policy):
    """Least recently used: evict the row looked up longest ago."""

    name = "lru"

    def __init__(self) -> None:
        super().__init__()
        self._order: "OrderedDict[int, None]" = OrderedDict()

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._order.clear()

    def hit(self, row: int, t: int) -> None:
        self._order.move_to_end(row)

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        self._order[row] = None
        self._order.move_to_end(row)

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        for row in self._order:
            if row not in pinned:
                return row
        raise _all_pinned(self.capacity)

    def remove(self, row: int) -> None:
        del self._order[row]

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, row: object) -> bool:
        return row in self._order

    def native_config(self) -> Optional[dict]:
        return {"kind": "lru"} if type(self) is LRUPolicy else None


class _HeapPolicy(Policy):
    """Evict the held row of smallest key; keys live in a heap with lazy deletion.

    A row's current key is in ``_key``; heap entries whose key is stale, or
    whose row left, are dropped when they reach the top.
    """

    def __init__(self) -> None:
        super().__init__()
        self._key: dict[int, tuple] = {}
        self._heap: list[tuple] = []
        # Entries of pinned rows taken off the heap by victim(), and the frozenset of pinned rows
        # they were taken off for: a store passes one such set to every victim() call of a batch,
        # so each pinned row at the top is passed over once a batch instead of once a call.
        self._parked: list[tuple] = []
        self._parked_for: Optional[frozenset] = None

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._key.clear()
        self._heap.clear()
        self._parked.clear()
        self._parked_for = None

    def _unpark(self) -> None:
        """Put the parked entries back on the heap."""
        for entry in self._parked:
            heapq.heappush(self._heap, entry)
        self._parked.clear()
        self._parked_for = None

    def _set(self, row: int, key: tuple) -> None:
        self._key[row] = key
        heapq.heappush(self._heap, key + (row,))
        # Stale entries pile up on rows hit often; rebuild when they dominate.
        if len(self._heap) > 4 * len(self._key) + 64:
            self._heap = [k + (r,) for r, k in self._key.items()]
            heapq.heapify(self._heap)
            self._parked.clear()  # every current entry is on the heap again
            self._parked_for = None

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        if self._parked_for is not pinned:
            self._unpark()
        # Only an immutable set of pinned rows may keep its rows parked from one call to the next.
        park = isinstance(pinned, frozenset)
        heap, keys = self._heap, self._key
        skipped = self._parked if park else []
        found: Optional[int] = None
        while heap:
            entry = heap[0]
            row = entry[-1]
            if keys.get(row) != entry[:-1]:
                heapq.heappop(heap)
                continue
            if row in pinned:
                skipped.append(heapq.heappop(heap))
                continue
            found = row
            break
        if park:
            self._parked_for = pinned if skipped else None
        else:
            for entry in skipped:
                heapq.heappush(heap, entry)
        if found is None:
            raise _all_pinned(self.capacity)
        return found

    def victims(self, t: int, k: int, skip: Container[int] = _NO_PIN) -> list[int]:
        # One pass down the heap (victim() with a growing pin set would pop the same entries k times).
        self._unpark()
        heap, keys = self._heap, self._key
        taken, out, chosen = [], [], set()
        while heap and len(out) < k:
            entry = heapq.heappop(heap)
            row = entry[-1]
            if keys.get(row) != entry[:-1]:
                continue  # stale, dropped as victim() drops it
            taken.append(entry)
            if row not in skip and row not in chosen:
                chosen.add(row)
                out.append(row)
        for entry in taken:
            heapq.heappush(heap, entry)
        return out

    def remove(self, row: int) -> None:
        del self._key[row]

    def __len__(self) -> int:
        return len(self._key)

    def __contains__(self, row: object) -> bool:
        return row in self._key


class LFUPolicy(_HeapPolicy):
    """Least frequently used, counting every lookup of a row since reset (held or not).

    Ties go to the row looked up longest ago. Counts outlive evictions, as in
    an embedding cache that keeps access statistics for the whole table.
    """

    name = "lfu"

    def __init__(self) -> None:
        super().__init__()
        self._count: dict[int, int] = {}

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._count.clear()

    def _touch(self, row: int, t: int) -> None:
        c = self._count.get(row, 0) + 1
        self._count[row] = c
        self._set(row, (c, t))

    def hit(self, row: int, t: int) -> None:
        self._touch(row, t)

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        if prefetched:
            # Brought in ahead of use: not a lookup, so no count; evicted first among its count.
            self._set(row, (self._count.get(row, 0), -1))
        else:
            self._touch(row, t)

    def native_config(self) -> Optional[dict]:
        return {"kind": "lfu"} if type(self) is LFUPolicy else None


class _IncomingRow:
    """Mixin: remembers the observed lookups, so that ``victim(t)`` knows the row looked up at `t`.

    Adaptive policies (ARC, LeCaR) learn from a miss before choosing its
    victim; the interface names the missing row only after (``insert``), but
    the batch announced by ``observe`` says which row lookup `t` is for.
    """

    def observe(self, ids: np.ndarray, t0: int) -> None:
        self._seen_ids = np.asarray(ids)
        self._seen_t0 = int(t0)

    def _incoming(self, t: int) -> Optional[int]:
        ids = getattr(self, "_seen_ids", None)
        if ids is None:
            return None
        i = t - self._seen_t0
        return int(ids[i]) if 0 <= i < ids.size else None


def _first_unpinned(order: "OrderedDict[int, None]", pinned: Container[int]) -> Optional[int]:
    for row in order:
        if row not in pinned:
            return row
    return None


class ARCPolicy(_IncomingRow, Policy):
    """Adaptive Replacement Cache: recency and frequency lists with a self-tuning split.

    Held rows are in T1 (looked up once since they entered) or T2 (looked up
    again); B1 and B2 remember, without data, the rows last evicted from
    each (together at most twice the capacity). A miss on a row in B1 means
    T1 was too small: the target size ``p`` of T1 grows (by
    ``max(1, |B2| / |B1|)``); a miss on a row in B2 shrinks it likewise. The
    victim is T1's least recently used row while T1 is larger than ``p``
    (or equal to it and the missing row is in B2), else T2's. This is the
    published algorithm (Megiddo and Modha, 2003) behind the fast tier's
    interface: the row being missed is known from ``observe``; without it
    the miss counts as one on a row in no list. Pinned rows are skipped
    (then the other list is used).
    """

    name = "arc"

    def __init__(self) -> None:
        super().__init__()
        self.t1: "OrderedDict[int, None]" = OrderedDict()
        self.t2: "OrderedDict[int, None]" = OrderedDict()
        self.b1: "OrderedDict[int, None]" = OrderedDict()
        self.b2: "OrderedDict[int, None]" = OrderedDict()
        self.p = 0.0
        self._adapted_at = -1
        self._plan: Optional[tuple] = None  # (victim, ghost list or None, time)

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        for d in (self.t1, self.t2, self.b1, self.b2):
            d.clear()
        self.p = 0.0
        self._adapted_at = -1
        self._plan = None
        self._seen_ids = None

    def _adapt(self, row: int, t: int) -> None:
        """Move the target size of T1 after a miss on a remembered row (once per lookup)."""
        if self._adapted_at == t:
            return
        self._adapted_at = t
        if row in self.b1:
            self.p = min(float(self.capacity), self.p + max(1.0, len(self.b2) / len(self.b1)))
        elif row in self.b2:
            self.p = max(0.0, self.p - max(1.0, len(self.b1) / len(self.b2)))

    def hit(self, row: int, t: int) -> None:
        if row in self.t1:
            del self.t1[row]
        else:
            del self.t2[row]
        self.t2[row] = None

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        x = self._incoming(t)
        in_b1 = x is not None and x in self.b1
        in_b2 = x is not None and x in self.b2
        if in_b1 or in_b2:
            self._adapt(x, t)  # type: ignore[arg-type]
        elif len(self.t1) + len(self.b1) >= self.capacity and len(self.t1) >= self.capacity:
            # T1 fills the whole directory share: its oldest row leaves without a ghost.
            row = _first_unpinned(self.t1, pinned)
            if row is not None:
                self._plan = (row, None, t)
                return row
        n1 = len(self.t1)
        first, second = ((self.t1, self.b1), (self.t2, self.b2))
        if not (n1 >= 1 and (n1 > self.p or (in_b2 and n1 == self.p))):
            first, second = second, first
        for held, ghost in (first, second):
            row = _first_unpinned(held, pinned)
            if row is not None:
                self._plan = (row, ghost, t)
                return row
        raise _all_pinned(self.capacity)

    def remove(self, row: int) -> None:
        if row in self.t1:
            del self.t1[row]
        else:
            del self.t2[row]
        plan, self._plan = self._plan, None
        if plan is not None and plan[0] == row and plan[1] is not None:
            plan[1][row] = None

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        if not prefetched and (row in self.b1 or row in self.b2):
            self._adapt(row, t)
            (self.b1 if row in self.b1 else self.b2).pop(row)
            self.t2[row] = None
            return
        self.b1.pop(row, None)
        self.b2.pop(row, None)
        # Keep the directory within bounds: T1 + B1 <= c and all four lists <= 2c.
        if len(self.t1) + len(self.b1) >= self.capacity:
            if self.b1:
                self.b1.popitem(last=False)
        elif len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) >= 2 * self.capacity and self.b2:
            self.b2.popitem(last=False)
        self.t1[row] = None

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def __contains__(self, row: object) -> bool:
        return row in self.t1 or row in self.t2

    def native_config(self) -> Optional[dict]:
        return {"kind": "arc"} if type(self) is ARCPolicy else None


class LeCaRPolicy(_IncomingRow, Policy):
    """LRU and LFU mixed by regret: each eviction follows one of them, chosen with learned weights.

    Both experts order the same held rows (LRU by last lookup, LFU by the
    lookup counts of :class:`LFUPolicy`). At a miss the victim is LRU's with
    probability ``w_lru``, else LFU's, and the evicted row goes into that
    expert's history (at most `capacity` rows each, oldest dropped). A miss
    on a row in an expert's history means that expert's eviction was a
    mistake: its weight is multiplied by ``exp(-learning_rate * d ** age)``,
    ``age`` the lookups since the eviction and ``d = 0.005 ** (1 / capacity)``
    (a mistake noticed late counts less), and the weights are renormalized.
    This is LeCaR (Vietri et al., 2018) with its published constants;
    `seed` fixes the random choices.
    """

    name = "lecar"

    def __init__(self, learning_rate: float = 0.45, seed: int = 0) -> None:
        super().__init__()
        if learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
        self.learning_rate = float(learning_rate)
        self.seed = seed
        self.lru = LRUPolicy()
        self.lfu = LFUPolicy()
        self.w_lru = 0.5
        self.history: dict[str, "OrderedDict[int, int]"] = {"lru": OrderedDict(), "lfu": OrderedDict()}
        self._rng = random.Random(seed)
        self._learned_at = -1
        self._plan: Optional[tuple[int, str, int]] = None
        self._discount = 1.0

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self.lru.reset(capacity)
        self.lfu.reset(capacity)
        self.w_lru = 0.5
        for h in self.history.values():
            h.clear()
        self._rng = random.Random(self.seed)
        self._learned_at = -1
        self._plan = None
        self._seen_ids = None
        self._discount = 0.005 ** (1.0 / self.capacity)

    def _learn(self, row: int, t: int) -> None:
        """Penalize the expert whose eviction of `row` is now a miss (once per lookup)."""
        if self._learned_at == t:
            return
        self._learned_at = t
        for name, h in self.history.items():
            evicted = h.pop(row, None)
            if evicted is None:
                continue
            w_lru, w_lfu = self.w_lru, 1.0 - self.w_lru
            penalty = math.exp(-self.learning_rate * self._discount ** (t - evicted))
            if name == "lru":
                w_lru *= penalty
            else:
                w_lfu *= penalty
            self.w_lru = w_lru / (w_lru + w_lfu)

    def hit(self, row: int, t: int) -> None:
        self.lru.hit(row, t)
        self.lfu.hit(row, t)

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        x = self._incoming(t)
        if x is not None:
            self._learn(x, t)
        expert = "lru" if self._rng.random() < self.w_lru else "lfu"
        row = (self.lru if expert == "lru" else self.lfu).victim(t, pinned)
        self._plan = (row, expert, t)
        return row

    def remove(self, row: int) -> None:
        self.lru.remove(row)
        self.lfu.remove(row)
        plan, self._plan = self._plan, None
        if plan is not None and plan[0] == row:
            h = self.history[plan[1]]
            h[row] = plan[2]
            if len(h) > self.capacity:
                h.popitem(last=False)

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        if not prefetched:
            self._learn(row, t)
        for h in self.history.values():
            h.pop(row, None)
        self.lru.insert(row, t, prefetched)
        self.lfu.insert(row, t, prefetched)

    def __len__(self) -> int:
        return len(self.lru)

    def __contains__(self, row: object) -> bool:
        return row in self.lru

    def native_config(self) -> Optional[dict]:
        from .native import seed_words  # the C engine is needed only when asked for

        words = seed_words(self.seed)
        if type(self) is not LeCaRPolicy or words is None or self.capacity < 1:
            return None
        return {"kind": "lecar", "learning_rate": self.learning_rate, "discount": self._discount,
                "seed_words": words}


class TinyLFUPolicy(Policy):
    """W-TinyLFU in front of LRU: a small LRU window, then an LRU main region guarded by frequency.

    Every row looked up enters the window (`window` of the capacity, at
    least one row). When a slot is needed and the window is full, its oldest
    row is the candidate to move into the main region: it does, evicting the
    main region's least recently used row, if it was looked up more often
    (in the recent counts) than that row; otherwise the candidate itself is
    evicted. While the window is not full, the main region's oldest row goes.
    The recent counts count every lookup and are halved every `sample`
    lookups (default 10 x capacity), so popularity fades. Exact counts stand
    in for the published count-min sketch (Einziger et al., 2017), which
    approximates them in less memory; the admission rule is the same.
    """

    name = "tinylfu"

    def __init__(self, window: float = 0.01, sample: Optional[int] = None) -> None:
        super().__init__()
        if not 0.0 < window < 1.0:
            raise ValueError(f"window must be a share of the capacity in (0, 1), got {window}")
        if sample is not None and sample < 1:
            raise ValueError(f"sample must be a positive number of lookups or None, got {sample}")
        self.window_share = float(window)
        self.sample_asked = sample
        self.win: "OrderedDict[int, None]" = OrderedDict()
        self.main: "OrderedDict[int, None]" = OrderedDict()
        self.freq: dict[int, int] = {}
        self.window_rows = 1
        self.sample = 10
        self._counted = 0
        self._plan: Optional[tuple[int, Optional[int]]] = None

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self.win.clear()
        self.main.clear()
        self.freq.clear()
        self.window_rows = max(1, int(round(self.window_share * capacity)))
        self.sample = self.sample_asked if self.sample_asked is not None else 10 * capacity
        self._counted = 0
        self._plan = None

    def _count(self, row: int) -> None:
        self.freq[row] = self.freq.get(row, 0) + 1
        self._counted += 1
        if self._counted >= self.sample:
            # Ageing: halve every count, forget the zeros.
            self.freq = {r: c >> 1 for r, c in self.freq.items() if c > 1}
            self._counted = 0

    def hit(self, row: int, t: int) -> None:
        self._count(row)
        if row in self.win:
            self.win.move_to_end(row)
        else:
            self.main.move_to_end(row)

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        candidate = _first_unpinned(self.win, pinned) if len(self.win) >= self.window_rows else None
        loser = _first_unpinned(self.main, pinned)
        if candidate is not None and loser is not None:
            if self.freq.get(candidate, 0) > self.freq.get(loser, 0):
                self._plan = (loser, candidate)
                return loser
            self._plan = (candidate, None)
            return candidate
        row = loser if loser is not None else _first_unpinned(self.win, pinned)
        if row is None:
            raise _all_pinned(self.capacity)
        self._plan = (row, None)
        return row

    def remove(self, row: int) -> None:
        if row in self.win:
            del self.win[row]
        else:
            del self.main[row]
        plan, self._plan = self._plan, None
        if plan is not None and plan[0] == row and plan[1] is not None and plan[1] in self.win:
            del self.win[plan[1]]
            self.main[plan[1]] = None  # admitted: the candidate moves into the main region

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        if not prefetched:
            self._count(row)
        self.win[row] = None
        # Filling up: the window's overflow moves to the main region (no one is evicted yet).
        while len(self.win) > self.window_rows and len(self.win) + len(self.main) <= self.capacity:
            old, _ = self.win.popitem(last=False)
            self.main[old] = None

    def __len__(self) -> int:
        return len(self.win) + len(self.main)

    def __contains__(self, row: object) -> bool:
        return row in self.win or row in self.main

    def native_config(self) -> Optional[dict]:
        if type(self) is not TinyLFUPolicy or self.capacity < 1:
            return None
        return {"kind": "tinylfu", "window_rows": self.window_rows, "sample": self.sample}


def next_use(ids: np.ndarray) -> np.ndarray:
    """For each position i of `ids`, the next position holding the same id (len(ids) if none)."""
    ids = np.asarray(ids)
    n = ids.size
    out = np.full(n, n, dtype=np.int64)
    if n < 2:
        return out
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out


class OPTPolicy(_HeapPolicy):
    """Belady's optimum: evict the held row whose next lookup is farthest in the future.

    Offline: it needs the lookups ahead, given by ``observe``. The simulator
    passes the whole trace first; a store passes each batch as it comes, so
    the policy knows the future only to the end of that batch, and a held row
    with no known next lookup is re-keyed when a later batch looks it up.
    Rows with no known next lookup go first, the one looked up longest ago first.
    """

    name = "opt"

    def __init__(self) -> None:
        super().__init__()
        self._ids = np.zeros(0, dtype=np.int64)
        self._next = np.zeros(0, dtype=np.int64)
        self._t0 = 0

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._ids = np.zeros(0, dtype=np.int64)
        self._next = np.zeros(0, dtype=np.int64)
        self._t0 = 0

    def observe(self, ids: np.ndarray, t0: int) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        end = self._t0 + self._ids.size
        if self._ids.size and t0 + ids.size <= end:
            return  # already known (the simulator gives the whole trace up front)
        if self._ids.size and t0 < end:
            ids, t0 = ids[end - t0:], end  # keep only the part not yet known
        if self._ids.size and t0 != end:
            raise ValueError(f"observe() expects the lookups from time {end}, got t0={t0}")
        nxt = next_use(ids) + t0
        nxt[nxt == t0 + ids.size] = _NEVER
        # Held rows whose next lookup was unknown until now: it is in this batch.
        if self._key:
            uniq, first = np.unique(ids, return_index=True)
            for row, f in zip(uniq.tolist(), first.tolist(), strict=True):
                key = self._key.get(row)
                if key is not None and key[0] == -_NEVER:
                    self._set(row, (-(t0 + f), key[1]))
        # Only the newest batch is kept: lookups are keyed when they are served.
        self._ids, self._next, self._t0 = ids, nxt, t0

    def _key_at(self, row: int, t: int) -> tuple:
        i = t - self._t0
        if 0 <= i < self._ids.size and self._ids[i] == row:
            nxt = int(self._next[i])
        else:
            nxt = _NEVER
        # Farthest next use first: negate so the heap's smallest is the victim.
        return (-nxt, t)

    def hit(self, row: int, t: int) -> None:
        self._set(row, self._key_at(row, t))

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        self._set(row, self._key_at(row, t) if not prefetched else self._prefetch_key(row, t))

    def _prefetch_key(self, row: int, t: int) -> tuple:
        i = t - self._t0
        if 0 <= i < self._ids.size:
            later = np.flatnonzero(self._ids[i:] == row)
            if later.size:
                return (-(int(later[0]) + t), t)
        return (-_NEVER, t)


#: The classic policies by name (as the store and the simulator accept them).
CLASSIC = {"lru": LRUPolicy, "lfu": LFUPolicy, "arc": ARCPolicy, "lecar": LeCaRPolicy, "tinylfu": TinyLFUPolicy,
           "opt": OPTPolicy}

#: The classic policies that need no knowledge of the future (all of CLASSIC but Belady's optimum).
ONLINE = ("lru", "lfu", "arc", "lecar", "tinylfu")


def replay(ids: np.ndarray, capacity: int, policy: Policy) -> np.ndarray:
    """Serve `ids` from an empty fast tier of `capacity` rows under `policy`; True where a lookup hit.

    Demand fetching without bypass: every row looked up enters the fast
    tier, evicting the policy's victim when it is full. The policy is reset
    and given the whole of `ids` through ``observe`` first.
    """
    ids = np.asarray(ids, dtype=np.int64)
    policy.reset(capacity)
    policy.observe(ids, 0)
    hits = np.zeros(ids.size, dtype=bool)
    for t, row in enumerate(ids.tolist()):
        if row in policy:
            policy.hit(row, t)
            hits[t] = True
        else:
            if len(policy) >= capacity:
                policy.remove(policy.victim(t))
            policy.insert(row, t)
    return hits


def opt_next_hit(ids: np.ndarray, capacity: int) -> np.ndarray:
    """Per lookup of `ids`: does Belady's optimum, with `capacity` rows, hit the row's next lookup?

    False where the row is not looked up again within `ids`. These are the
    labels of the learned caching policy: whether keeping the row now pays.
    """
    ids = np.asarray(ids, dtype=np.int64)
    nxt = next_use(ids)
    if capacity >= 1 and ids.size and int(ids.min()) >= 0:
        # The optimum's order in C: a row looked up at t ranks -(its next use), the priority shadow's
        # t + offset with offset -(next use) - t (exact in float64 below 2^53 lookups); ties, such as
        # rows never looked up again, go oldest first, as OPTPolicy's (-next, t). The retrainings of the
        # learned policy label every window this way, so the Python heap (0.2 s per 32,768 lookups)
        # would cost more than the model itself.
        shadow = NativeShadow({"kind": "priority"}, capacity, int(ids.max()) + 1)
        offsets = -nxt.astype(np.float64) - np.arange(ids.size, dtype=np.float64)
        hits = shadow.run(ids, 0, offsets)[0].astype(bool)
    else:
        hits = replay(ids, capacity, OPTPolicy())
    has_next = nxt < ids.size
    out = np.zeros(ids.size, dtype=bool)
    out[has_next] = hits[nxt[has_next]]
    return out
