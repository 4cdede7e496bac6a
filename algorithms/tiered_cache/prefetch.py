"""The learned prefetcher: rows that tend to miss together, brought in ahead of use.

Embedding rows are looked up in co-accessed groups (a user's items, a
session's queries): when one row of a group comes back after a long time,
its companions follow within a few batches and, the cache having evicted
them meanwhile, miss. The prefetcher learns these associations from a past
stretch of the trace:

* triggers are lookups after a long absence (longer than `gap` lookups, or
  a first lookup): what a cache of that size is likely to miss;
* targets are the lookups Belady's optimum, with the same capacity, still
  misses (nothing short of prefetching avoids them);
* each trigger row ``a`` counts the target rows ``b`` among the targets
  within `window` lookups after it (at most `fanout`; rows that trigger or
  miss fewer than `min_support` times are left out first, as they cannot
  make a pair). Pairs seen at least `min_support` times are scored by
  their confidence ``count(a, b) / triggers(a)`` less the chance that `b`
  misses within `window` of any lookup (frequent misses follow everything);
  each row keeps its `per_row` best companions scoring above chance;
* a prefetched row stays in the fast tier about as long as a row just
  looked up: its *reach*, the capacity over the miss rate LRU has on the
  stretch (at most `window`). A prediction is right when the row is looked
  up within the reach; a row looked up within the reach before is presumed
  in the fast tier already and not predicted;
* the score threshold is chosen out of sample: pairs learned on the first
  70% of the stretch predict the last 30%, and the threshold is the lowest
  whose predictions there are right at least `min_precision` of the time;
  no threshold reaching it means no prefetching. The table is then rebuilt
  from the whole stretch.

At run time the triggers of batch i name candidates; candidates above the
threshold, at most `budget` of them ranked by confidence, are prefetched
after batch i (the simulator computes them in a background thread while
batch i is served) and occupy fast-tier slots like any row.

The prefetcher also checks itself as it goes, and runs only while it pays.
Each prediction is scored right or wrong by the lookups that follow (within
the reach): its running precision, decayed by `decay` per batch. A prefetch
is not free: it takes the slot of a row the cache held, and when that row
is looked up within the reach the prefetch cost a hit. The simulator tells
the prefetcher which rows its prefetches evicted (:meth:`evicted`), and
these are scored the same way: the running cost, the share of those
evictions that lost a hit. A right prefetch saves one miss and every
prefetch risks the cost, so prefetching pays while the precision is above
the cost: the break-even is the running cost (at least `min_precision`).
While it is off, the rows it would have brought in are kept in
:attr:`withheld`; a simulator that can name the rows those would have
evicted reports them through :meth:`evicted` all the same, so the cost is
measured before it first turns on (a cache whose every slot holds a row
looked up again soon makes any prefetch a loss, however right).
The prefetcher is *on* only while its running precision, over at least
`min_checked` scored predictions (0: its training is trusted from the
start), is above the break-even: it starts off, scores the
predictions it would make while off, and turns on (and off again) as they
are right often enough (or not). ``on_batches`` / ``batches`` count how often it
was on (the simulator reports the share over the scored batches).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from .policies import LRUPolicy, OPTPolicy, replay


def _verdicts(pending: dict[int, int], ids: np.ndarray, t0: int) -> tuple[int, int]:
    """Score the rows of `pending` (row -> deadline) on the lookups `ids` at t0, t0+1, ...: a row
    looked up by its deadline is right, one looked up later or past its deadline unseen is wrong.
    Scored rows leave `pending`; returns (right, scored)."""
    if not pending:
        return 0, 0
    right = scored = 0
    for t, row in enumerate(ids.tolist(), start=t0):
        deadline = pending.pop(row, None)
        if deadline is not None:
            scored += 1
            right += t <= deadline
    end = t0 + ids.size
    expired = [row for row, deadline in pending.items() if deadline < end]
    for row in expired:
        del pending[row]
    return right, scored + len(expired)


class LearnedPrefetcher:
    """Association prefetcher trained on Belady's misses (see the module docstring)."""

    name = "learned-prefetch"
    gated = True  # runs only while it pays (see the module docstring)

    def __init__(self, n_rows: int, *, window: int = 8192, fanout: int = 1024, min_support: int = 2,
                 min_precision: float = 0.5, budget: Optional[int] = None, gap: Optional[int] = None,
                 per_row: int = 8, max_pairs: int = 8_000_000, decay: float = 0.98,
                 min_checked: int = 50) -> None:
        for name, value in (("window", window), ("fanout", fanout), ("min_support", min_support),
                            ("per_row", per_row)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if not 0.0 <= min_precision <= 1.0:
            raise ValueError(f"min_precision must be in [0, 1], got {min_precision}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if min_checked < 0:
            raise ValueError(f"min_checked must be non-negative, got {min_checked}")
        self.n_rows = int(n_rows)
        self.window, self.fanout, self.min_support = window, fanout, min_support
        self.min_precision = min_precision
        self.budget = budget
        self.gap = gap
        self.max_pairs = max_pairs
        self.per_row = per_row
        self.threshold = np.inf
        self.budget_used = 1
        self.model_seconds = 0.0
        self.train_seconds = 0.0
        self.predicted = 0
        self._keys = np.zeros(0, dtype=np.int64)    # trigger rows, sorted
        self._starts = np.zeros(1, dtype=np.int64)  # CSR offsets into targets/confidence
        self._targets = np.zeros(0, dtype=np.int64)
        self._conf = np.zeros(0, dtype=np.float32)
        self._last = np.full(self.n_rows, -1, dtype=np.int64)
        self._gap_used = gap if gap is not None else 0
        self.capacity = 0
        self.reach = window
        self.decay, self.min_checked = decay, min_checked
        # The running check: predictions awaiting their verdict (row -> deadline), decayed tallies.
        self._outstanding: dict[int, int] = {}
        self._right = 0.0
        self._scored = 0.0
        self.paused_batches = 0
        self.withheld = np.zeros(0, dtype=np.int64)  # what it would have prefetched after the last batch, while off
        # The evictions its prefetches caused, awaiting their verdict (row -> deadline), decayed tallies.
        self._victims: dict[int, int] = {}
        self._lost = 0.0
        self._victims_scored = 0.0
        self.on = False
        self.checked = 0  # predictions scored so far (not decayed)
        self.on_batches = 0
        self.batches = 0

    # -- learning ---------------------------------------------------------------
    def _triggers(self, ids: np.ndarray, t0: int, last: np.ndarray) -> np.ndarray:
        """Positions in `ids` that come after a long absence (updates `last`)."""
        t = np.arange(t0, t0 + ids.size, dtype=np.int64)
        prev = np.full(ids.size, -1, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        s = ids[order]
        same = np.zeros(ids.size, dtype=bool)
        same[1:] = s[1:] == s[:-1]
        p = np.where(same, np.roll(t[order], 1), last[s])
        prev[order] = p
        ends = np.append(np.flatnonzero(~same)[1:], ids.size) - 1
        last[s[ends]] = t[order][ends]
        return np.flatnonzero((prev < 0) | (t - prev > self._gap_used))

    def train(self, ids: np.ndarray, capacity: int) -> dict:
        """Learn the associations from the past lookups `ids` for a fast tier of `capacity` rows."""
        start = time.thread_time()
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size < 2:
            raise ValueError("train() needs at least two lookups")
        self.capacity = int(capacity)
        self._gap_used = self.gap if self.gap is not None else 2 * self.capacity
        self.budget_used = self.budget if self.budget is not None else max(1, self.capacity // 8)
        half = ids[ids.size // 2:]
        lru_miss = max(float(np.mean(~replay(half, capacity, LRUPolicy()))), 1e-6)
        self.reach = int(min(self.window, max(self.capacity, round(self.capacity / lru_miss))))
        trig = self._triggers(ids, 0, np.full(self.n_rows, -1, dtype=np.int64))
        tpos = np.flatnonzero(~replay(ids, capacity, OPTPolicy()))
        # Choose the threshold out of sample: pairs from the first 70%, predictions scored on the rest.
        split = int(ids.size * 0.7)
        self._learn(ids, trig[trig < split], tpos, split)
        held_out = trig[trig >= split]
        self.threshold = self._choose_threshold(ids, held_out)
        pairs = self._learn(ids, trig, tpos, ids.size)
        spent = time.thread_time() - start
        self.train_seconds += spent
        return {"pairs": pairs, "triggers": int(trig.size), "threshold": self.threshold, "reach": self.reach,
                "seconds": spent}

    def _learn(self, ids: np.ndarray, trig: np.ndarray, tpos: np.ndarray, span: int) -> int:
        """Build the association table from triggers `trig` and targets `tpos` over `span` lookups."""
        all_trig = trig
        # A pair needs min_support of both ends: rows that trigger, or miss, once cannot make one.
        trig = trig[self._recurring(ids[trig])]
        tpos_r = tpos[self._recurring(ids[tpos])]
        # For each trigger, the targets after it within `window` lookups (at most `fanout`).
        first = np.searchsorted(tpos_r, trig, side="right")
        last = np.minimum(np.searchsorted(tpos_r, trig + self.window, side="right"), first + self.fanout)
        n = np.maximum(last - first, 0)
        if n.sum() > self.max_pairs:
            n = np.minimum(n, max(1, self.max_pairs // max(1, trig.size)))
        at = np.repeat(np.arange(trig.size), n)
        j = np.repeat(first, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
        a = ids[trig][at]
        b = ids[tpos_r[j]]
        keep = a != b
        at, a, b = at[keep], a[keep], b[keep]
        # A target counts once per trigger, however often it misses in the window: confidence <= 1.
        once = np.unique(at * self.n_rows + b, return_index=True)[1]
        a, b = a[once], b[once]
        pair = a * self.n_rows + b
        uniq, counts = np.unique(pair, return_counts=True)
        strong = counts >= self.min_support
        uniq, counts = uniq[strong], counts[strong]
        ta, tb = uniq // self.n_rows, uniq % self.n_rows
        trig_rows, trig_counts = np.unique(ids[all_trig], return_counts=True)
        conf = counts / trig_counts[np.searchsorted(trig_rows, ta)]
        # Frequent misses follow any trigger by chance: score the excess over that chance.
        in_span = tpos[tpos < span]
        miss_rows, miss_counts = np.unique(ids[in_span], return_counts=True)
        k = np.minimum(np.searchsorted(miss_rows, tb), max(0, miss_rows.size - 1))
        expected = np.where(miss_rows[k] == tb, miss_counts[k], 0) * self.window / max(1, span)
        score = conf - (1.0 - np.exp(-expected))  # chance of at least one miss of b in a window
        # Keep the `per_row` best-scoring companions of each trigger row, and only those above chance.
        o = np.lexsort((-score, ta))
        ta, tb, score = ta[o], tb[o], score[o]
        starts = np.flatnonzero(np.r_[True, ta[1:] != ta[:-1]])
        rank = np.arange(ta.size) - np.repeat(starts, np.diff(np.r_[starts, ta.size]))
        sel = (rank < self.per_row) & (score > 0)
        ta, tb, score = ta[sel], tb[sel], score[sel]
        self._keys, first_idx = np.unique(ta, return_index=True)
        self._starts = np.append(first_idx, ta.size).astype(np.int64)
        self._targets = tb.astype(np.int64)
        self._conf = score.astype(np.float32)
        return int(ta.size)

    def _choose_threshold(self, ids: np.ndarray, trig: np.ndarray) -> float:
        """Lowest score whose held-out predictions are right (looked up within the reach) often enough."""
        if self._targets.size == 0 or trig.size == 0:
            return np.inf
        rows, conf, at = self._lookup(ids[trig])
        if rows.size == 0:
            return np.inf
        t = trig[at]
        # Each prediction's row: its last lookup at or before the trigger and its next one after.
        span = ids.size + 1
        keys = np.sort(ids * span + np.arange(ids.size))
        i = np.searchsorted(keys, rows * span + t, side="right")
        before = keys[np.maximum(i - 1, 0)]
        cached = (i > 0) & (before // span == rows) & (t - before % span <= self.reach)
        after = keys[np.minimum(i, keys.size - 1)]
        right = (i < keys.size) & (after // span == rows) & (after % span - t <= self.reach)
        conf, right = conf[~cached], right[~cached]  # presumed in the fast tier: never prefetched
        if conf.size == 0:
            return np.inf
        o = np.argsort(-conf, kind="stable")
        precision = np.cumsum(right[o]) / np.arange(1, o.size + 1)
        good = np.flatnonzero(precision >= self.min_precision)
        return float(conf[o][good[-1]]) if good.size else np.inf

    def _recurring(self, rows: np.ndarray) -> np.ndarray:
        """Mask of the entries of `rows` whose row occurs at least min_support times in `rows`."""
        uniq, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
        return counts[inverse] >= self.min_support

    def _lookup(self, trigger_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(candidate rows, confidences, index of the trigger) for each trigger's associations."""
        pos = np.searchsorted(self._keys, trigger_rows)
        pos = np.minimum(pos, max(0, self._keys.size - 1))
        found = (self._keys.size > 0) & (self._keys[pos] == trigger_rows) if self._keys.size else \
            np.zeros(trigger_rows.size, dtype=bool)
        idx = np.flatnonzero(found)
        if idx.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64)
        lo = self._starts[pos[idx]]
        hi = self._starts[pos[idx] + 1]
        n = hi - lo
        at = np.repeat(idx, n)
        offs = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        j = np.repeat(lo, n) + offs
        return self._targets[j], self._conf[j], at

    # -- predicting ---------------------------------------------------------------
    @property
    def running_precision(self) -> float:
        """The decayed share of scored predictions that were right (1.0 before any is scored)."""
        return self._right / self._scored if self._scored > 0 else 1.0

    @property
    def running_cost(self) -> float:
        """The decayed share of the rows its prefetches evicted that were looked up within the reach."""
        return self._lost / self._victims_scored if self._victims_scored > 0 else 0.0

    @property
    def break_even(self) -> float:
        """The precision below which prefetching costs more hits than it saves."""
        return max(self.min_precision, self.running_cost)

    def evicted(self, rows: np.ndarray, t: int) -> None:
        """The rows evicted at time `t` to make room for this prefetcher's rows, or that its withheld
        rows would have evicted (scored like predictions)."""
        for row in np.asarray(rows, dtype=np.int64).tolist():
            self._victims.setdefault(row, t + self.reach)

    def _score_victims(self, ids: np.ndarray, t0: int) -> None:
        self._lost *= self.decay
        self._victims_scored *= self.decay
        lost, scored = _verdicts(self._victims, ids, t0)
        self._lost += lost
        self._victims_scored += scored

    def _score(self, ids: np.ndarray, t0: int) -> None:
        """Verdicts on the outstanding predictions from the lookups `ids` at t0, t0+1, ..."""
        self._score_victims(ids, t0)
        self._right *= self.decay
        self._scored *= self.decay
        right, scored = _verdicts(self._outstanding, ids, t0)
        self._right += right
        self._scored += scored
        self.checked += scored

    def predict(self, ids: np.ndarray, t0: int) -> np.ndarray:
        """Rows to bring in after the batch `ids` (starting at `t0`), most confident first."""
        start = time.thread_time()
        ids = np.asarray(ids, dtype=np.int64)
        self._score(ids, t0)
        trig = self._triggers(ids, t0, self._last)
        rows, conf, _ = self._lookup(ids[trig])
        out = np.zeros(0, dtype=np.int64)
        end = t0 + ids.size
        if rows.size:
            sel = conf >= self.threshold
            rows, conf = rows[sel], conf[sel]
            # In this batch, or looked up within the reach: presumably in the fast tier already.
            recent = self._last[rows]
            sel = ((recent < 0) | (end - recent > self.reach)) & ~np.isin(rows, ids)
            rows, conf = rows[sel], conf[sel]
            if rows.size:
                # One candidate per row, at its best confidence.
                o = np.lexsort((-conf, rows))
                rows, conf = rows[o], conf[o]
                first = np.ones(rows.size, dtype=bool)
                first[1:] = rows[1:] != rows[:-1]
                rows, conf = rows[first], conf[first]
                out = rows[np.argsort(-conf, kind="stable")][: self.budget_used]
        for row in out.tolist():
            self._outstanding.setdefault(row, end + self.reach)
        # On only while it is known to pay: off until `min_checked` of its predictions are scored (they
        # are scored while it is off), and never without a threshold.
        self.on = bool(np.isfinite(self.threshold)) and self.checked >= self.min_checked and \
            self.running_precision > self.break_even
        if self.capacity:
            self.batches += 1
            self.on_batches += self.on
        self.withheld = out[:0]
        if out.size and not self.on:
            self.paused_batches += 1
            self.withheld = out
            out = out[:0]  # off: the predictions stay outstanding, to be scored all the same
        self.model_seconds += time.thread_time() - start
        self.predicted += ids.size
        return out
