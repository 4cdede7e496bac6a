"""The online guard of the learned policy: shadow caches that measure who is ahead.

A shadow cache is a replacement policy serving the access stream alone, on
fast-tier contents of its own (no data, only the rows it would hold), at the
fast tier's capacity. Its hits and evictions depend only on the ids looked
up, never on the real fast tier, so shadows run a batch ahead like the
model's features. For each batch a shadow records, per lookup, whether it
hit and which row it evicted.

:class:`Guard` compares the shadows' hit rates step by step (a step is a
stretch of consecutive lookups, within a batch or across batches), in a
decayed mean of clipped differences, and names the leader. The current
leader stays unless another shadow is ahead of it by more than `margin`:
every change of leader costs misses while the real fast tier converges to
the new leader's contents, so close rivals must not take turns. Only
lookups already served count: the leader of a step is chosen from the steps
before it.

The real fast tier follows the leader (see :mod:`.learned`): on a miss it
evicts a row the leader's shadow does not hold (or a row that came in
during a sequential scan: :mod:`.scan_filter`). Once its contents equal the
leader's they stay equal, so the real tier's hits are then the leader's
exactly; after a change of leader they converge as misses replace the rows
the new leader does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from .native import NativeShadow
from .policies import LRUPolicy, Policy


def add_step(ahead: np.ndarray, weight: float, rate: np.ndarray, n: int, half_life: float, clip: float) -> float:
    """Add a step of `n` lookups whose hit rates per shadow are `rate` to the decayed comparison:
    `ahead[a, b]` (changed in place) is the decayed sum of clip(rate_a - rate_b); returns the new
    sum of the weights. Older steps lose weight by the step's length; this one weighs as of its
    middle."""
    fade = 0.5 ** (n / half_life)
    w = 0.5 ** (n / (2.0 * half_life))
    ahead *= fade
    ahead += w * np.clip(rate[:, None] - rate[None, :], -clip, clip)
    return weight * fade + w


def next_leader(ahead: np.ndarray, weight: float, current: int, preferred: int, margin: float) -> int:
    """The leader after `current`: the shadow furthest ahead of it (on a tie `preferred`) once its
    decayed mean lead exceeds `margin`, else `current`."""
    if weight <= 0:
        return current
    lead = ahead[:, current] / weight
    top = int(np.argmax(lead))
    if lead[top] == lead[preferred]:
        top = preferred
    return top if lead[top] > margin else current


def best_rival(ahead: np.ndarray, preferred: int) -> int:
    """The shadow furthest ahead of `preferred` among the others (the first on a tie)."""
    return max((i for i in range(ahead.shape[0]) if i != preferred), key=lambda i: (float(ahead[i, preferred]), -i))


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

    def held_before(self, rows: list[int], ids: np.ndarray, batch: ShadowBatch, at: int = 0,
                    later: Sequence[tuple[np.ndarray, ShadowBatch]] = ()) -> list[bool]:
        """Whether the shadow held each of `rows` before lookup `at` of `batch`. It has served the
        rest of the batch since, and then the batches `later` ((ids, what it did) in order)."""
        # A row's first event from `at` on says where it was before: entered -> out, evicted -> in.
        first: dict[int, bool] = {}
        for seg_ids, seg, start in [(ids, batch, at)] + [(i, b, 0) for i, b in later]:
            entered = np.flatnonzero(~seg.hits[start:]) + start
            ev = np.flatnonzero(seg.evicted[start:] >= 0) + start
            events = sorted([(int(k), int(seg_ids[k]), False) for k in entered] +
                            [(int(k), int(seg.evicted[k]), True) for k in ev], key=lambda e: (e[0], e[2]))
            for _, row, was_in in events:
                first.setdefault(row, was_in)
        holds = self.holds
        return [first[r] if r in first else holds(r) for r in rows]


class Guard:
    """Shadows of several policies, who is ahead of whom, and the leader (see the module docstring).

    `shadows`: the shadow caches by name; `preferred`: the name that leads
    on a tie; `half_life`: the lookups after which a step's weight halves
    (at least one); `margin`: the share of lookups by which a rival's
    decayed lead must exceed the leader's to take over; `clip`: the most
    one step's difference in hit rate between two shadows counts.

    Hits are compared step by step (a step is what :meth:`record` is given,
    or what :meth:`add` is given until :meth:`close`: lookups of one batch or
    of several in a row). For every pair of shadows the guard keeps the
    exponentially decayed mean of their difference in hit rate per step,
    each difference clipped to +-`clip`: one step in which a scan or a burst
    favours one policy by tens of points then moves the lead no more than a
    few ordinary steps would, while a policy that falls behind step after
    step (a popularity that moved under it) loses the lead within a few
    steps.

    `slow`: each time the preferred shadow takes the lead, the guard counts
    its hits less those of the shadow it took over from, over the steps it
    leads (a stint); `stints` is the sum of these balances, decayed with a
    half-life `slow` x `half_life`. While it is negative, the preferred shadow
    takes the lead only if it also leads by the margin in a second
    comparison whose half-life is `slow` x `half_life` (None: no such check).

    `led` counts the lookups served under each leader; `changes` lists the
    stretches served, as (first lookup, leader) pairs in order.
    """

    def __init__(self, shadows: dict[str, Shadow], preferred: str, half_life: float = 8192,
                 margin: float = 0.0025, clip: float = 0.05, slow: Optional[float] = 4.0) -> None:
        if preferred not in shadows:
            raise ValueError(f"preferred={preferred!r} is not one of the shadows {sorted(shadows)}")
        if not half_life >= 1:
            raise ValueError(f"half_life must be at least 1 lookup, got {half_life}")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be a share of the lookups in [0, 1), got {margin}")
        if not 0.0 < clip <= 1.0:
            raise ValueError(f"clip must be a share of a step's lookups in (0, 1], got {clip}")
        if slow is not None and not slow >= 1:
            raise ValueError(f"slow must be a factor of half_life of at least 1, or None, got {slow}")
        self.shadows = shadows
        self.preferred = preferred
        self.half_life = float(half_life)
        self.margin = float(margin)
        self.clip = float(clip)
        self.slow = float(slow) if slow is not None else None
        self.names = list(shadows)
        # Set to a list to keep (t0, lookups, hits per shadow in `names` order, leader) of every
        # recorded step: what an offline replay of other leader rules needs.
        self.trail: Optional[list[tuple[int, int, np.ndarray, str]]] = None
        self._forget()

    def _forget(self) -> None:
        """Back to no step recorded, the preferred shadow leading."""
        k = len(self.names)
        # _ahead[a, b]: decayed sum of clip(rate_a - rate_b) over the steps; _weight: the sum of the weights.
        self._ahead = np.zeros((k, k))
        self._weight = 0.0
        # The same with a half-life `slow` times longer; the preferred shadow's stints as leader: the
        # decayed sum of their balances and the one going on ([rival it took over from, balance]).
        self._ahead_slow = np.zeros((k, k))
        self._weight_slow = 0.0
        self.stints = 0.0
        self._stint: Optional[list] = None
        self._open: Optional[tuple[int, int, np.ndarray]] = None  # (t0, lookups, hits per shadow) of the open step
        self.leader = self.preferred
        self.led = {name: 0 for name in self.names}  # lookups served under each leader
        self.changes: list[tuple[int, str]] = []      # (first lookup, leader) of each stretch served
        if self.trail is not None:
            self.trail = []

    def reset(self, capacity: int) -> None:
        for s in self.shadows.values():
            s.reset(capacity)
        self._forget()

    def run(self, ids: np.ndarray, t0: int, only: Optional[Callable[[str], bool]] = None) -> dict[str, ShadowBatch]:
        """Every shadow (or those `only` accepts) serves the batch."""
        return {name: s.run(ids, t0) for name, s in self.shadows.items() if only is None or only(name)}

    def leads(self) -> dict[str, float]:
        """Each shadow's decayed, clipped lead in hit rate over the current leader (0 before any step)."""
        col = self._ahead[:, self.names.index(self.leader)]
        scale = 1.0 / self._weight if self._weight > 0 else 0.0
        return {name: float(v * scale) for name, v in zip(self.names, col, strict=True)}

    def choose(self) -> str:
        """The leader for the next step, from the steps recorded so far."""
        cur, pref = self.names.index(self.leader), self.names.index(self.preferred)
        top = next_leader(self._ahead, self._weight, cur, pref, self.margin)
        if top == pref != cur:
            slow_lead = self._ahead_slow[pref, cur] / self._weight_slow if self._weight_slow > 0 else 0.0
            if self.stints < 0 and slow_lead <= self.margin:
                top = cur  # its stints lost hits: it must lead in the slow comparison as well
            else:
                self._stint = [cur, 0.0]
        elif cur == pref != top and self._stint is not None:
            self.stints += self._stint[1]
            self._stint = None
        self.leader = self.names[top]
        return self.leader

    @property
    def open_lookups(self) -> int:
        """The lookups added to the step not closed yet (0: none open)."""
        return self._open[1] if self._open is not None else 0

    def add(self, batches: dict[str, ShadowBatch], served_by: str, start: int = 0,
            stop: Optional[int] = None) -> None:
        """Add lookups [start, stop) of the shadows' batches (default: all of it), served by
        `served_by`, to the step being recorded; :meth:`close` ends the step. A step can span
        batches."""
        first = next(iter(batches.values()))
        stop = len(first.hits) if stop is None else stop
        n = stop - start
        if n <= 0:
            return
        t0 = int(first.t0) + start
        if not self.changes or self.changes[-1][1] != served_by:
            self.changes.append((t0, served_by))
        counts = np.array([int(np.count_nonzero(batches[name].hits[start:stop])) for name in self.names],
                          dtype=np.int64)
        if self._open is None:
            self._open = (t0, n, counts)
        else:
            self._open = (self._open[0], self._open[1] + n, self._open[2] + counts)
        self.led[served_by] = self.led.get(served_by, 0) + n

    def close(self) -> None:
        """End the step being recorded: it enters the decayed comparison (nothing if none is open)."""
        if self._open is None:
            return
        t0, n, counts = self._open
        self._open = None
        if self.trail is not None:
            self.trail.append((t0, n, counts, self.changes[-1][1]))  # counts is never changed in place
        self._weight = add_step(self._ahead, self._weight, counts / n, n, self.half_life, self.clip)
        if self.slow is not None:
            slow = self.half_life * self.slow
            self._weight_slow = add_step(self._ahead_slow, self._weight_slow, counts / n, n, slow, self.clip)
            self.stints *= 0.5 ** (n / slow)
            if self._stint is not None:
                self._stint[1] += float(counts[self.names.index(self.preferred)] - counts[self._stint[0]])

    def record(self, batches: dict[str, ShadowBatch], served_by: str, start: int = 0,
               stop: Optional[int] = None) -> None:
        """Record the step of lookups [start, stop) of the shadows' batches (default: all of it),
        served by `served_by`: :meth:`add` then :meth:`close` (a step left open is closed first)."""
        self.close()
        self.add(batches, served_by, start, stop)
        self.close()

    def hand_lead_to_best_rival(self) -> None:
        """If the preferred shadow leads, the shadow furthest ahead of it among the others leads instead
        (the preferred one's record so far did not come from what it is now)."""
        if self.leader != self.preferred or len(self.names) < 2:
            return
        self._stint = None  # the stint going on measured that record, not the preferred one now
        self.leader = self.names[best_rival(self._ahead, self.names.index(self.preferred))]
