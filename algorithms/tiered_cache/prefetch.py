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
  make a pair). Pairs seen at least
  `min_support` times are kept, with their confidence
  ``count(a, b) / triggers(a)``; the confidence threshold is chosen on the
  stretch itself (the lowest that keeps the predictions' precision there
  at or above `min_precision`).

At run time the triggers of batch i name candidates; candidates above the
threshold, at most `budget` of them ranked by confidence, are prefetched
after batch i (the simulator computes them in a background thread while
batch i is served) and occupy fast-tier slots like any row.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from .policies import OPTPolicy, replay


class LearnedPrefetcher:
    """Association prefetcher trained on Belady's misses (see the module docstring)."""

    name = "learned-prefetch"

    def __init__(self, n_rows: int, *, window: int = 8192, fanout: int = 1024, min_support: int = 2,
                 min_precision: float = 0.3, budget: Optional[int] = None, gap: Optional[int] = None,
                 max_pairs: int = 8_000_000) -> None:
        for name, value in (("window", window), ("fanout", fanout), ("min_support", min_support)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if not 0.0 <= min_precision <= 1.0:
            raise ValueError(f"min_precision must be in [0, 1], got {min_precision}")
        self.n_rows = int(n_rows)
        self.window, self.fanout, self.min_support = window, fanout, min_support
        self.min_precision = min_precision
        self.budget = budget
        self.gap = gap
        self.max_pairs = max_pairs
        self.threshold = 1.0
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
        if self.budget is None:
            self.budget = max(1, self.capacity // 8)
        trig = self._triggers(ids, 0, np.full(self.n_rows, -1, dtype=np.int64))
        missed = ~replay(ids, capacity, OPTPolicy())
        tpos = np.flatnonzero(missed)
        all_trig, all_tpos = trig, tpos
        # A pair needs min_support of both ends: rows that trigger, or miss, once cannot make one.
        trig = trig[self._recurring(ids[trig])]
        tpos = tpos[self._recurring(ids[tpos])]
        # For each trigger, the targets after it within `window` lookups (at most `fanout`).
        first = np.searchsorted(tpos, trig, side="right")
        last = np.minimum(np.searchsorted(tpos, trig + self.window, side="right"), first + self.fanout)
        n = np.maximum(last - first, 0)
        if n.sum() > self.max_pairs:
            n = np.minimum(n, max(1, self.max_pairs // max(1, trig.size)))
        at = np.repeat(np.arange(trig.size), n)
        j = np.repeat(first, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
        a = ids[trig][at]
        b = ids[tpos[j]]
        keep = a != b
        a, b = a[keep], b[keep]
        pair = a * self.n_rows + b
        uniq, counts = np.unique(pair, return_counts=True)
        strong = counts >= self.min_support
        uniq, counts = uniq[strong], counts[strong]
        ta, tb = uniq // self.n_rows, uniq % self.n_rows
        trig_rows, trig_counts = np.unique(ids[all_trig], return_counts=True)
        conf = counts / trig_counts[np.searchsorted(trig_rows, ta)]
        self._keys, first_idx = np.unique(ta, return_index=True)
        self._starts = np.append(first_idx, ta.size).astype(np.int64)
        self._targets = tb.astype(np.int64)
        self._conf = conf.astype(np.float32)
        self.threshold = self._choose_threshold(ids, all_trig, all_tpos)
        self._last = np.full(self.n_rows, -1, dtype=np.int64)
        spent = time.thread_time() - start
        self.train_seconds += spent
        return {"pairs": int(ta.size), "triggers": int(trig.size), "threshold": self.threshold,
                "seconds": spent}

    def _choose_threshold(self, ids: np.ndarray, trig: np.ndarray, tpos: np.ndarray) -> float:
        """Lowest confidence whose predictions on the training stretch are right >= min_precision."""
        if self._targets.size == 0 or trig.size == 0:
            return 1.0
        rows, conf, at = self._lookup(ids[trig])
        if rows.size == 0:
            return 1.0
        t_trig = trig[at]
        # Right: the row is a target (a miss of the optimum) within `window` after the trigger.
        target_rows = ids[tpos]
        order = np.lexsort((tpos, target_rows))
        tr_sorted, tp_sorted = target_rows[order], tpos[order]
        key_sorted = tr_sorted * (ids.size + 1) + tp_sorted
        lo = np.searchsorted(key_sorted, rows * (ids.size + 1) + t_trig, side="right")
        hi_val = rows * (ids.size + 1) + np.minimum(t_trig + self.window, ids.size)
        right = (lo < key_sorted.size) & (key_sorted[np.minimum(lo, key_sorted.size - 1)] <= hi_val)
        o = np.argsort(-conf, kind="stable")
        precision = np.cumsum(right[o]) / np.arange(1, o.size + 1)
        good = np.flatnonzero(precision >= self.min_precision)
        return float(conf[o][good[-1]]) if good.size else 1.0

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
    def predict(self, ids: np.ndarray, t0: int) -> np.ndarray:
        """Rows to bring in after the batch `ids` (starting at `t0`), most confident first."""
        start = time.thread_time()
        ids = np.asarray(ids, dtype=np.int64)
        trig = self._triggers(ids, t0, self._last)
        rows, conf, _ = self._lookup(ids[trig])
        out = np.zeros(0, dtype=np.int64)
        if rows.size:
            sel = conf >= self.threshold
            rows, conf = rows[sel], conf[sel]
            if rows.size:
                # One candidate per row, at its best confidence; the batch's own rows are already in.
                o = np.lexsort((-conf, rows))
                rows, conf = rows[o], conf[o]
                first = np.ones(rows.size, dtype=bool)
                first[1:] = rows[1:] != rows[:-1]
                rows, conf = rows[first], conf[first]
                notin = ~np.isin(rows, ids)
                rows, conf = rows[notin], conf[notin]
                out = rows[np.argsort(-conf, kind="stable")][: self.budget]
        self.model_seconds += time.thread_time() - start
        self.predicted += ids.size
        return out
