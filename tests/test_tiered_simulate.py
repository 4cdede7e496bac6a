"""Generated and recorded traces, and simulate().

Generated traces are reproducible and have the calibrated statistics (42%
of the rows touched once, the top 5% of rows taking most lookups); Trace
checks its input, saves and loads, and batches cover it exactly. simulate()
scores the classic policies exactly as replay() does after the warm-up,
gives the same result with and without its background thread, and never
beats Belady's optimum with a history-based policy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.tiered_cache import (CLASSIC, KINDS, POLICIES, GroupOracle, LearnedCachePolicy,
                                             LearnedPrefetcher, LRUPolicy, NextBatchOracle, OPTPolicy, SimResult,
                                             Trace, describe, make_trace, record_dlrm_trace, replay,
                                             resolve_capacity, simulate)
from test_tiered_guard import shaped_ids


@pytest.fixture(scope="module")
def mixed() -> Trace:
    return make_trace(20000, "mixed", seed=0)


@pytest.fixture(scope="module")
def short_mixed() -> Trace:
    return make_trace(20000, "mixed", seed=0, n_lookups=50000)


# ---------------------------------------------------------------------------
# Generated traces
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_make_trace_statistics(kind):
    trace = make_trace(20000, kind, seed=0)
    assert trace.ids.dtype == np.int64 and trace.n_rows == 20000 and trace.batch_size == 2048
    assert trace.ids.min() >= 0 and trace.ids.max() < 20000
    s = trace.stats()
    assert s == describe(trace.ids)
    assert s["lookups"] == len(trace)
    assert abs(s["singleton_fraction"] - 0.42) <= 0.02, s
    if kind in ("irm", "bursty", "mixed"):  # the kinds calibrated to the skew of production traces
        assert s["top5pct_share"] > 0.5, s
    assert trace.meta["kind"] == kind and trace.meta["seed"] == 0


def test_make_trace_is_deterministic():
    for kind in KINDS:
        a = make_trace(5000, kind, seed=7, n_lookups=20000)
        b = make_trace(5000, kind, seed=7, n_lookups=20000)
        c = make_trace(5000, kind, seed=8, n_lookups=20000)
        np.testing.assert_array_equal(a.ids, b.ids)
        assert a.meta == b.meta
        assert a.ids.size != c.ids.size or not np.array_equal(a.ids, c.ids)
    assert not np.array_equal(make_trace(5000, "irm", seed=1, n_lookups=20000).ids[:1000],
                              make_trace(5000, "mixed", seed=1, n_lookups=20000).ids[:1000])


def test_make_trace_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        make_trace(20000, "zipf")
    with pytest.raises(ValueError, match="n_rows"):
        make_trace(999)
    for locality in (-0.1, 1.1):
        with pytest.raises(ValueError, match="locality"):
            make_trace(20000, locality=locality)
    with pytest.raises(ValueError, match="singleton_fraction"):
        make_trace(20000, singleton_fraction=0.95)
    with pytest.raises(ValueError, match="n_lookups"):
        make_trace(20000, n_lookups=100)


@pytest.mark.parametrize("kind", KINDS)
def test_make_trace_groups(kind):
    trace = make_trace(20000, kind, seed=4, n_lookups=60000, locality=1.0)
    g = trace.groups
    assert g.shape == (20000,) and g.dtype == np.int64
    if kind not in ("bursty", "mixed"):  # the kinds without co-accessed groups
        assert (g == -1).all()
        return
    # 30% of the table in groups of 8 on average.
    members = np.flatnonzero(g >= 0)
    assert abs(members.size - 6000) <= 64
    sizes = np.bincount(g[members])
    assert sizes.min() >= 1 and 6 <= sizes.mean() <= 10
    # At full locality a group's lookups come together: consecutive group lookups share a group far
    # more often than independent draws with the groups' shares of lookups would.
    looked = g[trace.ids]
    looked = looked[looked >= 0]
    share = np.bincount(looked) / looked.size
    assert np.mean(looked[1:] == looked[:-1]) > 1.5 * np.sum(share ** 2)


@pytest.mark.parametrize("kind, wins, loses", [
    ("stack", "lru", "lfu"),      # pure recency: counts mislead
    ("drift", "arc", "lfu"),      # the hot set is replaced: counts of the whole past mislead
    ("scan", "tinylfu", "lru"),   # scans flush LRU; admission by frequency keeps the hot set
])
def test_regime_kinds_stress_their_regime(kind, wins, loses):
    trace = make_trace(10000, kind, seed=2, n_lookups=60000)
    rates = {p: simulate(trace, 0.05, p).hit_rate for p in (wins, loses)}
    assert rates[wins] > rates[loses] + 0.03, rates
    assert trace.meta["kind"] == kind and trace.meta["once_rows"] > 0


def test_describe():
    assert describe(np.zeros(0, np.int64))["lookups"] == 0
    s = describe(np.array([5, 5, 5, 1, 2]))
    assert s["distinct"] == 3 and s["singleton_fraction"] == pytest.approx(2 / 3)
    assert s["top1pct_share"] == pytest.approx(3 / 5) and s["top5pct_share"] == pytest.approx(3 / 5)


# ---------------------------------------------------------------------------
# Trace
# ---------------------------------------------------------------------------

def test_trace_validation():
    with pytest.raises(ValueError, match="outside the table of n_rows=5"):
        Trace(np.array([0, 5]), n_rows=5)
    with pytest.raises(ValueError, match="trace id -1 is outside"):
        Trace(np.array([0, -1]), n_rows=5)
    with pytest.raises(ValueError, match="1-D"):
        Trace(np.zeros((2, 3), np.int64), n_rows=5)
    with pytest.raises(ValueError, match="n_rows"):
        Trace(np.zeros(0, np.int64), n_rows=0)
    with pytest.raises(ValueError, match="batch_size"):
        Trace(np.array([1]), n_rows=5, batch_size=0)
    t = Trace([1, 2, 3], n_rows=4)
    assert t.ids.dtype == np.int64 and len(t) == 3
    with pytest.raises(ValueError, match="groups must hold one group id per row"):
        Trace([1, 2, 3], n_rows=4, groups=np.zeros(3, np.int64))


def test_trace_save_load(tmp_path):
    trace = make_trace(5000, "bursty", seed=2, n_lookups=10000, batch_size=512)
    trace.save(tmp_path / "t.npz")
    back = Trace.load(tmp_path / "t.npz")
    np.testing.assert_array_equal(back.ids, trace.ids)
    assert (back.n_rows, back.batch_size) == (trace.n_rows, trace.batch_size)
    assert back.meta["saved_meta"] == repr(trace.meta)
    np.testing.assert_array_equal(back.groups, trace.groups)
    np.save(tmp_path / "ids.npy", np.array([3, 1, 4]))
    plain = Trace.load(tmp_path / "ids.npy")
    assert plain.ids.tolist() == [3, 1, 4] and plain.n_rows == 5 and plain.groups is None
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(ValueError, match="no 'ids' array"):
        Trace.load(tmp_path / "other.npz")


@settings(max_examples=100, derandomize=True, deadline=None)
@given(n=st.integers(0, 300), batch=st.integers(1, 64), start=st.integers(0, 320))
def test_batches_cover_the_trace(n, batch, start):
    trace = Trace(np.arange(n) % 7, n_rows=7, batch_size=batch)
    parts = list(trace.batches(start))
    if start >= n:
        assert parts == []
        return
    assert parts[0][0] == start
    t = start
    for i, (t0, ids) in enumerate(parts):
        assert t0 == t and 0 < ids.size <= batch
        if i:
            assert t0 % batch == 0  # aligned after the first
        t += ids.size
    assert t == n
    np.testing.assert_array_equal(np.concatenate([ids for _, ids in parts]), trace.ids[start:])


def test_record_dlrm_trace():
    trace = record_dlrm_trace(5000, 3, batch_size=256)
    assert len(trace) == 768 and trace.batch_size == 256
    assert trace.n_rows <= 5000
    assert trace.ids.min() >= 0 and trace.ids.max() < trace.n_rows
    assert trace.meta["kind"] == "dlrm"
    np.testing.assert_array_equal(record_dlrm_trace(5000, 3, batch_size=256).ids, trace.ids)
    with pytest.raises(ValueError, match="n_batches"):
        record_dlrm_trace(5000, 0)
    with pytest.raises(ValueError, match="table"):
        record_dlrm_trace(5000, 1, table=1000)


# ---------------------------------------------------------------------------
# simulate()
# ---------------------------------------------------------------------------

def test_resolve_capacity(short_mixed):
    distinct = np.unique(short_mixed.ids).size
    assert resolve_capacity(short_mixed, 100) == 100
    assert resolve_capacity(short_mixed, np.int64(7)) == 7
    assert resolve_capacity(short_mixed, 0.05) == round(0.05 * distinct)
    assert resolve_capacity(short_mixed, 1e-9) == 1
    assert simulate(short_mixed, 0.05, "lru").capacity == round(0.05 * distinct)
    assert simulate(short_mixed, 300, "lru").capacity == 300


def test_simulate_rejects_bad_input(short_mixed):
    for cap in (0, -3):
        with pytest.raises(ValueError, match="at least 1 row"):
            simulate(short_mixed, cap)
    for cap in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="share of the distinct rows"):
            simulate(short_mixed, cap)
    with pytest.raises(TypeError, match="capacity"):
        simulate(short_mixed, True)
    for warmup in (-0.1, 1.0):
        with pytest.raises(ValueError, match="warmup"):
            simulate(short_mixed, 10, warmup=warmup)
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate(short_mixed, 10, "mru")
    with pytest.raises(TypeError, match="policy"):
        simulate(short_mixed, 10, LRUPolicy)  # the class, not an object
    with pytest.raises(ValueError, match="1-D integer array"):
        simulate(np.zeros((3, 2), np.int64), 1)
    with pytest.raises(ValueError, match="1-D integer array"):
        simulate(np.array([0.5, 1.0]), 1)
    with pytest.raises(ValueError, match="non-negative"):
        simulate(np.array([1, -2, 3]), 1)
    with pytest.raises(ValueError, match="empty"):
        simulate(np.zeros(0, np.int64), 1)


@pytest.mark.parametrize("warmup", [0.0, 0.2, 0.37])
@pytest.mark.parametrize("policy", sorted(CLASSIC))
def test_classic_policies_match_replay(policy, warmup):
    trace = make_trace(5000, "mixed", seed=4, n_lookups=30000)
    cap = 150
    hits = replay(trace.ids, cap, CLASSIC[policy]())
    start = int(len(trace) * warmup)
    r = simulate(trace, cap, policy, warmup=warmup)
    assert r.lookups == len(trace) - start
    assert r.hits == hits[start:].sum()
    assert r.on_demand_fetches + r.hits == r.lookups
    assert r.prefetches == r.prefetch_used == 0 and r.prefetch_accuracy == 0.0
    # A policy object, or the ids as a plain array, give the same.
    assert simulate(trace, cap, CLASSIC[policy](), warmup=warmup).hits == r.hits
    assert simulate(trace.ids, cap, policy, warmup=warmup).hits == r.hits


def test_an_idle_prefetcher_learns_its_cost_from_what_it_withheld(short_mixed):
    # Never on (too few predictions checked for it), it still names what it would have brought in;
    # the rows those would have evicted are scored, so its running cost is known before it turns on.
    pf = LearnedPrefetcher(short_mixed.n_rows, min_precision=0.0, min_support=1, min_checked=10**9)
    plain = simulate(short_mixed, 0.05, "learned")
    r = simulate(short_mixed, 0.05, LearnedCachePolicy(short_mixed.n_rows), prefetcher=pf)
    assert r.prefetches == 0 and pf.paused_batches > 0 and not pf.on
    assert 0.0 < pf.running_cost <= 1.0
    # Nothing was evicted for it: the cache served exactly as without a prefetcher.
    assert (r.hits, r.on_demand_fetches) == (plain.hits, plain.on_demand_fetches)


@pytest.mark.parametrize("lookahead, background", [(3, False), (4, True), (64, True)])
def test_batches_prepared_together_change_nothing(lookahead, background):
    # A sorted-batches array (short batches, a step that ends where the ids stop rising) and a trace
    # with the scan filter's runs: shadows, features and predictions of several batches in one pass
    # serve exactly as one batch at a time, leader changes included; 64 reaches past the warm-up.
    for ids, share in ((shaped_ids("sorted-batches", 1), 0.05), (shaped_ids("scans", 2), 0.1)):
        one = simulate(ids, share, "learned")
        many = simulate(ids, share, "learned", lookahead=lookahead, background=background)
        assert (many.hits, many.on_demand_fetches, many.leaders) == (one.hits, one.on_demand_fetches, one.leaders)
        assert len(one.leaders) > 1, "no change of leader: the comparison would not cover one"


def test_prepare_batches_checks_its_batches():
    pol = LearnedCachePolicy(100)
    pol.reset(10)
    with pytest.raises(ValueError, match="expects the batch at time 0"):
        pol.prepare_batches([(5, np.arange(3))])
    with pytest.raises(ValueError, match="expects the batch at time 3"):
        pol.prepare_batches([(0, np.arange(3)), (4, np.arange(3))])
    with pytest.raises(ValueError, match="1-D"):
        pol.prepare_batches([(0, np.zeros((2, 2), dtype=np.int64))])
    pol.prepare_batches([])  # nothing to do
    pol.prepare_batches([(0, np.arange(3)), (3, np.arange(5))])
    assert sorted(pol._prepared) == [0, 3] and pol._prepared[3][0].size == 5


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_simulate_rejects_a_bad_lookahead(short_mixed, bad):
    with pytest.raises(ValueError, match="lookahead"):
        simulate(short_mixed, 0.05, "learned", lookahead=bad)


@pytest.mark.parametrize("policy", ["learned", "learned+prefetch"])
def test_background_thread_changes_nothing(short_mixed, policy):
    def run(background: bool):
        if policy == "learned":
            return simulate(short_mixed, 0.05, policy, background=background)
        # A prefetcher that always prefetches, so that the comparison covers it.
        pf = LearnedPrefetcher(short_mixed.n_rows, min_precision=0.0, min_support=1, min_checked=0)
        return simulate(short_mixed, 0.05, LearnedCachePolicy(short_mixed.n_rows), prefetcher=pf,
                        background=background)

    a, b = run(True), run(False)
    assert (a.hits, a.on_demand_fetches, a.prefetches, a.prefetch_used) == \
        (b.hits, b.on_demand_fetches, b.prefetches, b.prefetch_used)
    assert a.lookups == b.lookups and a.capacity == b.capacity
    assert a.on_demand_fetches + a.hits == a.lookups
    assert 0.0 <= a.prefetch_accuracy <= 1.0
    assert a.prefetch_used <= a.prefetches
    if policy == "learned":
        assert a.prefetches == 0
    else:
        assert a.prefetches > 0, "nothing prefetched: the comparison would not cover the prefetcher"


def test_policies_against_belady(mixed):
    results = {p: simulate(mixed, 0.05, p) for p in ("lru", "lfu", "opt", "learned")}
    opt = results["opt"].hit_rate
    for p, r in results.items():
        assert r.policy == p and r.lookups == len(mixed) - int(0.2 * len(mixed))
        assert r.hit_rate <= opt, (p, r.hit_rate, opt)
        assert r.on_demand_fetches + r.hits == r.lookups
        d = r.to_dict()
        for key in ("hit_rate", "on_demand_fetches", "prefetch_accuracy", "us_per_lookup"):
            assert key in d
        assert d["hit_rate"] == r.hit_rate and 0.0 <= d["prefetch_accuracy"] <= 1.0 and d["us_per_lookup"] >= 0
    assert results["lru"].us_per_lookup == 0.0 and results["learned"].us_per_lookup > 0
    assert results["learned"].train_seconds > 0


def test_simulate_with_prefetcher_object(short_mixed):
    r = simulate(short_mixed, 0.05, OPTPolicy(), prefetcher=LearnedPrefetcher(short_mixed.n_rows))
    assert r.policy == "opt+prefetch"
    assert r.on_demand_fetches + r.hits == r.lookups
    assert 0.0 <= r.prefetch_accuracy <= 1.0 and r.prefetch_used <= r.prefetches


def test_prefetches_across_the_warmup_boundary_are_counted_once(short_mixed):
    # The warm-up ends inside a batch: rows prefetched before it and used after it are neither
    # scored prefetches nor scored uses, so a prefetcher that is always right scores exactly 1.
    assert (len(short_mixed) * 0.3) % short_mixed.batch_size != 0
    r = simulate(short_mixed, 6000, "lru", warmup=0.3, prefetcher=NextBatchOracle(short_mixed, 50, latest_first=True))
    assert r.prefetches > 0
    assert r.prefetch_used == r.prefetches and r.prefetch_accuracy == 1.0
    plain = simulate(short_mixed, 6000, "lru", warmup=0.3)
    assert r.on_demand_fetches < plain.on_demand_fetches


def test_next_batch_oracle_brings_in_the_next_batch():
    trace = Trace(np.array([1, 2, 3, 4, 5, 6, 4, 7, 8]), n_rows=10, batch_size=3)
    oracle = NextBatchOracle(trace, 2)
    assert oracle.predict(np.array([1, 2, 3]), 0).tolist() == [4, 5]  # batch [4, 5, 6], budget 2
    assert oracle.predict(np.array([4, 5, 6]), 3).tolist() == [7, 8]  # batch [4, 7, 8]: 4 is in this one
    late = NextBatchOracle(trace, 2, latest_first=True)
    assert late.predict(np.array([1, 2, 3]), 0).tolist() == [6, 5]
    with pytest.raises(ValueError, match="per_batch must be at least 1"):
        NextBatchOracle(trace, 0)


def test_group_oracle_brings_in_companions_seen_before():
    groups = np.full(20, -1, dtype=np.int64)
    groups[[3, 4, 5]] = 0
    trace = Trace(np.zeros(1, np.int64), n_rows=20, groups=groups)
    oracle = GroupOracle(trace, gap=5, per_batch=8)
    assert oracle.predict(np.array([3, 4, 9]), 0).size == 0  # untrained: keeps its clock only
    oracle.train(np.array([3, 4, 9]), 40)
    assert oracle.trigger_gap == 5 and oracle.per_batch == 8
    # Row 5 is new (a first lookup is a return), its companions 3 and 4 were seen: both come in.
    assert sorted(oracle.predict(np.array([5, 10]), 3).tolist()) == [3, 4]
    # Row 3 back soon (gap 5, not more than 5): no trigger. Row 9 is in no group.
    assert oracle.predict(np.array([3, 9]), 5).size == 0
    # Row 4 back after an absence: companions 3 and 5, but 3 is in this batch.
    assert oracle.predict(np.array([4, 3]), 30).tolist() == [5]
    defaults = GroupOracle(trace)
    defaults.train(np.array([1]), 40)
    assert defaults.trigger_gap == 80 and defaults.per_batch == 5
    with pytest.raises(ValueError, match="needs the trace's groups"):
        GroupOracle(Trace(np.zeros(1, np.int64), n_rows=20))
    with pytest.raises(ValueError, match="gap must be at least 1"):
        GroupOracle(trace, gap=0)


def test_group_oracle_on_a_generated_trace(short_mixed):
    r = simulate(short_mixed, 0.05, "lru", prefetcher=GroupOracle(short_mixed))
    assert r.prefetches > 0 and 0.0 < r.prefetch_accuracy <= 1.0
    assert r.on_demand_fetches + r.hits == r.lookups


def test_sim_result_properties():
    r = SimResult(policy="x", capacity=1, lookups=0, hits=0, on_demand_fetches=0, prefetches=0, prefetch_used=0,
                  model_seconds=0.0, train_seconds=0.0, seconds=0.0)
    assert r.hit_rate == 0.0 and r.prefetch_accuracy == 0.0 and r.us_per_lookup == 0.0
    r = SimResult(policy="x", capacity=1, lookups=10, hits=4, on_demand_fetches=6, prefetches=5, prefetch_used=2,
                  model_seconds=2e-5, train_seconds=0.0, seconds=0.0)
    assert r.hit_rate == 0.4 and r.prefetch_accuracy == 0.4 and r.us_per_lookup == pytest.approx(2.0)


def test_policies_constant():
    assert set(CLASSIC) < set(POLICIES)


@pytest.mark.parametrize("policy", ["learned", "learned+prefetch"])
def test_learned_policies_need_a_warmup(policy):
    trace = make_trace(5000, "mixed", seed=0, n_lookups=8192)
    with pytest.raises(ValueError, match="warmup=0.0: the learned policies train on the warm-up"):
        simulate(trace, 0.05, policy, warmup=0.0)
    assert simulate(trace, 0.05, "lru", warmup=0.0).lookups == len(trace)
