"""The two-tier embedding store against a plain numpy table, for each classic policy.

Every access must return what the all-in-memory table would, whatever the
policy evicts; pinned rows stay; dirty rows (only those) reach the file;
prefetching is counted; bad input raises a clear error and leaves the store
working.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.tiered_cache.policies import LRUPolicy
from pymcoll.algorithms.tiered_cache.store import CapacityError, TieredEmbeddingStore, read_header, sidecar_path

POLICIES = ("lru", "lfu", "opt", "arc", "lecar", "tinylfu")
N_ROWS, DIM = 40, 4


def table(n_rows: int = N_ROWS, dim: int = DIM, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n_rows, dim)).astype(dtype)


def make(tmp_path, capacity: int, policy="lru", tab=None, name: str = "t.emb") -> tuple[TieredEmbeddingStore,
                                                                                        np.ndarray]:
    ref = table() if tab is None else tab.copy()
    return TieredEmbeddingStore.create(tmp_path / name, ref, capacity, policy), ref


def file_rows(path, n_rows: int = N_ROWS, dim: int = DIM, dtype=np.float32) -> np.ndarray:
    """What the file holds now, read apart from the store."""
    return np.fromfile(path, dtype=dtype).reshape(n_rows, dim)


def batch(rng: np.random.Generator, n_rows: int, distinct: int, size: int) -> np.ndarray:
    """`size` ids (in random order) over exactly `distinct` distinct rows."""
    rows = rng.choice(n_rows, distinct, replace=False)
    ids = np.concatenate([rows, rng.choice(rows, size - distinct)])
    return rng.permutation(ids)


def run_random(store: TieredEmbeddingStore, ref: np.ndarray, rng: np.random.Generator, steps: int,
               max_distinct: int) -> None:
    """Random lookups, updates and adds on `store` and `ref` alike; identical results at every step."""
    n_rows, dim = ref.shape
    for _ in range(steps):
        distinct = int(rng.integers(1, max_distinct + 1))
        ids = batch(rng, n_rows, distinct, distinct + int(rng.integers(0, 4)))
        op = rng.integers(3)
        if op == 0:
            got = store.lookup(ids)
            assert got.dtype == ref.dtype
            np.testing.assert_array_equal(got, ref[ids])
        elif op == 1:
            vals = rng.standard_normal((ids.size, dim))  # float64: cast by the store
            store.update(ids, vals)
            for i, v in zip(ids, vals.astype(ref.dtype), strict=True):
                ref[i] = v  # last write wins
        else:
            deltas = rng.standard_normal((ids.size, dim)).astype(ref.dtype)
            store.add(ids, deltas)
            np.add.at(ref, ids, deltas)
        store.check_invariants()
        np.testing.assert_array_equal(store.to_array(), ref)


# ---------------------------------------------------------------------------
# Equivalence with the in-memory table
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("capacity", [6, 7, 16, N_ROWS])
def test_matches_numpy_table(tmp_path, policy, capacity):
    # Batches of up to 6 distinct rows: capacity 6 is exactly a full batch.
    rng = np.random.default_rng(capacity)
    store, ref = make(tmp_path, capacity, policy)
    run_random(store, ref, rng, steps=150, max_distinct=6)
    st_ = store.stats()
    assert st_["hits"] + st_["misses"] == store.time
    if capacity < N_ROWS:
        assert st_["evictions"] > 0
    else:
        assert st_["evictions"] == 0 and st_["misses"] <= N_ROWS
    store.close()
    with TieredEmbeddingStore.open(tmp_path / "t.emb", capacity=3, policy=policy) as again:
        np.testing.assert_array_equal(again.to_array(), ref)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_dtypes(tmp_path, dtype):
    rng = np.random.default_rng(5)
    store, ref = make(tmp_path, 5, "lfu", tab=table(dtype=dtype))
    assert store.dtype == np.dtype(dtype)
    run_random(store, ref, rng, steps=80, max_distinct=5)
    store.close()
    assert read_header(tmp_path / "t.emb")["dtype"] == np.dtype(dtype)
    np.testing.assert_array_equal(file_rows(tmp_path / "t.emb", dtype=dtype), ref)


_op = st.one_of(
    st.tuples(st.just("lookup"), st.lists(st.integers(0, 19), max_size=6)),
    st.tuples(st.just("update"), st.lists(st.integers(0, 19), max_size=6)),
    st.tuples(st.just("add"), st.lists(st.integers(0, 19), max_size=6)),
    st.tuples(st.just("pin"), st.lists(st.integers(0, 19), min_size=1, max_size=2)),
    st.tuples(st.just("unpin"), st.lists(st.integers(0, 19), min_size=1, max_size=2)),
    st.tuples(st.just("prefetch"), st.lists(st.integers(0, 19), max_size=6)),
    st.tuples(st.just("flush"), st.just([])),
)
_example = itertools.count()


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policy=st.sampled_from(POLICIES), capacity=st.integers(1, 8), ops=st.lists(_op, max_size=30))
def test_any_sequence_matches_numpy_table(tmp_path, policy, capacity, ops):
    """Any mix of operations: the same table as numpy, or a clear error with nothing changed."""
    ref = table(20, 3)
    path = tmp_path / f"h{next(_example)}.emb"  # one fixture directory serves every example
    store = TieredEmbeddingStore.create(path, ref, capacity, policy)
    rng = np.random.default_rng(0)
    for name, ids in ops:
        before = (store.to_array(), store.held_rows().tolist(), store.stats(), store.time)
        vals = rng.standard_normal((len(ids), 3)).astype(np.float32)
        try:
            if name == "lookup":
                np.testing.assert_array_equal(store.lookup(ids), ref[np.asarray(ids, dtype=np.int64)])
            elif name == "update":
                store.update(ids, vals)
                for i, v in zip(ids, vals, strict=True):
                    ref[i] = v
            elif name == "add":
                store.add(ids, vals)
                np.add.at(ref, np.asarray(ids, dtype=np.int64), vals)
            elif name == "pin":
                store.pin(ids)
            elif name == "unpin":
                store.unpin(ids)
            elif name == "prefetch":
                n = store.prefetch(ids)
                assert 0 <= n <= len(set(ids))
            else:
                store.flush()
        except (CapacityError, ValueError) as e:
            assert isinstance(e, CapacityError) or name == "unpin"
            np.testing.assert_array_equal(store.to_array(), before[0])
            assert (store.held_rows().tolist(), store.stats(), store.time) == before[1:]
        store.check_invariants()
        np.testing.assert_array_equal(store.to_array(), ref)
        s = store.stats()
        assert s["prefetch_used"] <= s["prefetched"]
    store.close()
    np.testing.assert_array_equal(file_rows(path, 20, 3), ref)


class Recorder(LRUPolicy):
    """LRU that records the calls it gets."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def observe(self, ids, t0):
        self.calls.append(("observe", tuple(np.asarray(ids).tolist()), t0))

    def hit(self, row, t):
        self.calls.append(("hit", row, t))
        super().hit(row, t)

    def insert(self, row, t, prefetched=False):
        self.calls.append(("insert", row, t, prefetched))
        super().insert(row, t, prefetched)

    def remove(self, row):
        self.calls.append(("remove", row))
        super().remove(row)


