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
4. ``log1p(in-batch count)``: lookups of the row within this batch;
5. and on, one per time scale ``tau`` of `scales`: ``log1p(sum over the
   row's earlier lookups at times s of exp(-(t - s) / tau))``, its lookup
   count with a decay of time scale tau: frequency over the recent past at
   several horizons (a row popular long ago but no more has a large count
   at the long scale only).

Per-row state is four int64 arrays over the table plus one float64 array
per time scale (32 + 8 x len(scales) bytes a row; the numpy reference has no
in-batch counter: 24 + 8 x len(scales)).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .native import NativeFeatures

BASE_FEATURES = ("log_rate", "log_gap", "log_prev_gap", "first", "log_batch_count")
#: Default time scales of the decayed counts, in lookups.
SCALES = (1024.0, 16384.0, 262144.0)
#: The features with the default scales (:class:`AccessFeatures` names its own in ``names``).
FEATURE_NAMES = BASE_FEATURES + tuple(f"log_decayed_count_{int(s)}" for s in SCALES)
N_FEATURES = len(FEATURE_NAMES)
MIN_SCALE = 64.0


class AccessFeatures:
    """The running state of an access stream and the features of each new batch.

    `native`: compute them in C (:class:`~.native.NativeFeatures`, lookup by
    lookup; the default) or with the numpy batch computation below (False:
    the reference; the two agree up to rounding).
    """

    def __init__(self, n_rows: int, horizon: int = 1 << 24, scales: tuple[float, ...] = SCALES,
                 native: bool = True) -> None:
        if n_rows < 1:
            raise ValueError(f"n_rows must be at least 1, got {n_rows}")
        if any(not s >= MIN_SCALE for s in scales):
            raise ValueError(f"scales must be at least {MIN_SCALE:g} lookups each, got {tuple(scales)}")
        self.n_rows = int(n_rows)
        self.scales = tuple(float(s) for s in scales)
        self.names = BASE_FEATURES + tuple(f"log_decayed_count_{int(s)}" for s in self.scales)
        self.n_features = len(self.names)
        # The value a gap takes when there is none: beyond any reuse a cache could catch.
        self.sentinel = float(np.log1p(horizon))
        self._engine: Optional[NativeFeatures] = None
        if native:
            self._engine = NativeFeatures(self.n_rows, self.scales, self.sentinel)
            return
        # Lookups per step of the decayed sums: a step spans at most 8 of the shortest time scale,
        # so the terms scaled back in _chunk stay below e^8 (rounding stays negligible).
        self._step = int(min(2048, 8 * min(self.scales))) if self.scales else 2048
        # Per scale: the decayed count just after the row's last lookup (at self.last).
        self.decayed = [np.zeros(self.n_rows, dtype=np.float64) for _ in self.scales]
        self.count = np.zeros(self.n_rows, dtype=np.int64)
        self.last = np.full(self.n_rows, -1, dtype=np.int64)
        self.prev_gap = np.full(self.n_rows, -1, dtype=np.int64)

    def batch(self, ids: np.ndarray, t0: int) -> np.ndarray:
        """Features (len(ids) x n_features, float32) of lookups `ids` at times t0, t0+1, ...; then
        the state advances past them."""
        if self._engine is not None:
            return self._engine.batch(ids, t0)
        ids = np.asarray(ids, dtype=np.int64)
        step = self._step
        if ids.size <= step:
            return self._chunk(ids, t0)
        out = np.concatenate([self._chunk(ids[i:i + step], t0 + i) for i in range(0, ids.size, step)])
        _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        out[:, 4] = np.log1p(counts[inverse])  # the in-batch count is over the whole batch, not a step
        return out

    def _chunk(self, ids: np.ndarray, t0: int) -> np.ndarray:
        n = ids.size
        out = np.empty((n, self.n_features), dtype=np.float32)
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

        f = np.empty((n, self.n_features), dtype=np.float32)
        f[:, 0] = np.log((count + 1.0) / (ts + 1.0))
        f[:, 1] = np.where(gap >= 0, np.log1p(np.maximum(gap, 0)), self.sentinel)
        f[:, 2] = np.where(pgap >= 0, np.log1p(np.maximum(pgap, 0)), self.sentinel)
        f[:, 3] = count == 0
        f[:, 4] = np.log1p(sizes[group_id])
        # Decayed counts: the stored value decayed to now, plus the row's earlier lookups in this chunk,
        # sum_j exp(-(t - t_j) / tau): an exclusive in-group cumulative sum of exp((t_j - t_end) / tau),
        # t_end the group's last time (terms <= 1, so other groups add little rounding), scaled back.
        t_end = ts[(np.append(group_start[1:], n) - 1)[group_id]]
        last_before = np.where(last_s >= 0, last_s, 0)
        after_last = np.zeros(n, dtype=bool)
        after_last[np.append(group_start[1:], n) - 1] = True
        decayed_after = []
        for k, tau in enumerate(self.scales):
            e = np.exp((ts - t_end) / tau)
            c = np.cumsum(e) - e
            excl = (c - c[group_start[group_id]]) * np.exp((t_end - ts) / tau)
            stored = np.where(last_s >= 0, self.decayed[k][s] * np.exp(-(ts - last_before) / tau), 0.0)
            value = stored + excl
            f[:, 5 + k] = np.log1p(value)
            decayed_after.append(value[after_last] + 1.0)
        out[order] = f

        # Advance the state to the end of the batch.
        last_idx = np.append(group_start[1:], n) - 1
        rows = s[group_start]
        self.count[rows] += sizes
        self.prev_gap[rows] = np.where(gap[last_idx] >= 0, gap[last_idx], self.prev_gap[rows])
        self.last[rows] = ts[last_idx]
        for k, value in enumerate(decayed_after):
            self.decayed[k][rows] = value
        return out
