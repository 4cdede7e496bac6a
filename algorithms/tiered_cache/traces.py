"""Embedding-access traces: generated, recorded, saved and described.

A trace is the sequence of row ids a table is looked up with, served in
batches. :func:`make_trace` generates three kinds, calibrated to Meta's
public statistics of embedding accesses (a few percent of the rows take
most accesses; about 42% of the rows touched are touched only once; reuse
comes in bursts):

``"irm"``
    The independent reference model: every lookup draws a row from a fixed
    Zipf popularity over all rows. No temporal locality; LFU is close to
    the best a history-based policy can do.
``"bursty"``
    Rows come in co-accessed groups (the items of one user, one session,
    one query). A group wakes up at random times, its popular groups often,
    and while awake its rows are looked up several times within a short
    window, then it goes quiet. Plus rows touched once. Recency (LRU) does
    well; frequency alone does not.
``"mixed"``
    Both: a Zipf-popular hot set, bursty groups, and rows touched once, in
    proportions where neither recency nor frequency alone is right.
``"stack"``
    The LRU stack-depth model: each lookup takes the row at a random depth
    of the stack of rows ordered by last lookup (depth d with probability
    proportional to ``(d + 1) ** -1.2``, depths below ``n_rows / 4``), or a
    new row with probability 0.05. Reuse is pure recency: the regime where
    LRU is right and counts mislead.
``"drift"``
    Popularity drift: a Zipf popularity (exponent 1.0) over a pool of 40% of
    the rows whose ranking rotates 16 times over the trace, each time by a
    sixteenth of the pool, so the hot set is replaced and the rows that were
    hot become the coldest. Frequency counted over the whole past misleads;
    decayed counts and recency follow.
``"scan"``
    Scans over a hot set: 70% of the lookups draw from a Zipf popularity
    (exponent 0.9) over 10% of the rows, 30% are scans, each reading
    ``n_rows / 50`` consecutive rows of a scan region (half of the rows) from
    a random start, contiguously in time. A scan's rows are not looked up
    again soon: the regime where admission (TinyLFU) and ARC's split win.

In every kind the rows touched once are topped up until they make up
``singleton_fraction`` (0.42) of the distinct rows, and the ids are
scrambled (a random permutation of the table), so a row id itself says
nothing about its behaviour. ``locality`` (0..1) sets how tightly a
group's lookups follow its wake-up: 1 packs them into about one batch,
0 spreads them over about fifty. The default, 0.7, is where a fast tier of
5% of the distinct rows hits about 0.72 of the mixed trace's lookups under
LRU and 0.85 under Belady's optimum, the hit rates reported for comparable
production traces; the other constants come from the calibration facts
above (hot-set Zipf exponent 1.1, groups of 8 rows on average, 4 lookups
per member per wake-up). The constants of the three kinds added after
them ("stack", "drift", "scan") are the ones stated above, frozen, so that
a trace of a kind and seed is the same from one version to the next.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import numpy as np

KINDS = ("irm", "bursty", "mixed", "stack", "drift", "scan")

#: Meta's reported share of embedding rows accessed only once.
SINGLETON_FRACTION = 0.42


@dataclass
class Trace:
    """Row ids of a table's lookups, in order, served `batch_size` at a time.

    ``ids`` is int64 in ``[0, n_rows)``. ``meta`` says how it was made.
    ``groups``, for generated traces, gives each row's co-access group (-1
    for rows in none): the ground truth a prefetcher could at best learn.
    """

    ids: np.ndarray
    n_rows: int
    batch_size: int = 2048
    meta: dict = field(default_factory=dict)
    groups: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        self.ids = np.ascontiguousarray(np.asarray(self.ids, dtype=np.int64))
        if self.ids.ndim != 1:
            raise ValueError(f"trace ids must be 1-D, got shape {self.ids.shape}")
        if self.n_rows < 1:
            raise ValueError(f"n_rows must be at least 1, got {self.n_rows}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.ids.size and (self.ids.min() < 0 or self.ids.max() >= self.n_rows):
            bad = self.ids[(self.ids < 0) | (self.ids >= self.n_rows)][0]
            raise ValueError(f"trace id {bad} is outside the table of n_rows={self.n_rows}")
        if self.groups is not None:
            self.groups = np.asarray(self.groups, dtype=np.int64)
            if self.groups.shape != (self.n_rows,):
                raise ValueError(f"groups must hold one group id per row ({self.n_rows}), got shape "
                                 f"{self.groups.shape}")

    def __len__(self) -> int:
        return int(self.ids.size)

    def batches(self, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        """(t0, ids) per batch from lookup `start` on (the first may be short to align)."""
        b = self.batch_size
        t = start
        n = self.ids.size
        while t < n:
            end = min(n, (t // b + 1) * b)
            yield t, self.ids[t:end]
            t = end

    def stats(self) -> dict:
        """Lookups, distinct rows, the share of rows touched once, the top rows' share of lookups."""
        return describe(self.ids)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the trace as a .npz (ids, n_rows, batch_size, meta as text, groups if known)."""
        extra = {"groups": self.groups} if self.groups is not None else {}
        np.savez_compressed(path, ids=self.ids, n_rows=np.int64(self.n_rows),
                            batch_size=np.int64(self.batch_size), meta=np.array(repr(self.meta)), **extra)

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Trace":
        """Read a trace written by :meth:`save` (or an .npy / .npz of ids alone)."""
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            ids = data.astype(np.int64).ravel()
            return cls(ids, n_rows=int(ids.max()) + 1 if ids.size else 1)
        if "ids" not in data:
            raise ValueError(f"{path}: no 'ids' array in the file (arrays: {sorted(data.files)})")
        ids = data["ids"]
        n_rows = int(data["n_rows"]) if "n_rows" in data else int(ids.max()) + 1
        batch = int(data["batch_size"]) if "batch_size" in data else 2048
        meta = {"file": str(path)}
        if "meta" in data:
            meta["saved_meta"] = str(data["meta"])
        groups = data["groups"] if "groups" in data else None
        return cls(ids, n_rows=n_rows, batch_size=batch, meta=meta, groups=groups)


def describe(ids: np.ndarray) -> dict:
    """Statistics of a trace: lookups, distinct rows, share touched once, share of the top 1%/5% rows."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return {"lookups": 0, "distinct": 0, "singleton_fraction": 0.0, "top1pct_share": 0.0,
                "top5pct_share": 0.0}
    _, counts = np.unique(ids, return_counts=True)
    counts = np.sort(counts)[::-1]
    d = counts.size
    cum = np.cumsum(counts)
    return {
        "lookups": int(ids.size),
        "distinct": int(d),
        "singleton_fraction": float(np.mean(counts == 1)),
        "top1pct_share": float(cum[max(1, d // 100) - 1] / ids.size),
        "top5pct_share": float(cum[max(1, d // 20) - 1] / ids.size),
    }


def _zipf_weights(n: int, alpha: float) -> np.ndarray:
    w = np.arange(1, n + 1, dtype=np.float64) ** (-alpha)
    return w / w.sum()


def make_trace(n_rows: int, kind: str = "mixed", seed: int = 0, *, n_lookups: Optional[int] = None,
               batch_size: int = 2048, locality: float = 0.7,
               singleton_fraction: float = SINGLETON_FRACTION) -> Trace:
    """A generated trace over a table of `n_rows` rows (see the module docstring for the kinds).

    `n_lookups` defaults to 8 per row of the table. The same arguments give the
    same trace. The result's ``meta`` records the arguments and what each
    component contributed, its ``groups`` each row's co-access group.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if n_rows < 1000:
        raise ValueError(f"n_rows must be at least 1000 for a generated trace, got {n_rows}")
    if not 0.0 <= locality <= 1.0:
        raise ValueError(f"locality must be in [0, 1], got {locality}")
    if not 0.0 <= singleton_fraction < 0.9:
        raise ValueError(f"singleton_fraction must be in [0, 0.9), got {singleton_fraction}")
    n = int(n_lookups) if n_lookups is not None else 8 * n_rows
    if n < batch_size:
        raise ValueError(f"n_lookups ({n}) must be at least one batch ({batch_size})")
    rng = np.random.default_rng([seed, KINDS.index(kind), 0x7ace])

    if kind in ("stack", "drift", "scan"):
        ids, tt, next_row = _REGIME[kind](n_rows, n, batch_size, rng)
        return _finish(ids, tt, next_row, None, n_rows, n, kind, seed, batch_size, rng, locality,
                       singleton_fraction, {"hot_lookups": 0, "group_lookups": 0})

    # Row ranges of the components, scrambled at the end.
    share = {"irm": (1.0, 0.0), "bursty": (0.08, 0.92), "mixed": (0.55, 0.45)}[kind]
    n_hot_lookups = int(round(n * share[0] * 0.96))
    n_burst_lookups = int(round(n * share[1] * 0.96))
    times: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    next_row = 0

    if n_hot_lookups:
        # Hot set: Zipf popularity, a few percent of the rows take most of these lookups.
        hot_rows = max(100, int(n_rows * (0.5 if kind == "irm" else 0.1)))
        alpha = 1.1 if kind == "irm" else 1.1
        draw = rng.choice(hot_rows, size=n_hot_lookups, p=_zipf_weights(hot_rows, alpha))
        rows.append(draw + next_row)
        times.append(rng.uniform(0, n, size=n_hot_lookups))
        next_row += hot_rows

    if n_burst_lookups:
        # Groups of co-accessed rows: geometric sizes (mean 8), Zipf popularity of wake-ups.
        group_rows = int(n_rows * 0.3)
        sizes = np.minimum(rng.geometric(1 / 8, size=group_rows // 4), 64)
        sizes = sizes[np.cumsum(sizes) <= group_rows]
        n_groups = sizes.size
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]) + next_row
        next_row += int(sizes.sum())
        per_wake = 4.0  # lookups per member per wake-up, on average
        mean_wake_lookups = per_wake * float(sizes.mean())
        n_wakes = max(1, int(n_burst_lookups / mean_wake_lookups))
        g = rng.choice(n_groups, size=n_wakes, p=_zipf_weights(n_groups, 0.9))
        wake_t = rng.uniform(0, n, size=n_wakes)
        span = batch_size * (1.0 + 49.0 * (1.0 - locality))
        # Each member of a woken group: 1 + Poisson(per_wake - 1) lookups after the wake-up.
        member_counts = sizes[g]
        wake_of_member = np.repeat(np.arange(n_wakes), member_counts)
        member_row = np.concatenate([np.arange(s) for s in member_counts]) + starts[g][wake_of_member]
        reps = 1 + rng.poisson(per_wake - 1.0, size=member_row.size)
        lk_row = np.repeat(member_row, reps)
        lk_t = np.repeat(wake_t[wake_of_member], reps) + rng.exponential(span / 3, size=lk_row.size)
        keep = lk_t < n
        rows.append(lk_row[keep])
        times.append(lk_t[keep])

    group_of = np.full(n_rows, -1, dtype=np.int64)  # before scrambling
    if n_burst_lookups:
        group_of[starts[0]:starts[0] + int(sizes.sum())] = np.repeat(np.arange(n_groups), sizes)
    ids = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    tt = np.concatenate(times) if times else np.zeros(0)
    return _finish(ids, tt, next_row, group_of, n_rows, n, kind, seed, batch_size, rng, locality,
                   singleton_fraction, {"hot_lookups": n_hot_lookups,
                                        "group_lookups": int(ids.size - n_hot_lookups)})


def _finish(ids: np.ndarray, tt: np.ndarray, next_row: int, group_of: Optional[np.ndarray], n_rows: int, n: int,
            kind: str, seed: int, batch_size: int, rng: np.random.Generator, locality: float,
            singleton_fraction: float, parts: dict) -> Trace:
    """Top up the rows touched once, order the lookups by time, scramble the ids."""
    if group_of is None:
        group_of = np.full(n_rows, -1, dtype=np.int64)
    # Top up rows touched once until they are `singleton_fraction` of the distinct rows.
    _, counts = np.unique(ids, return_counts=True)
    distinct, singles = counts.size, int(np.sum(counts == 1))
    extra = max(0, int(np.ceil((singleton_fraction * distinct - singles) / (1.0 - singleton_fraction))))
    extra = min(extra, n_rows - next_row)
    ids = np.concatenate([ids, np.arange(next_row, next_row + extra)])
    tt = np.concatenate([tt, rng.uniform(0, n, size=extra)])
    next_row += extra
    if next_row > n_rows:
        raise ValueError(f"n_rows={n_rows} is too small for {n} lookups of kind {kind!r}")
    order = np.argsort(tt, kind="stable")
    perm = rng.permutation(n_rows)
    out = perm[ids[order]]
    meta = {"kind": kind, "seed": seed, "n_rows": n_rows, "n_lookups_asked": n, "locality": locality,
            "singleton_fraction_asked": singleton_fraction, **parts, "once_rows": extra}
    groups = np.empty(n_rows, dtype=np.int64)
    groups[perm] = group_of
    return Trace(out, n_rows=n_rows, batch_size=batch_size, meta=meta, groups=groups)


def _stack_model(n_rows: int, n: int, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """The "stack" kind's lookups (before the rows touched once): see the module docstring."""
    n_main = int(round(n * 0.96))
    max_depth = max(16, n_rows // 4)
    w = _zipf_weights(max_depth, 1.2)
    depths = rng.choice(max_depth, size=n_main, p=w).tolist()
    new = (rng.random(n_main) < 0.05).tolist()
    stack: list[int] = []  # most recent first
    out = np.empty(n_main, dtype=np.int64)
    next_row = 0
    limit = int(n_rows * 0.5)  # the model's own rows; the rest is left for rows touched once
    for i in range(n_main):
        d = depths[i]
        if new[i] or d >= len(stack):
            if next_row < limit:
                row = next_row
                next_row += 1
            else:
                row = stack.pop()  # out of new rows: the deepest comes back
        else:
            row = stack.pop(d)
        stack.insert(0, row)
        if len(stack) > max_depth:
            stack.pop()
        out[i] = row
    # Lookups in this order: times are positions (the top-up spreads its rows among them).
    return out, np.arange(n_main, dtype=np.float64) * (n / max(1, n_main)), next_row


def _drift_model(n_rows: int, n: int, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """The "drift" kind's lookups (before the rows touched once): see the module docstring."""
    n_main = int(round(n * 0.96))
    pool = max(100, int(n_rows * 0.4))
    ranks = rng.choice(pool, size=n_main, p=_zipf_weights(pool, 1.0))
    times = np.sort(rng.uniform(0, n, size=n_main))
    period = n / 16.0
    phase = (times // period).astype(np.int64) * (pool // 16)
    return (ranks + phase) % pool, times, pool


def _scan_model(n_rows: int, n: int, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """The "scan" kind's lookups (before the rows touched once): see the module docstring."""
    n_main = int(round(n * 0.96))
    hot = max(100, int(n_rows * 0.1))
    region = max(100, int(n_rows * 0.5))
    scan_len = max(10, n_rows // 50)
    n_hot = int(round(n_main * 0.7))
    hot_ids = rng.choice(hot, size=n_hot, p=_zipf_weights(hot, 0.9))
    hot_t = rng.uniform(0, n, size=n_hot)
    n_scans = max(1, (n_main - n_hot) // scan_len)
    starts = rng.integers(0, region - scan_len + 1, size=n_scans)
    scan_ids = (starts[:, None] + np.arange(scan_len)[None, :]).ravel() + hot
    # A scan's lookups come one after the other: tiny time steps after its start.
    scan_t = (rng.uniform(0, n, size=n_scans)[:, None] + np.arange(scan_len)[None, :] * 1e-7).ravel()
    return np.concatenate([hot_ids, scan_ids]), np.concatenate([hot_t, scan_t]), hot + region


_REGIME = {"stack": _stack_model, "drift": _drift_model, "scan": _scan_model}


def record_dlrm_trace(n_rows: int, n_batches: int, batch_size: int = 2048, seed: int = 0,
                      table: Optional[int] = None, ids_per_feature: int = 1) -> Trace:
    """The ids one table of the DLRM example's synthetic Criteo data looks up, batch after batch.

    Uses :class:`pymcoll.algorithms.dlrm.data.SyntheticCriteo` (power-law ids per
    feature, the DLRM example's data) with the Criteo Kaggle table sizes capped
    at `n_rows`; `table` defaults to the largest table.
    """
    from ..dlrm.data import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo, cap_table_sizes
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, n_rows)
    if table is None:
        table = int(np.argmax(sizes))
    if not 0 <= table < len(sizes):
        raise ValueError(f"table must be in [0, {len(sizes)}), got {table}")
    if n_batches < 1:
        raise ValueError(f"n_batches must be at least 1, got {n_batches}")
    data = SyntheticCriteo(sizes, seed=seed, ids_per_feature=ids_per_feature)
    parts = [np.asarray(data.batch(i, batch_size).sparse.feature(table)[1], dtype=np.int64)
             for i in range(n_batches)]
    return Trace(np.concatenate(parts), n_rows=int(sizes[table]), batch_size=batch_size,
                 meta={"kind": "dlrm", "seed": seed, "table": table, "n_batches": n_batches,
                       "ids_per_feature": ids_per_feature})