def test_policy_calls_follow_the_accesses(tmp_path):
    pol = Recorder()
    store, _ = make(tmp_path, 3, pol)
    assert store.policy is pol and pol.capacity == 3
    store.lookup([5, 6, 5])
    store.update([6, 7], np.zeros((2, DIM)))
    store.prefetch([8])
    store.lookup([8, 9])
    assert pol.calls == [
        ("observe", (5, 6, 5), 0), ("insert", 5, 0, False), ("insert", 6, 1, False), ("hit", 5, 2),
        ("observe", (6, 7), 3), ("hit", 6, 3), ("insert", 7, 4, False),
        ("remove", 5), ("insert", 8, 5, True),  # a prefetch takes the current time, without using it
        ("observe", (8, 9), 5), ("hit", 8, 5), ("remove", 6), ("insert", 9, 6, False),
    ]
    assert store.time == 7


def test_policy_object_not_a_subclass(tmp_path):
    class FIFO:
        """First in, first out: the minimal interface, without observe."""

        def reset(self, capacity):
            self.order = []

        def hit(self, row, t):
            pass

        def insert(self, row, t, prefetched=False):
            self.order.append(row)

        def victim(self, t, pinned):
            return next(r for r in self.order if r not in pinned)

        def remove(self, row):
            self.order.remove(row)

    store, ref = make(tmp_path, 4, FIFO())
    run_random(store, ref, np.random.default_rng(1), steps=60, max_distinct=4)
    assert store.evictions > 0


