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

Policies that use the trace itself (Belady's optimum, the learned ones) also
have ``observe(ids, t0)``: the lookups ``ids`` at times ``t0, t0+1, ...``
are about to be served (a whole batch, before its first lookup).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Container, Optional

import numpy as np

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

    def remove(self, row: int) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __contains__(self, row: object) -> bool:
        raise NotImplementedError


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


class _HeapPolicy(Policy):
    """Evict the held row of smallest key; keys live in a heap with lazy deletion.

    A row's current key is in ``_key``; heap entries whose key is stale, or
    whose row left, are dropped when they reach the top.
    """

    def __init__(self) -> None:
        super().__init__()
        self._key: dict[int, tuple] = {}
        self._heap: list[tuple] = []

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._key.clear()
        self._heap.clear()

    def _set(self, row: int, key: tuple) -> None:
        self._key[row] = key
        heapq.heappush(self._heap, key + (row,))
        # Stale entries pile up on rows hit often; rebuild when they dominate.
        if len(self._heap) > 4 * len(self._key) + 64:
            self._heap = [k + (r,) for r, k in self._key.items()]
            heapq.heapify(self._heap)

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        heap, keys = self._heap, self._key
        skipped = []
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
        for entry in skipped:
            heapq.heappush(heap, entry)
        if found is None:
            raise _all_pinned(self.capacity)
        return found

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
CLASSIC = {"lru": LRUPolicy, "lfu": LFUPolicy, "opt": OPTPolicy}


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
    hits = replay(ids, capacity, OPTPolicy())
    nxt = next_use(ids)
    has_next = nxt < ids.size
    out = np.zeros(ids.size, dtype=bool)
    out[has_next] = hits[nxt[has_next]]
    return out
