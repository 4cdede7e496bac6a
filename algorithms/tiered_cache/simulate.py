"""Replay a trace through a fast tier under a policy and score it.

:func:`simulate` serves a trace batch by batch from an empty fast tier of a
given capacity. Every policy serves the warm-up prefix (default the first
20% of the lookups) and is scored on the rest only; the learned policies
train on the warm-up at its end. While batch i is served, the learned
policy prepares batch i+1 (its shadow caches, features and predictions) and
the prefetcher predicts what to bring in after batch i, in a background
thread; prefetched rows take fast-tier slots like any other row (no extra
buffer), evicting the policy's victims, and the prefetcher is told which
rows its prefetches evicted (its break-even is measured from them).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Optional, Union

import numpy as np

from .learned import LearnedCachePolicy
from .policies import CLASSIC, OPTPolicy, Policy
from .prefetch import LearnedPrefetcher
from .traces import Trace

#: Policy names :func:`simulate` accepts.
POLICIES = ("lru", "lfu", "arc", "lecar", "tinylfu", "opt", "learned", "learned+prefetch")


@dataclass
class SimResult:
    """What a simulation measured, over the scored lookups (after the warm-up).

    Times are CPU seconds over the whole run, scaled to the scored lookups.
    ``guard_seconds``: the learned policy's shadow caches. ``prefetch_on_share``:
    the share of scored batches in which the prefetcher was on (its measured
    precision at or above its break-even). ``guard_share``: the share of
    scored lookups the learned policy served following a classical policy.
    ``leaders``: for the learned policies, the stretches of the whole run
    (warm-up included) by the leader its fast tier followed, as (first
    lookup, leader name) pairs in order ("learned": the model's order);
    empty for the others.
    """

    policy: str
    capacity: int
    lookups: int
    hits: int
    on_demand_fetches: int
    prefetches: int
    prefetch_used: int
    model_seconds: float
    train_seconds: float
    seconds: float
    guard_seconds: float = 0.0
    prefetch_on_share: float = 0.0
    guard_share: float = 0.0
    leaders: list[tuple[int, str]] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        """Share of scored lookups served from the fast tier (prefetched rows included)."""
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def prefetch_accuracy(self) -> float:
        """Share of prefetched rows looked up before they were evicted (0 without prefetching)."""
        return self.prefetch_used / self.prefetches if self.prefetches else 0.0

    @property
    def us_per_lookup(self) -> float:
        """Model CPU time (features, predictions, prefetch candidates) per lookup, in microseconds."""
        return 1e6 * self.model_seconds / self.lookups if self.lookups else 0.0

    @property
    def guard_us_per_lookup(self) -> float:
        """The learned policy's shadow caches' CPU time per lookup, in microseconds (0 for the others)."""
        return 1e6 * self.guard_seconds / self.lookups if self.lookups else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(hit_rate=self.hit_rate, prefetch_accuracy=self.prefetch_accuracy,
                 us_per_lookup=self.us_per_lookup, guard_us_per_lookup=self.guard_us_per_lookup)
        return d


def _distinct(ids: np.ndarray) -> int:
    return int(np.unique(ids).size)


def resolve_capacity(trace: Trace, capacity: Union[int, float]) -> int:
    """Rows of fast tier: an int as is, a float in (0, 1) as that share of the trace's distinct rows."""
    if isinstance(capacity, (bool, np.bool_)):
        raise TypeError("capacity must be an int (rows) or a float in (0, 1) (share of distinct rows)")
    if isinstance(capacity, (float, np.floating)):
        if not 0.0 < capacity < 1.0:
            raise ValueError(f"a float capacity is a share of the distinct rows, in (0, 1); got {capacity} "
                             "(pass an int for a number of rows)")
        return max(1, int(round(capacity * _distinct(trace.ids))))
    if int(capacity) < 1:
        raise ValueError(f"capacity must be at least 1 row, got {capacity}")
    return int(capacity)


def _from_name(name: str, n_rows: int) -> tuple[Policy, Optional[LearnedPrefetcher]]:
    """The policy (and prefetcher) a name of :data:`POLICIES` stands for."""
    if name in CLASSIC:
        return CLASSIC[name](), None
    if name == "learned":
        return LearnedCachePolicy(n_rows), None
    if name == "learned+prefetch":
        return LearnedCachePolicy(n_rows), LearnedPrefetcher(n_rows)
    raise ValueError(f"policy must be one of {POLICIES} or a Policy object, got {name!r}")


def simulate(trace: Union[Trace, np.ndarray], capacity: Union[int, float], policy: Union[str, Policy] = "lru",
             *, warmup: float = 0.2, prefetcher: Optional[LearnedPrefetcher] = None,
             background: bool = True, lookahead: int = 1) -> SimResult:
    """Serve `trace` from a fast tier of `capacity` rows under `policy`; score after the warm-up.

    `trace`: a :class:`Trace` or an integer array of row ids (one batch of
    2048 at a time). `capacity`: rows (int) or a share of the trace's
    distinct rows (float below 1). `policy`: a name of :data:`POLICIES` or a
    :class:`Policy` object (reset here). `warmup`: the share of lookups
    served unscored first (the learned policies train on it). `prefetcher`:
    an extra prefetcher for a policy object. `background`: run the model and
    the prefetcher in a thread, a batch ahead (False: inline, same results).
    `lookahead`: the learned policies prepare this many batches at a time
    (:meth:`~.learned.LearnedCachePolicy.prepare_batches`), as a store whose
    next batches' ids are known ahead would; the batches after the warm-up's
    first wait for the trained model, so with the default training the hits
    are the same as one batch at a time.
    """
    if isinstance(lookahead, bool) or not isinstance(lookahead, (int, np.integer)) or lookahead < 1:
        raise ValueError(f"lookahead must be a whole number of batches, at least 1, got {lookahead!r}")
    if not isinstance(trace, Trace):
        ids = np.asarray(trace)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"trace must be a Trace or a 1-D integer array of row ids, got {ids.dtype} "
                             f"of shape {ids.shape}")
        if ids.size and ids.min() < 0:
            raise ValueError(f"trace ids must be non-negative, found {int(ids.min())}")
        trace = Trace(ids, n_rows=int(ids.max()) + 1 if ids.size else 1)
    if len(trace) == 0:
        raise ValueError("trace is empty: nothing to simulate")
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup}")
    cap = resolve_capacity(trace, capacity)
    if isinstance(policy, str):
        pol, pf = _from_name(policy, trace.n_rows)
        label = policy
    elif isinstance(policy, Policy):
        pol, pf, label = policy, None, policy.name
    else:
        raise TypeError(f"policy must be a name of {POLICIES} or a Policy object, got {type(policy).__name__}")
    if prefetcher is not None:
        pf = prefetcher
        label = f"{label}+prefetch"
    ids = trace.ids
    n = ids.size
    warm_end = int(n * warmup)
    learned = isinstance(pol, LearnedCachePolicy)
    if (learned or pf is not None) and warm_end < 1:
        raise ValueError(f"warmup={warmup}: the learned policies train on the warm-up, so it must hold at least "
                         f"one lookup (the default is 0.2)")

    started = time.perf_counter()
    pol.reset(cap)
    if isinstance(pol, OPTPolicy):
        pol.observe(ids, 0)  # the whole future, once; the per-batch calls below add nothing
    batches = list(trace.batches())
    in_cache = pol.__contains__
    # Prefetched rows not looked up yet -> whether their prefetch was scored (after the warm-up), so
    # a row prefetched in the warm-up and used after it counts neither as a prefetch nor as a use.
    pending: dict[int, bool] = {}
    hits = misses = prefetches = used = 0
    on_batches = scored_batches = 0
    led_before: Optional[dict] = None
    trained = not learned and pf is None  # nothing to train
    pool = ThreadPoolExecutor(max_workers=1) if background else None

    # The first batch at or past the warm-up's end: the learned policy trains before serving it, so
    # the batches after it are prepared once that is done.
    first_scored = next((j for j, (t, _) in enumerate(batches) if t >= warm_end), len(batches))
    next_prepared = 1  # batch 0 is prepared when it is served

    def ahead(i: int) -> Optional[np.ndarray]:
        """The model's work for after batch i: predictions of the batches from i+1 (`lookahead` of them,
        once those before are served), prefetches after batch i."""
        nonlocal next_prepared
        if learned and next_prepared == i + 1 < len(batches):
            end = min(len(batches), i + 1 + int(lookahead))
            if i + 1 <= first_scored < end - 1:
                end = first_scored + 1
            pol.prepare_batches(batches[i + 1:end])
            next_prepared = end
        if pf is not None:
            # Untrained, it predicts nothing but keeps its absence clock running.
            return pf.predict(batches[i][1], batches[i][0])
        return None

    try:
        for i, (t0, b) in enumerate(batches):
            if not trained and t0 >= warm_end:
                if learned:
                    pol.train()
                if pf is not None:
                    pf.train(ids[:t0], cap)
                trained = True
            if learned and led_before is None and t0 >= warm_end:
                led_before = dict(pol.guard.led)
            pol.observe(b, t0)
            job = pool.submit(ahead, i) if pool is not None else None
            for t, row in enumerate(b.tolist(), start=t0):
                if in_cache(row):
                    pol.hit(row, t)
                    if pending.pop(row, False):
                        used += 1
                    if t >= warm_end:
                        hits += 1
                else:
                    if len(pol) >= cap:
                        victim = pol.victim(t)
                        pol.remove(victim)
                        pending.pop(victim, None)
                    pol.insert(row, t)
                    if t >= warm_end:
                        misses += 1
            rows = job.result() if job is not None else ahead(i)
            if pf is not None and t0 >= warm_end:
                scored_batches += 1
                # A gated prefetcher says whether it was on; any other was on when it prefetched.
                on_batches += bool(pf.on) if getattr(pf, "gated", False) else bool(rows is not None and rows.size)
            if rows is not None and rows.size:
                t_next = t0 + b.size
                evicted = []
                for row in rows.tolist():
                    if in_cache(row):
                        continue
                    if len(pol) >= cap:
                        victim = pol.victim(t_next)
                        pol.remove(victim)
                        pending.pop(victim, None)
                        evicted.append(victim)
                    pol.insert(row, t_next, prefetched=True)
                    pending[row] = t_next >= warm_end
                    if t_next >= warm_end:
                        prefetches += 1
                if evicted and hasattr(pf, "evicted"):
                    pf.evicted(np.asarray(evicted, dtype=np.int64), t_next)
            withheld = getattr(pf, "withheld", None) if pf is not None else None
            if withheld is not None and withheld.size and hasattr(pf, "evicted") and len(pol) >= cap:
                # Off, it names what it would have brought in: the rows those would have evicted (the
                # policy's next victims, none removed) are scored as its victims, so it learns its cost.
                t_next = t0 + b.size
                would = pol.victims(t_next, sum(1 for row in withheld.tolist() if not in_cache(row)))
                if would:
                    pf.evicted(np.asarray(would, dtype=np.int64), t_next)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    elapsed = time.perf_counter() - started
    model_s = getattr(pol, "model_seconds", 0.0) + (pf.model_seconds if pf is not None else 0.0)
    train_s = getattr(pol, "train_seconds", 0.0) + (pf.train_seconds if pf is not None else 0.0)
    scored_lookups = n - warm_end
    # Model time is per lookup of the whole run (the model runs on the warm-up too).
    predicted = max(getattr(pol, "predicted", 0), pf.predicted if pf is not None else 0, 1)
    guard_share = 0.0
    if learned and led_before is not None and scored_lookups:
        followed = sum(v - led_before.get(k, 0) for k, v in pol.guard.led.items() if k != "learned")
        guard_share = followed / scored_lookups
    return SimResult(policy=label, capacity=cap, lookups=scored_lookups, hits=hits, on_demand_fetches=misses,
                     prefetches=prefetches, prefetch_used=used,
                     model_seconds=model_s * scored_lookups / predicted, train_seconds=train_s,
                     seconds=elapsed, guard_seconds=getattr(pol, "guard_seconds", 0.0) * scored_lookups / predicted,
                     prefetch_on_share=on_batches / scored_batches if scored_batches else 0.0,
                     guard_share=guard_share, leaders=list(pol.guard.changes) if learned else [])