# ---------------------------------------------------------------------------
# Pinning and capacity
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_pinned_rows_survive_traffic(tmp_path, policy):
    store, ref = make(tmp_path, 6, policy)
    store.pin([3, 17, 3])
    assert store.pin_count(3) == 2 and store.pin_count(17) == 1
    assert 3 in store and 17 in store
    rng = np.random.default_rng(2)
    others = np.setdiff1d(np.arange(N_ROWS), [3, 17])
    for _ in range(200):
        ids = rng.choice(others, 4, replace=False)  # 4 + 2 pinned = capacity
        np.testing.assert_array_equal(store.lookup(ids), ref[ids])
        assert 3 in store and 17 in store
    assert store.evictions > 100
    store.add([17], np.ones((1, DIM)))
    ref[17] += 1
    store.unpin([3, 17])
    assert store.pin_count(3) == 1 and store.pin_count(17) == 0
    for _ in range(20):
        ids = rng.choice(others, 5, replace=False)  # 5 + 1 pinned = capacity: 17 must go
        store.lookup(ids)
        assert 3 in store
    assert 17 not in store
    store.check_invariants()
    np.testing.assert_array_equal(store.to_array(), ref)


def test_pinned_context(tmp_path):
    store, _ = make(tmp_path, 2)
    with store.pinned([1, 2]) as s:
        assert s is store and store.pin_count(1) == 1 and store.pin_count(2) == 1
        with pytest.raises(CapacityError):
            store.lookup([3])
    assert store.pin_count(1) == 0 and store.pin_count(2) == 0
    store.lookup([3, 4])  # both evicted now
    assert store.held_rows().tolist() == [3, 4]


def test_capacity_equal_to_batch(tmp_path):
    store, ref = make(tmp_path, 4, "lfu")
    ids = [9, 1, 9, 30, 2, 1, 30]
    np.testing.assert_array_equal(store.lookup(ids), ref[ids])
    assert store.stats()["misses"] == 4 and store.stats()["hits"] == 3
    ids2 = [5, 6, 7, 8, 5]
    np.testing.assert_array_equal(store.lookup(ids2), ref[ids2])
    assert store.held_rows().tolist() == [5, 6, 7, 8]


@pytest.mark.parametrize("policy", POLICIES)
def test_batch_too_large_changes_nothing(tmp_path, policy):
    store, ref = make(tmp_path, 5, policy)
    store.pin([0, 1])
    store.update([2, 3], np.full((2, DIM), 7.0))
    ref[[2, 3]] = 7.0
    state = (store.held_rows().tolist(), store.stats(), store.time, store.pin_count(0))
    for call in (lambda: store.lookup([10, 11, 12, 13]), lambda: store.update([10, 11, 12, 13], np.zeros((4, DIM))),
                 lambda: store.add([10, 11, 12, 13, 10], np.zeros((5, DIM))), lambda: store.pin([10, 11, 12, 13])):
        with pytest.raises(CapacityError, match=r"4 distinct rows.*2 other pinned rows: 6 slots, but capacity is 5"):
            call()
        assert (store.held_rows().tolist(), store.stats(), store.time, store.pin_count(0)) == state
        store.check_invariants()
        np.testing.assert_array_equal(store.to_array(), ref)
    # Pinned rows of the batch count once; 3 new rows fit.
    np.testing.assert_array_equal(store.lookup([0, 1, 10, 11, 12]), ref[[0, 1, 10, 11, 12]])
    np.testing.assert_array_equal(store.lookup([13, 14, 15]), ref[[13, 14, 15]])
    store.close()
    np.testing.assert_array_equal(file_rows(tmp_path / "t.emb"), ref)


def test_unpin_errors(tmp_path):
    store, ref = make(tmp_path, 4)
    store.pin([1, 2])
    with pytest.raises(ValueError, match="row 3 is not pinned"):
        store.unpin([1, 3])
    assert store.pin_count(1) == 1  # nothing undone
    with pytest.raises(ValueError, match="row 2 is pinned 1 time"):
        store.unpin([2, 2])
    assert store.pin_count(2) == 1
    with pytest.raises(IndexError, match="99"):
        store.unpin([99])
    store.unpin([1, 2])
    with pytest.raises(ValueError, match="row 1 is not pinned"):
        store.unpin([1])
    np.testing.assert_array_equal(store.lookup([5, 6, 7, 8]), ref[[5, 6, 7, 8]])


