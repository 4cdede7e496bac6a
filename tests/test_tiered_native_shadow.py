"""Shadow caches in C against their Python references: the same hit and the same eviction on every lookup.

Every classical online policy and the learned order, at capacities from one
row up, on streams of several shapes served in batches of uneven sizes;
LeCaR with several seeds (its random draws must be Python's), W-TinyLFU
with ageing every few lookups; what a shadow held before a batch; a
hypothesis property on arbitrary small id arrays; bad input rejected with
the shadow unchanged; and the choice of engine (C where a policy has one,
Python where it has none or is asked to).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.tiered_cache.guard import Shadow
from pymcoll.algorithms.tiered_cache.learned import LearnedCachePolicy, LearnedOrder
from pymcoll.algorithms.tiered_cache.native import NativeShadow, seed_words
from pymcoll.algorithms.tiered_cache.policies import (CLASSIC, ONLINE, LeCaRPolicy, LRUPolicy, OPTPolicy,
                                                      TinyLFUPolicy)


def stream(shape: str, n: int, rows: int, seed: int) -> np.ndarray:
    """Ids of one shape: Zipf, Zipf with scans through cold rows, uniform, bursts of one row."""
    rng = np.random.default_rng(seed)
    if shape == "uniform":
        return rng.integers(0, rows, n, dtype=np.int64)
    w = np.arange(1, rows + 1, dtype=np.float64) ** -1.0
    ids = rng.choice(rows, size=n, p=w / w.sum()).astype(np.int64)
    if shape == "scan":
        for start in range(0, n, 3000):
            k = min(600, n - start)
            ids[start:start + k] = rows + (start // 3000) * 600 + np.arange(k)  # never seen again
    elif shape == "bursty":
        for start in range(0, n, 500):
            ids[start:start + 40] = ids[start]
    return ids


def make(name: str, **kw):
    if name == "priority":
        return LearnedOrder(**kw)
    return CLASSIC[name](**kw)


def serve_both(name: str, ids: np.ndarray, capacity: int, sizes=(1, 700, 0, 2048, 33), draws: int = 0,
               rows=None, **kw):
    """Serve `ids` through the C and the Python shadow; assert equal batches and contents after each.

    `rows`: the C shadow's bound on the ids (arrays instead of hash tables)."""
    py, c = Shadow(name, make(name, **kw), native=False), Shadow(name, make(name, **kw), native=True, rows=rows)
    py.reset(capacity)
    c.reset(capacity)
    assert py.engine == "python" and c.engine == "c"
    rng = np.random.default_rng(draws)
    t0, k = 0, 0
    while t0 < ids.size:
        n = sizes[k % len(sizes)]
        k += 1
        b = ids[t0:t0 + n]
        if name == "priority":
            # A prediction per lookup, as the model gives; ties in rank are broken by time as in Python.
            p = rng.choice([1.0, 0.5, 0.01, 1e-9], size=b.size)
            py.policy.set_predictions(p, t0)
            c.policy.set_predictions(p, t0)
        a, z = py.run(b, t0), c.run(b, t0)
        where = np.flatnonzero((a.hits != z.hits) | (a.evicted != z.evicted))
        assert where.size == 0, (f"{name} capacity {capacity}: first difference at t={t0 + where[0]} (row "
                                 f"{b[where[0]]}: python hit={a.hits[where[0]]} evicted={a.evicted[where[0]]}, "
                                 f"C hit={z.hits[where[0]]} evicted={z.evicted[where[0]]})")
        assert z.hits.dtype == bool and z.evicted.dtype == np.int64
        assert len(c._engine) == len(py.policy)
        t0 += b.size
    held = sorted(set(ids.tolist()))
    assert [c.holds(r) for r in held] == [py.holds(r) for r in held]
    return py, c


KINDS = ONLINE + ("priority",)


@pytest.mark.parametrize("indexed", ["hashed", "arrays"])
@pytest.mark.parametrize("shape", ["zipf", "scan", "uniform", "bursty"])
@pytest.mark.parametrize("name", KINDS)
def test_c_shadow_decides_as_python(name, shape, indexed):
    ids = stream(shape, 12000, 1500, seed=len(shape))
    rows = int(ids.max()) + 1 if indexed == "arrays" else None
    for capacity in (1, 2, 7, 60, 400):
        serve_both(name, ids, capacity, rows=rows)


@pytest.mark.parametrize("seed", [0, 7, 2**33 + 5, -3, 2**200 + 1])
def test_lecar_draws_as_python_random(seed):
    # LeCaR's evictions follow its random draws: equal decisions mean equal draws, for seeds of one
    # 32-bit word, of several, and negative (Python seeds with the absolute value).
    ids = stream("zipf", 20000, 2000, seed=3)
    serve_both("lecar", ids, 50, seed=seed)
    assert seed_words(seed) is not None


@pytest.mark.parametrize("window,sample", [(0.01, None), (0.3, 5), (0.5, 1)])
def test_tinylfu_windows_and_ageing(window, sample):
    ids = stream("scan", 15000, 1200, seed=5)
    for capacity in (2, 30, 300):
        serve_both("tinylfu", ids, capacity, window=window, sample=sample)


