"""The online guard of the learned policy: shadow caches that measure who is ahead.

A shadow cache is a replacement policy serving the access stream alone, on
fast-tier contents of its own (no data, only the rows it would hold), at the
fast tier's capacity. Its hits and evictions depend only on the ids looked
up, never on the real fast tier, so shadows run a batch ahead like the
model's features. For each batch a shadow records, per lookup, whether it
hit and which row it evicted.

:class:`Guard` keeps the hit counts of each shadow over a sliding window of
recent batches and names the leader. The current leader stays unless
another shadow had more hits over the window by more than `margin` of the
window's lookups (then the one with the most hits leads; on a tie, the
preferred one, the learned order): every change of leader costs misses while
the real fast tier converges to the new leader's contents, so close rivals
must not take turns. Only lookups already served count: the leader of batch
i is chosen from batches before it.

The real fast tier follows the leader (see :mod:`.learned`): on a miss it
evicts a row the leader's shadow does not hold. Once its contents equal the
leader's they stay equal, so the real tier's hits are then the leader's
exactly; after a change of leader they converge as misses replace the rows
the new leader does not hold.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .native import NativeShadow
from .policies import LRUPolicy, Policy


@dataclass
class ShadowBatch:
    """What a shadow did on one batch: per lookup, a hit or not, and the row evicted (-1: none)."""

    t0: int
    hits: np.ndarray
    evicted: np.ndarray


class Shadow:
    """One policy serving the stream on contents of its own (see the module docstring).

    `native`: serve through the policy's C engine (:mod:`.native`,
    the same hits and evictions at a fraction of the cost) when the policy
    has one (None, the default), always (True: a ValueError names the policy
    when it has none) or never (False: the Python replay). With the C engine
    the policy object only supplies the parameters; the contents live in C.
    `rows`: the table's rows, when known (ids are below it; the C engine
    then indexes rows by arrays, see :class:`~.native.NativeShadow`).
    """

    def __init__(self, name: str, policy: Policy, native: Optional[bool] = None,
                 rows: Optional[int] = None) -> None:
        self.name = name
        self.policy = policy
        self.capacity = 0
        self.native = native
        self.rows = rows
        self._engine: Optional[NativeShadow] = None

    @property
    def engine(self) -> str:
        """"c" when the C engine serves, else "python"."""
        return "c" if self._engine is not None else "python"

    def reset(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.policy.reset(capacity)
        self._engine = None
        if self.native is not False:
            config = self.policy.native_config()
            if config is not None:
                self._engine = NativeShadow(config, self.capacity, self.rows)
            elif self.native:
                raise ValueError(f"shadow {self.name!r}: policy {type(self.policy).__name__} has no C engine; "
                                 "pass native=None or False to replay it in Python")

    def run(self, ids: np.ndarray, t0: int) -> ShadowBatch:
        """Serve the batch `ids` (times t0, t0+1, ...): demand fetching, the policy's victims evicted."""
        if self._engine is not None:
            offsets = self.policy.offsets(t0, len(ids)) if self._engine.kind == "priority" else None
            hits, evicted = self._engine.run(ids, t0, offsets)
            return ShadowBatch(t0, hits, evicted)
        pol, cap = self.policy, self.capacity
        pol.observe(ids, t0)
        n = len(ids)
        hits = np.zeros(n, dtype=bool)
        evicted = np.full(n, -1, dtype=np.int64)
        if isinstance(pol, LRUPolicy):
            # The same steps as below, on LRU's ordered dict directly (the most frequent shadow, made cheap).
            order = pol._order
            for k, row in enumerate(ids.tolist()):
                if row in order:
                    order.move_to_end(row)
                    hits[k] = True
                else:
                    if len(order) >= cap:
                        evicted[k] = order.popitem(last=False)[0]
                    order[row] = None
            return ShadowBatch(t0, hits, evicted)
        contains, hit, insert, victim, remove = pol.__contains__, pol.hit, pol.insert, pol.victim, pol.remove
        for k, row in enumerate(ids.tolist()):
            t = t0 + k
            if contains(row):
                hit(row, t)
                hits[k] = True
            else:
                if len(pol) >= cap:
                    v = victim(t)
                    remove(v)
                    evicted[k] = v
                insert(row, t)
        return ShadowBatch(t0, hits, evicted)

    def holds(self, row: int) -> bool:
        """Whether the shadow holds `row` now."""
        return self._engine.holds(row) if self._engine is not None else row in self.policy

    def held_at_start(self, rows: list[int], ids: np.ndarray, batch: ShadowBatch) -> list[bool]:
        """Whether the shadow held each of `rows` before `batch` (it has served the batch since)."""
        # A row's first event in the batch says where it was before: entered -> out, evicted -> in.
        entered = np.flatnonzero(~batch.hits)
        ev = np.flatnonzero(batch.evicted >= 0)
        first: dict[int, bool] = {}
        events = sorted([(int(k), int(ids[k]), False) for k in entered] +
                        [(int(k), int(batch.evicted[k]), True) for k in ev], key=lambda e: (e[0], e[2]))
        for _, row, was_in in events:
            first.setdefault(row, was_in)
        holds = self.holds
        return [first[r] if r in first else holds(r) for r in rows]