# ---------------------------------------------------------------------------
# Write-back
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_dirty_rows_written_back_on_eviction(tmp_path, policy):
    path = tmp_path / "t.emb"
    store, ref = make(tmp_path, 3, policy)
    orig = ref.copy()
    store.update([0, 1, 2], np.full((3, DIM), 5.0))
    ref[[0, 1, 2]] = 5.0
    np.testing.assert_array_equal(file_rows(path), orig)  # still only in the fast tier
    store.lookup([10, 11])  # evicts two of the dirty rows
    assert store.writebacks == 2 and store.evictions == 2
    on_file = file_rows(path)
    evicted = sorted({0, 1, 2} - set(store.held_rows().tolist()))
    assert len(evicted) == 2
    np.testing.assert_array_equal(on_file[evicted], ref[evicted])
    kept = ({0, 1, 2} & set(store.held_rows().tolist())).pop()
    np.testing.assert_array_equal(on_file[kept], orig[kept])
    np.testing.assert_array_equal(store.to_array(), ref)
    store.lookup([12, 13, 14])  # evicts the clean rows 10, 11 and the last dirty one
    assert store.writebacks == 3 and store.evictions == 5
    store.close()
    assert store.writebacks == 3  # nothing dirty left to flush
    np.testing.assert_array_equal(file_rows(path), ref)


def test_clean_rows_never_written(tmp_path):
    path = tmp_path / "t.emb"
    store, ref = make(tmp_path, 4, "lru")
    rng = np.random.default_rng(3)
    for _ in range(100):
        store.lookup(rng.integers(0, N_ROWS, 4))
    assert store.evictions > 50 and store.writebacks == 0
    store.add([7, 7], np.ones((2, DIM)))
    np.add.at(ref, [7, 7], np.ones((2, DIM), dtype=np.float32))
    store.flush()
    assert store.writebacks == 1  # only row 7, once
    np.testing.assert_array_equal(file_rows(path), ref)
    store.flush()
    assert store.writebacks == 1
    store.lookup([8, 9, 10, 11])  # evicts 7, clean since the flush
    assert store.writebacks == 1 and 7 not in store
    store.close()
    assert store.closed
    store.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        store.lookup([1])
    np.testing.assert_array_equal(file_rows(path), ref)


def test_context_manager_and_reopen(tmp_path):
    path = tmp_path / "t.emb"
    with TieredEmbeddingStore(path, N_ROWS, DIM, 4, "opt", mode="w+", init=2.0) as store:
        store.update([39, 0], np.arange(2 * DIM).reshape(2, DIM))
    expect = np.full((N_ROWS, DIM), 2.0, dtype=np.float32)
    expect[[39, 0]] = np.arange(2 * DIM).reshape(2, DIM)
    assert read_header(path) == {"n_rows": N_ROWS, "dim": DIM, "dtype": np.dtype(np.float32)}
    with TieredEmbeddingStore(path, N_ROWS, DIM, 4) as store:  # r+ with the shape given: checked
        np.testing.assert_array_equal(store.to_array(), expect)
    with TieredEmbeddingStore.open(path, 3, mode="r") as store:
        np.testing.assert_array_equal(store.lookup([0, 39, 5]), expect[[0, 39, 5]])
        with pytest.raises(ValueError, match="read only"):
            store.update([0], np.zeros((1, DIM)))
        store.pin([1])
        assert store.prefetch([2, 3, 4]) == 2
        np.testing.assert_array_equal(store.to_array(), expect)


def test_update_last_write_wins(tmp_path):
    store, ref = make(tmp_path, 3)
    vals = np.arange(4 * DIM, dtype=np.float32).reshape(4, DIM)
    store.update([4, 2, 4, 4], vals)
    np.testing.assert_array_equal(store.lookup([4, 2]), vals[[3, 1]])


# ---------------------------------------------------------------------------
# Prefetching
# ---------------------------------------------------------------------------

def test_prefetch_accounting(tmp_path):
    store, ref = make(tmp_path, 4, "lru")
    assert store.prefetch([1, 2, 1]) == 2
    assert store.prefetch([2, 3]) == 1  # 2 is held
    s = store.stats()
    assert (s["prefetched"], s["misses"], s["hits"], store.time) == (3, 0, 0, 0)
    np.testing.assert_array_equal(store.lookup([1, 1, 5]), ref[[1, 1, 5]])
    s = store.stats()
    assert (s["prefetch_used"], s["hits"], s["misses"]) == (1, 2, 1)
    store.lookup([1])
    assert store.prefetch_used == 1  # counted once
    store.lookup([6, 7, 8])  # evicts 2 and 3 (least recent), never used
    assert 2 not in store and 3 not in store
    store.lookup([2, 3])
    assert store.prefetch_used == 1 and store.misses == 6
    store.reset_stats()
    assert store.stats() == dict.fromkeys(
        ("hits", "misses", "prefetched", "prefetch_used", "evictions", "writebacks"), 0) | {"hit_rate": 0.0}


