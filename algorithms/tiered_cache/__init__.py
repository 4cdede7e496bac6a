"""A tiered-memory embedding store with learned caching and prefetching
(imported as ``pymcoll.algorithms.tiered_cache``).

Inference embedding tables outgrow memory; a small fast tier (DRAM slots)
caches rows of a large slow tier (a memory-mapped file). What to keep, and
what to bring in ahead of use, decides how often a lookup waits for the slow
tier. This package gives:

* :mod:`.store`: :class:`TieredEmbeddingStore`, the two-tier table (batch
  lookups, write-back of updated rows, pinning of rows in use);
* :mod:`.policies`: LRU, LFU, ARC, LeCaR, W-TinyLFU and Belady's optimum
  (offline) behind one interface, and the replay and labelling helpers;
* :mod:`.learned`: the learned caching policy (a small model of Belady's
  next-access outcome, guarded by the classical policies: :mod:`.guard`
  keeps shadow caches of them and the real tier follows whichever was ahead
  over a recent window; :mod:`.scan_filter` keeps sequential scans from
  flushing the real tier); :mod:`.prefetch`: the learned prefetcher (rows that
  miss together, on only while it pays); :mod:`.features` and :mod:`.model`
  are their inputs and model;
* :mod:`.oracles`: offline prefetchers (handed the next batch, or knowing
  the co-access groups) that bound what prefetching can do on a trace;
* :mod:`.traces`: generated traces calibrated to Meta's public statistics
  and traces that stress one regime each (``make_trace``), and traces
  recorded from the DLRM example's data (``record_dlrm_trace``);
* :mod:`.simulate`: ``simulate(trace, capacity, policy)`` and its result.

Typical use::

    from pymcoll.algorithms.tiered_cache import POLICIES, make_trace, simulate
    trace = make_trace(100_000, "mixed", seed=0)
    for policy in POLICIES:   # lru, lfu, arc, lecar, tinylfu, opt, learned, learned+prefetch
        r = simulate(trace, 0.05, policy)
        print(policy, r.hit_rate, r.on_demand_fetches, r.prefetch_on_share, r.us_per_lookup)
"""

from .learned import LearnedCachePolicy
from .oracles import GroupOracle, NextBatchOracle
from .guard import Guard, Shadow
from .policies import (CLASSIC, ONLINE, ARCPolicy, LeCaRPolicy, LFUPolicy, LRUPolicy, OPTPolicy, Policy, TinyLFUPolicy,
                       next_use, opt_next_hit, replay)
from .prefetch import LearnedPrefetcher
from .scan_filter import ScanFilter
from .simulate import POLICIES, SimResult, resolve_capacity, simulate
from .store import CapacityError, TieredEmbeddingStore
from .traces import KINDS, Trace, describe, make_trace, record_dlrm_trace

__all__ = ["ARCPolicy", "CLASSIC", "CapacityError", "GroupOracle", "Guard", "KINDS", "LFUPolicy", "LRUPolicy",
           "LeCaRPolicy", "LearnedCachePolicy", "LearnedPrefetcher", "NextBatchOracle", "ONLINE", "OPTPolicy",
           "POLICIES", "Policy", "ScanFilter", "Shadow", "SimResult", "TieredEmbeddingStore", "TinyLFUPolicy",
           "Trace", "describe", "make_trace", "next_use", "opt_next_hit", "record_dlrm_trace", "replay",
           "resolve_capacity", "simulate"]