def test_learned_order_without_predictions_is_lru():
    # Before any prediction a row ranks by its time alone: LRU's decisions.
    ids = stream("zipf", 5000, 500, seed=9)
    lo = Shadow("priority", LearnedOrder(), native=True)
    lru = Shadow("lru", LRUPolicy(), native=False)
    lo.reset(40)
    lru.reset(40)
    for t0 in range(0, ids.size, 1000):
        a, b = lo.run(ids[t0:t0 + 1000], t0), lru.run(ids[t0:t0 + 1000], t0)
        np.testing.assert_array_equal(a.hits, b.hits)
        np.testing.assert_array_equal(a.evicted, b.evicted)


def test_held_before_agrees():
    ids = stream("zipf", 6000, 400, seed=11)
    py, c = Shadow("arc", CLASSIC["arc"](), native=False), Shadow("arc", CLASSIC["arc"](), native=True)
    py.reset(50)
    c.reset(50)
    rows = list(range(400))
    for t0 in range(0, ids.size, 1000):
        b = ids[t0:t0 + 1000]
        pa, ca = py.run(b, t0), c.run(b, t0)
        for at in (0, 1, 333, b.size - 1):
            assert c.held_before(rows, b, ca, at) == py.held_before(rows, b, pa, at)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(ids=st.lists(st.integers(0, 40), min_size=1, max_size=300), capacity=st.integers(1, 25),
       batch=st.integers(1, 64), name=st.sampled_from(KINDS), arrays=st.booleans())
def test_property_any_small_stream(ids, capacity, batch, name, arrays):
    serve_both(name, np.array(ids, dtype=np.int64), capacity, sizes=(batch,), rows=41 if arrays else None)


def test_bad_rows_are_rejected_and_leave_the_shadow_unchanged():
    ids = stream("zipf", 3000, 300, seed=2)
    py, c = serve_both("lfu", ids, 20)
    bad = np.array([5, -1, 6], dtype=np.int64)
    with pytest.raises(ValueError, match=r"ids\[1\] = -1"):
        c.run(bad, ids.size)
    # Nothing changed: both go on alike.
    more = stream("zipf", 2000, 300, seed=4)
    a, z = py.run(more, ids.size), c.run(more, ids.size)
    np.testing.assert_array_equal(a.hits, z.hits)
    np.testing.assert_array_equal(a.evicted, z.evicted)


@pytest.mark.parametrize("rows", [100, (1 << 20) + 5])
def test_rows_beyond_the_bound_are_rejected(rows):
    # Within the array limit the C engine checks; beyond it (hash tables) the wrapper does.
    s = Shadow("tinylfu", TinyLFUPolicy(), rows=rows)
    s.reset(8)
    s.run(np.array([1, 2, rows - 1]), 0)
    with pytest.raises(ValueError, match=rf"ids\[1\] = {rows}: rows must be in \[0, {rows}\)"):
        s.run(np.array([3, rows, 4]), 3)
    assert s.holds(rows - 1) and not s.holds(3) and not s.holds(rows + 7) and len(s._engine) == 3


def test_engine_choice():
    # The C engine by default where a policy has one; Python for the rest, or when asked.
    for name in ONLINE:
        s = Shadow(name, CLASSIC[name]())
        s.reset(10)
        assert s.engine == "c", name
    s = Shadow("lru", LRUPolicy(), native=False)
    s.reset(10)
    assert s.engine == "python"
    # Belady's optimum and subclasses (which may decide differently) have none.
    class MyLRU(LRUPolicy):
        pass
    for pol in (OPTPolicy(), MyLRU(), LearnedCachePolicy(100)):
        s = Shadow("x", pol)
        s.reset(10)
        assert s.engine == "python"
    with pytest.raises(ValueError, match="has no C engine"):
        Shadow("x", MyLRU(), native=True).reset(10)
    # A seed Python hashes (not an integer) has no C counterpart of its draws.
    s = Shadow("lecar", LeCaRPolicy(seed="abc"))  # type: ignore[arg-type]
    s.reset(10)
    assert s.engine == "python"


def test_native_shadow_arguments():
    with pytest.raises(ValueError, match="kind"):
        NativeShadow({"kind": "mru"}, 10)
    with pytest.raises(ValueError, match=r"capacity must be 1..2\^40"):
        NativeShadow({"kind": "lru"}, 0)
    with pytest.raises(ValueError, match="window_rows"):
        NativeShadow({"kind": "tinylfu", "window_rows": 11, "sample": 5}, 10)
    pr = NativeShadow({"kind": "priority"}, 10)
    with pytest.raises(ValueError, match="offsets is required"):
        pr.run(np.arange(3), 0)
    with pytest.raises(ValueError, match="one per lookup"):
        pr.run(np.arange(3), 0, np.zeros(2))
    hits, evicted = pr.run(np.arange(3), 0, np.zeros(3))
    assert not hits.any() and (evicted == -1).all() and len(pr) == 3
    t = TinyLFUPolicy(window=0.5)
    t.reset(9)
    assert t.native_config() == {"kind": "tinylfu", "window_rows": 4, "sample": 90}  # round(4.5) = 4, as Python