class Guard:
    """Shadows of several policies, their hits over a window, and the leader (see the module docstring).

    `shadows`: the shadow caches by name; `preferred`: the name that leads
    on a tie; `window`: the window's length in lookups (whole batches, at
    least one); `margin`: the share of the window's lookups by which a
    rival's hits must exceed the leader's to take over.

    `led` counts the lookups served under each leader; `changes` lists the
    stretches served, as (first lookup, leader) pairs in order.
    """

    def __init__(self, shadows: dict[str, Shadow], preferred: str, window: int = 65536,
                 margin: float = 0.005) -> None:
        if preferred not in shadows:
            raise ValueError(f"preferred={preferred!r} is not one of the shadows {sorted(shadows)}")
        if window < 1:
            raise ValueError(f"window must be at least 1 lookup, got {window}")
        self.shadows = shadows
        self.preferred = preferred
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be a share of the window's lookups in [0, 1), got {margin}")
        self.window = int(window)
        self.margin = float(margin)
        self.names = list(shadows)
        self._recent: deque = deque()  # (lookups, hits per shadow) of the batches in the window
        self._in_window = 0
        self._sums = np.zeros(len(self.names), dtype=np.int64)
        self.leader = preferred
        self.led = {name: 0 for name in self.names}  # lookups served under each leader
        self.changes: list[tuple[int, str]] = []      # (first lookup, leader) of each stretch served
        # Set to a list to keep (t0, lookups, hits per shadow in `names` order, leader) of every
        # recorded batch: what an offline replay of other leader rules needs.
        self.trail: Optional[list[tuple[int, int, np.ndarray, str]]] = None

    def reset(self, capacity: int) -> None:
        for s in self.shadows.values():
            s.reset(capacity)
        self._recent.clear()
        self._in_window = 0
        self._sums[:] = 0
        self.leader = self.preferred
        self.led = {name: 0 for name in self.names}
        self.changes = []
        if self.trail is not None:
            self.trail = []

    def run(self, ids: np.ndarray, t0: int, only: Optional[Callable[[str], bool]] = None) -> dict[str, ShadowBatch]:
        """Every shadow (or those `only` accepts) serves the batch."""
        return {name: s.run(ids, t0) for name, s in self.shadows.items() if only is None or only(name)}

    def choose(self) -> str:
        """The leader for the next batch, from the batches recorded so far."""
        sums = self._sums
        pref = self.names.index(self.preferred)
        top = int(np.argmax(sums))
        if sums[top] == sums[pref]:
            top = pref
        current = self.names.index(self.leader)
        if sums[top] - sums[current] > self.margin * self._in_window:
            self.leader = self.names[top]
        return self.leader

    def record(self, batches: dict[str, ShadowBatch], served_by: str) -> None:
        """Add a served batch's hits to the window (dropping the oldest batches beyond it)."""
        first = next(iter(batches.values()))
        n = len(first.hits)
        if not self.changes or self.changes[-1][1] != served_by:
            self.changes.append((int(first.t0), served_by))
        counts = np.array([int(batches[name].hits.sum()) for name in self.names], dtype=np.int64)
        if self.trail is not None:
            self.trail.append((int(first.t0), n, counts, served_by))  # counts is never changed in place
        self._recent.append((n, counts))
        self._in_window += n
        self._sums += counts
        while self._in_window - self._recent[0][0] >= self.window:
            old_n, old_counts = self._recent.popleft()
            self._in_window -= old_n
            self._sums -= old_counts
        self.led[served_by] = self.led.get(served_by, 0) + n

    def hand_lead_to_best_rival(self) -> None:
        """If the preferred shadow leads, the shadow with the most hits over the window among the
        others leads instead (the preferred one's record so far did not come from what it is now)."""
        if self.leader != self.preferred or len(self.names) < 2:
            return
        rivals = [i for i, name in enumerate(self.names) if name != self.preferred]
        self.leader = self.names[max(rivals, key=lambda i: (int(self._sums[i]), -i))]

    def window_hits(self) -> dict[str, int]:
        """Hits of each shadow over the window."""
        return {name: int(h) for name, h in zip(self.names, self._sums, strict=True)}