@pytest.mark.parametrize("policy", POLICIES)
def test_prefetch_never_evicts_pinned(tmp_path, policy):
    store, ref = make(tmp_path, 4, policy)
    store.pin([0, 1, 2])
    assert store.prefetch([10, 11, 12]) == 1  # one slot not pinned
    assert store.held_rows().tolist() == [0, 1, 2, 10]
    assert store.prefetch([13, 14]) == 1  # evicts 10, not a pinned row
    assert store.held_rows().tolist() == [0, 1, 2, 13]
    store.pin([13])
    assert store.prefetch([20]) == 0  # everything pinned
    assert store.held_rows().tolist() == [0, 1, 2, 13]
    store.unpin([0, 1, 2, 13])
    # A prefetch does not evict its own rows: 6 wanted, 4 fit.
    assert store.prefetch([30, 31, 32, 33, 34, 35]) == 4
    assert store.held_rows().tolist() == [30, 31, 32, 33]
    np.testing.assert_array_equal(store.lookup([30, 35]), ref[[30, 35]])
    assert store.prefetch_used == 1
    store.check_invariants()


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

def test_bad_ids_and_values(tmp_path):
    store, ref = make(tmp_path, 4)
    store.update([1], np.ones((1, DIM)))
    ref[1] = 1
    with pytest.raises(IndexError, match=r"ids\[1\]=40 is outside the table of 40 rows"):
        store.lookup([3, 40])
    with pytest.raises(IndexError, match=r"ids\[0\]=-1 is outside the table of 40 rows"):
        store.update([-1], np.zeros((1, DIM)))
    with pytest.raises(TypeError, match="must be integers"):
        store.lookup([1.0, 2.0])
    with pytest.raises(TypeError, match="must be integers"):
        store.lookup(np.array([True, False]))
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        store.lookup([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match=r"values has shape \(2, 3\); expected \(2, 4\)"):
        store.update([1, 2], np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"deltas has shape \(4,\); expected \(1, 4\)"):
        store.add([1], np.zeros(4))
    with pytest.raises(TypeError, match="real numbers"):
        store.add([1], [["a"] * DIM])
    for bad in ([50], [-3]):
        with pytest.raises(IndexError):
            store.pin(bad)
        with pytest.raises(IndexError):
            store.prefetch(bad)
    assert store.time == 1 and store.misses == 1 and store.n_held == 1
    store.check_invariants()
    assert store.lookup([]).shape == (0, DIM)
    np.testing.assert_array_equal(store.lookup(np.array([1, 39], dtype=np.uint8)), ref[[1, 39]])
    np.testing.assert_array_equal(store.to_array(), ref)


def test_bad_construction(tmp_path):
    path = tmp_path / "t.emb"
    with pytest.raises(ValueError, match="capacity=0: the fast tier needs at least 1 row"):
        TieredEmbeddingStore.create(path, table(), 0)
    assert not path.exists()  # nothing written for a bad argument
    with pytest.raises(ValueError, match="capacity=41 exceeds the table's n_rows=40"):
        TieredEmbeddingStore.create(path, table(), 41)
    with pytest.raises(ValueError, match="policy='mru': unknown name"):
        TieredEmbeddingStore.create(path, table(), 4, "mru")
    with pytest.raises(TypeError, match="lacks reset, hit, insert, victim, remove"):
        TieredEmbeddingStore.create(path, table(), 4, object())
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        TieredEmbeddingStore(path, 4, 4, 2, mode="w+", dtype=np.int32)
    with pytest.raises(ValueError, match=r"init has shape \(3, 4\)"):
        TieredEmbeddingStore(path, 4, 4, 2, mode="w+", init=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="mode='a'"):
        TieredEmbeddingStore(path, 4, 4, 2, mode="a")
    with pytest.raises(FileNotFoundError, match="not written by TieredEmbeddingStore"):
        TieredEmbeddingStore.open(path, 4)

    store, ref = make(tmp_path, 4)
    store.update([2], np.zeros((1, DIM)))
    ref[2] = 0
    store.close()
    with pytest.raises(ValueError, match=r"n_rows=50, but .* holds 40 rows of dim 4 \(float32.*pass n_rows=40"):
        TieredEmbeddingStore(path, 50, DIM, 4)
    with pytest.raises(ValueError, match=r"dim=8, but .* pass dim=4"):
        TieredEmbeddingStore(path, N_ROWS, 8, 4)
    with pytest.raises(ValueError, match="dtype=float64, but .* holds float32 rows"):
        TieredEmbeddingStore(path, N_ROWS, DIM, 4, dtype=np.float64)
    with pytest.raises(ValueError, match="capacity=0"):
        TieredEmbeddingStore.open(path, 0)
    with pytest.raises(ValueError, match="init fills a new table only"):
        TieredEmbeddingStore(path, N_ROWS, DIM, 4, init=0.0)
    # Every failed open left the file as it was.
    with TieredEmbeddingStore.open(path, 4) as store:
        np.testing.assert_array_equal(store.to_array(), ref)

    with open(path, "ab") as f:
        f.write(b"\0" * 4)
    with pytest.raises(ValueError, match="has 644 bytes but its sidecar .* says 40 x 4 float32 \\(640 bytes\\)"):
        TieredEmbeddingStore.open(path, 4)
    with open(sidecar_path(path), "w") as f:
        f.write("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        TieredEmbeddingStore.open(path, 4)


def test_learned_policy_in_the_store(tmp_path):
    # "learned" serves as LRU until trained on the lookups served so far, then by its model; the
    # table stays identical to the in-memory one either way.
    rng = np.random.default_rng(5)
    store, ref = make(tmp_path, 8, "learned")
    run_random(store, ref, rng, steps=120, max_distinct=6)
    info = store.policy.train()
    assert store.policy.model is not None and info["examples"] > 0
    run_random(store, ref, rng, steps=120, max_distinct=6)
    store.close()
    with pytest.raises(ValueError, match="needs n_rows"):
        from pymcoll.algorithms.tiered_cache.store import make_policy
        make_policy("learned")


class _FailingReads:
    """The store's file, whose next `fail` reads of several rows raise (an I/O error, Ctrl-C)."""

    def __init__(self, mm: np.memmap, fail: int, error: BaseException) -> None:
        self.mm, self.fail, self.error = mm, fail, error

    def __getitem__(self, key):
        if self.fail and isinstance(key, np.ndarray):
            self.fail -= 1
            raise self.error
        return self.mm[key]

    def __setitem__(self, key, value) -> None:
        self.mm[key] = value

    def __getattr__(self, name):
        return getattr(self.mm, name)


@pytest.mark.parametrize("policy", ["lru", "learned"])
@pytest.mark.parametrize("call", ["lookup", "lookup_batches", "prefetch", "pin"])
def test_failed_read_leaves_no_stale_row(tmp_path, policy, call):
    # Rows given a slot whose read from the file failed must leave again: a later lookup that found
    # them held would return what the slot held before.
    store, ref = make(tmp_path, 8, policy)
    store.lookup(np.arange(8))
    store.update(np.arange(8), -ref[:8])  # dirty rows in every slot, so stale contents would show
    ref[:8] = -ref[:8]
    before = store.time
    store._mm = _FailingReads(store._mm, 1, OSError("read error"))
    new = np.array([20, 21, 22])
    with pytest.raises(OSError, match="read error"):
        if call == "lookup":
            store.lookup(new)
        elif call == "lookup_batches":
            store.lookup_batches([new, np.array([23, 1])])
        elif call == "prefetch":
            store.prefetch(new)
        else:
            store.pin(new)
    store.check_invariants()
    assert not any(int(r) in store for r in new)
    if call in ("lookup", "lookup_batches"):
        # The batches the policy was told of are behind the clock, as if served (the learned policy
        # had both batches of lookup_batches prepared).
        told = 5 if call == "lookup_batches" and policy == "learned" else 3
        assert store.time == before + told
    else:
        assert store.time == before and store.pin_count(20) == 0
    for ids in (new, np.arange(8), new):
        np.testing.assert_array_equal(store.lookup(ids), ref[ids])
    if policy == "learned":
        store.lookup_batches([np.array([1, 2]), np.array([30, 31])])  # the policy's clock agrees with the store's
    store.check_invariants()
    np.testing.assert_array_equal(store.to_array(), ref)
    store.close()
    np.testing.assert_array_equal(file_rows(tmp_path / "t.emb"), ref)
