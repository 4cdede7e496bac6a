"""TieredEmbeddingStore.lookup_batches: several batches in one call, exactly as one at a time.

The learned policy prepares the batches of one call in one pass; everything the store and the
policy do must still be what consecutive lookup() calls do: the rows returned, the counters, the
rows held, the learned policy's leaders. Bad batches are refused before any is served; a failure
part way leaves both the store and the policy usable.
"""

from __future__ import annotations

import numpy as np
import pytest

from pymcoll.algorithms.tiered_cache import TieredEmbeddingStore
from pymcoll.algorithms.tiered_cache.store import CapacityError

N_ROWS, DIM, CAPACITY = 300, 3, 30


def table(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((N_ROWS, DIM)).astype(np.float32)


def skewed_batches(seed: int, count: int) -> list[np.ndarray]:
    """Batches of 0-25 lookups over a Zipf-like popularity: hits, misses and evictions alike."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, N_ROWS + 1) ** 0.9
    weights /= weights.sum()
    out = []
    for i in range(count):
        size = 0 if i % 17 == 5 else int(rng.integers(1, 26))
        out.append(rng.choice(N_ROWS, size, p=weights).astype(np.int64))
    return out


def chunks(items: list, sizes: list[int]) -> list[list]:
    out, i, k = [], 0, 0
    while i < len(items):
        n = sizes[k % len(sizes)]
        out.append(items[i:i + n])
        i, k = i + n, k + 1
    return out


def state(store: TieredEmbeddingStore) -> dict:
    s = {"time": store.time, "held": sorted(store.held_rows().tolist()), **store.stats()}
    pol = store.policy
    if hasattr(pol, "guard"):
        s["changes"] = list(pol.guard.changes)
        s["led"] = dict(pol.guard.led)
    return s


@pytest.mark.parametrize("policy", ["lru", "lfu", "tinylfu", "learned"])
@pytest.mark.parametrize("sizes", [[1], [4], [2, 7, 3], [64]])
def test_same_as_one_batch_at_a_time(tmp_path, policy, sizes):
    tab = table()
    one = TieredEmbeddingStore.create(tmp_path / "one.emb", tab, CAPACITY, policy)
    many = TieredEmbeddingStore.create(tmp_path / "many.emb", tab, CAPACITY, policy)
    batches = skewed_batches(1, 150)
    for part, group in enumerate(chunks(batches, sizes)):
        got = many.lookup_batches(group)
        assert len(got) == len(group)
        for ids, rows in zip(group, got, strict=True):
            np.testing.assert_array_equal(one.lookup(ids), rows)
            np.testing.assert_array_equal(rows, tab[ids])
        assert state(many) == state(one), f"after call {part}"
        if policy == "learned" and one.policy.model is None and one.time >= 400:  # the model takes over on both
            one.policy.train()
            many.policy.train()
            assert many.policy.model is not None
    if policy == "learned":
        assert many.policy.model is not None and len(many.policy.guard.changes) >= 1
    one.check_invariants()
    many.check_invariants()
    one.close()
    many.close()


def test_two_dimensional_array_is_a_batch_per_row(tmp_path):
    tab = table()
    store = TieredEmbeddingStore.create(tmp_path / "t.emb", tab, CAPACITY, "learned")
    ids = np.arange(12).reshape(3, 4)
    got = store.lookup_batches(ids)
    assert [g.shape for g in got] == [(4, DIM)] * 3
    for row, g in zip(ids, got, strict=True):
        np.testing.assert_array_equal(g, tab[row])
    assert store.lookup_batches([]) == []
    assert store.time == 12
    # Any iterable of batches: a tuple, a generator, a 1-D array of arrays of different lengths.
    ragged = np.empty(2, dtype=object)
    ragged[0], ragged[1] = np.array([1, 2, 3]), np.array([4])
    for given in ((np.array([5, 6]), [7]), (b for b in [np.array([8]), np.array([9, 10])]), ragged):
        t = store.time
        got = store.lookup_batches(given)
        assert store.time == t + sum(g.shape[0] for g in got)
        assert all(g.shape[1] == DIM for g in got)
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.lookup_batches([[1], [2]])
    assert store.time == 12 + 3 + 3 + 4


@pytest.mark.parametrize("bad, error, match", [
    (np.arange(5), TypeError, r"shape \(5,\).*lookup\(ids\)"),
    ("0123", TypeError, "got str"),
    (7, TypeError, "got int"),
    ([[1, 2], [0.5, 1.0]], TypeError, r"batches\[1\] has dtype float64"),
    ([[1, 2], [3], [N_ROWS]], IndexError, rf"batches\[2\]\[0\]={N_ROWS} is outside"),
    ([[1, 2], [[1, 2]]], ValueError, r"batches\[1\] has shape \(1, 2\)"),
    ([[1, 2], np.arange(CAPACITY + 1)], CapacityError, rf"batches\[1\] of {CAPACITY + 1} distinct rows"),
    ([1, 2, 3], TypeError, r"batches\[0\] is a single id \(1\).*lookup\(ids\)"),
])
def test_bad_batches_change_nothing(tmp_path, bad, error, match):
    tab = table()
    store = TieredEmbeddingStore.create(tmp_path / "t.emb", tab, CAPACITY, "learned")
    ref = TieredEmbeddingStore.create(tmp_path / "ref.emb", tab, CAPACITY, "learned")
    first = skewed_batches(2, 10)
    store.lookup_batches(first)
    ref.lookup_batches(first)
    before = state(store)
    with pytest.raises(error, match=match):
        store.lookup_batches(bad)
    assert state(store) == before
    after = skewed_batches(3, 10)  # and it goes on as if the bad call had not been made
    for a, b in zip(store.lookup_batches(after), ref.lookup_batches(after), strict=True):
        np.testing.assert_array_equal(a, b)
    assert state(store) == state(ref)
    store.close()
    ref.close()


def test_failure_part_way_leaves_store_and_policy_usable(tmp_path, monkeypatch):
    tab = table()
    store = TieredEmbeddingStore.create(tmp_path / "t.emb", tab, CAPACITY, "learned")
    store.lookup_batches(skewed_batches(4, 20))
    store.policy.train()
    serve = store._serve
    calls = []

    def failing(ids):
        calls.append(len(ids))
        if len(calls) == 2:
            raise OSError("the slow tier's file went away")
        return serve(ids)

    monkeypatch.setattr(store, "_serve", failing)
    batches = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7, 8, 9])]
    with pytest.raises(OSError, match="went away"):
        store.lookup_batches(batches)
    monkeypatch.undo()
    # The batches not served are dropped; the clock is past them, where the policy's stream is.
    assert store.policy._prepared == {}
    assert store.time == store.policy.drop_prepared()
    for ids in skewed_batches(5, 30):
        np.testing.assert_array_equal(store.lookup(ids), tab[ids])
    for got, ids in zip(store.lookup_batches(batches), batches, strict=True):
        np.testing.assert_array_equal(got, tab[ids])
    store.check_invariants()
    np.testing.assert_array_equal(store.to_array(), tab)
    store.close()


@pytest.mark.parametrize("where", ["_follow", "_predict"])
@pytest.mark.parametrize("call", ["lookup", "lookup_batches"])
def test_policy_failure_does_not_jam_the_store(tmp_path, monkeypatch, where, call):
    # A failure inside the learned policy's preparing or following (after its shadows saw the
    # lookups) must not leave the store's clock behind the policy's stream: later calls work.
    tab = table()
    store = TieredEmbeddingStore.create(tmp_path / "t.emb", tab, CAPACITY, "learned")
    store.lookup_batches(skewed_batches(6, 20))
    store.policy.train()
    pol = store.policy
    original = getattr(pol, where)
    failed = []

    def failing(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise MemoryError("out of memory in the policy")
        return original(*args, **kwargs)

    monkeypatch.setattr(pol, where, failing)
    batches = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7])]
    with pytest.raises(MemoryError):
        if call == "lookup":
            store.lookup(batches[0])
        else:
            store.lookup_batches(batches)
    assert failed
    assert store.time == pol.drop_prepared()
    for ids in skewed_batches(7, 20):
        np.testing.assert_array_equal(store.lookup(ids), tab[ids])
    for got, ids in zip(store.lookup_batches(batches), batches, strict=True):
        np.testing.assert_array_equal(got, tab[ids])
    store.check_invariants()
    store.close()
