"""Per-lookup features of an access stream, computed a batch at a time.

The learned policies see each lookup through a handful of numbers that
depend only on the ids looked up so far (never on the cache's state), so the
features of batch i+1 can be computed while batch i is being served:

0. ``log((count + 1) / (t + 1))``: earlier lookups of the row per lookup of
   the stream so far (a popularity that does not grow with time, so a model
   trained early still fits later);
1. ``log1p(gap)``: lookups since the row's previous lookup (a large sentinel
   when there was none);
2. ``log1p(previous gap)``: the gap before that one (sentinel when unknown);
3. ``first``: 1 for the row's first lookup, else 0;
4. ``log1p(in-batch count)``: lookups of the row within this batch.

Per-row state is three int64 arrays over the table (24 bytes a row).
"""

from __future__ import annotations

import numpy as np

N_FEATURES = 5
FEATURE_NAMES = ("log_rate", "log_gap", "log_prev_gap", "first", "log_batch_count")


class AccessFeatures:
    """The running state of an access stream and the features of each new batch."""

    def __init__(self, n_rows: int, horizon: int = 1 << 24) -> None:
        if n_rows < 1:
            raise ValueError(f"n_rows must be at least 1, got {n_rows}")
        self.n_rows = int(n_rows)
        # The value a gap takes when there is none: beyond any reuse a cache could catch.
        self.sentinel = float(np.log1p(horizon))
        self.count = np.zeros(self.n_rows, dtype=np.int64)
        self.last = np.full(self.n_rows, -1, dtype=np.int64)
        self.prev_gap = np.full(self.n_rows, -1, dtype=np.int64)

    def batch(self, ids: np.ndarray, t0: int) -> np.ndarray:
        """Features (len(ids) x N_FEATURES, float32) of lookups `ids` at times t0, t0+1, ...; then
        the state advances past them."""
        ids = np.asarray(ids, dtype=np.int64)
        n = ids.size
        out = np.empty((n, N_FEATURES), dtype=np.float32)
        if n == 0:
            return out
        t = np.arange(t0, t0 + n, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        s = ids[order]
        ts = t[order]
        new_group = np.empty(n, dtype=bool)
        new_group[0] = True
        new_group[1:] = s[1:] != s[:-1]
        group_start = np.flatnonzero(new_group)
        group_id = np.cumsum(new_group) - 1
        rank = np.arange(n) - group_start[group_id]  # earlier lookups of the row in this batch
        sizes = np.diff(np.append(group_start, n))

        # Time of the previous lookup: the previous in-batch one, else the row's stored last.
        prev = np.where(new_group, self.last[s], np.roll(ts, 1))
        # The gap before that: in-batch chain, else the stored gap (first in batch) ...
        prev_prev = np.where(rank >= 2, np.roll(ts, 2), -1)
        stored_gap = self.prev_gap[s]
        gap = np.where(prev >= 0, ts - prev, -1)
        pgap = np.where(rank >= 2, np.roll(ts, 1) - prev_prev, -1)
        # second in batch: the gap before it is from the stored last to the first in batch
        second = rank == 1
        last_s = self.last[s]
        pgap = np.where(second & (last_s >= 0), np.roll(ts, 1) - last_s, pgap)
        pgap = np.where(new_group, stored_gap, pgap)
        count = self.count[s] + rank

        f = np.empty((n, N_FEATURES), dtype=np.float32)
        f[:, 0] = np.log((count + 1.0) / (ts + 1.0))
        f[:, 1] = np.where(gap >= 0, np.log1p(np.maximum(gap, 0)), self.sentinel)
        f[:, 2] = np.where(pgap >= 0, np.log1p(np.maximum(pgap, 0)), self.sentinel)
        f[:, 3] = count == 0
        f[:, 4] = np.log1p(sizes[group_id])
        out[order] = f

        # Advance the state to the end of the batch.
        last_idx = np.append(group_start[1:], n) - 1
        rows = s[group_start]
        self.count[rows] += sizes
        self.prev_gap[rows] = np.where(gap[last_idx] >= 0, gap[last_idx], self.prev_gap[rows])
        self.last[rows] = ts[last_idx]
        return out
