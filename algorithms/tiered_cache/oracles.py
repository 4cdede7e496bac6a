"""Offline prefetchers that bound what prefetching can do on a trace.

Belady's optimum bounds what a cache can keep; these bound what a prefetcher
can bring in. Both are handed knowledge no online prefetcher has, and both
plug into :func:`~pymcoll.algorithms.tiered_cache.simulate.simulate` as ``prefetcher=``:

* :class:`NextBatchOracle` is handed the trace: after batch i it brings in
  the rows batch i+1 looks up and batch i does not, at most `per_batch`
  (never wrong; what it can do is bounded only by its budget);
* :class:`GroupOracle` knows a generated trace's co-access groups
  (:attr:`.traces.Trace.groups`): when a group's row comes back after an
  absence of more than `gap` lookups, it brings in the row's companions
  looked up before -- the most any prefetcher learning co-accessed rows
  from the access history could know.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .prefetch import LearnedPrefetcher
from .traces import Trace


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """`rows` without repeats, in order of first occurrence."""
    _, first = np.unique(rows, return_index=True)
    return rows[np.sort(first)]


class NextBatchOracle(LearnedPrefetcher):
    """Brings in, after each batch, the next batch's rows not in this one (handed the trace).

    `per_batch`: the most rows per batch. `latest_first`: rank the rows the
    next batch looks up last first (default: in order of first lookup).
    """

    name = "next-batch-oracle"
    gated = False

    def __init__(self, trace: Trace, per_batch: int, *, latest_first: bool = False) -> None:
        if per_batch < 1:
            raise ValueError(f"per_batch must be at least 1, got {per_batch}")
        super().__init__(trace.n_rows)
        self.trace_ids, self.per_batch, self.latest_first = trace.ids, per_batch, latest_first

    def train(self, ids: np.ndarray, capacity: int) -> dict:
        return {}

    def predict(self, ids: np.ndarray, t0: int) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        end = t0 + ids.size
        rows = _first_per_row(self.trace_ids[end:end + ids.size])
        if self.latest_first:
            rows = rows[::-1]
        self.predicted += ids.size
        return rows[~np.isin(rows, ids)][: self.per_batch]


class GroupOracle(LearnedPrefetcher):
    """On a group's row back after an absence, brings in its companions seen before (knows the groups).

    `gap` defaults to 2 x capacity (the learned prefetcher's trigger) and
    `per_batch` to capacity / 8 (its budget), both set by :meth:`train`.
    Until trained it keeps its clock and predicts nothing.
    """

    name = "group-oracle"
    gated = False

    def __init__(self, trace: Trace, *, gap: Optional[int] = None, per_batch: Optional[int] = None) -> None:
        if trace.groups is None:
            raise ValueError("GroupOracle needs the trace's groups: a trace from make_trace (Trace.groups)")
        for name, value in (("gap", gap), ("per_batch", per_batch)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 or None, got {value}")
        super().__init__(trace.n_rows)
        self.group_of = trace.groups
        self.by_group = np.argsort(self.group_of, kind="stable")
        self.sorted_groups = self.group_of[self.by_group]
        self.seen = np.zeros(trace.n_rows, dtype=bool)
        self.last_lookup = np.full(trace.n_rows, -1, dtype=np.int64)
        self.gap_asked, self.per_batch_asked = gap, per_batch
        self.trigger_gap = self.per_batch = 0

    def train(self, ids: np.ndarray, capacity: int) -> dict:
        self.trigger_gap = self.gap_asked if self.gap_asked is not None else 2 * capacity
        self.per_batch = self.per_batch_asked if self.per_batch_asked is not None else max(1, capacity // 8)
        return {}

    def predict(self, ids: np.ndarray, t0: int) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        out: list[np.ndarray] = []
        for t, row in enumerate(ids.tolist(), start=t0):
            back = self.last_lookup[row] < 0 or t - self.last_lookup[row] > self.trigger_gap
            self.last_lookup[row] = t
            g = self.group_of[row]
            if back and g >= 0 and self.per_batch:
                lo, hi = np.searchsorted(self.sorted_groups, [g, g + 1])
                mates = self.by_group[lo:hi]
                out.append(mates[self.seen[mates]])
            self.seen[row] = True
        self.predicted += ids.size
        if not out:
            return np.zeros(0, dtype=np.int64)
        rows = _first_per_row(np.concatenate(out))
        return rows[~np.isin(rows, ids)][: self.per_batch]
