"""The classic replacement policies of the tiered cache against plain reference caches.

LRU, LFU and Belady's optimum (OPT) must make the same choices as a list of
held rows scanned at every eviction; the victim is never a pinned row; the
labelling helpers (next_use, opt_next_hit) match brute force; OPT fed one
batch at a time (as the store feeds it) never does worse than LRU and
re-keys a held row once a later batch says when it comes back.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.tiered_cache.learned import LearnedCachePolicy, LearnedOrder
from pymcoll.algorithms.tiered_cache.policies import (CLASSIC, LFUPolicy, LRUPolicy, OPTPolicy, next_use,
                                                      opt_next_hit, replay)

N_ROWS = 30


@st.composite
def traces(draw, n_rows: int = N_ROWS, max_size: int = 300) -> list[int]:
    """Half small shrinkable lists, half long ones (a third of `max_size` and up) with a Zipf skew."""
    if draw(st.booleans()):
        return draw(st.lists(st.integers(0, n_rows - 1), max_size=max_size))
    n = max_size - draw(st.integers(0, 2 * max_size // 3))
    rows = draw(st.integers(1, n_rows))
    alpha = draw(st.sampled_from([0.0, 0.8, 1.5]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    return rng.choice(rows, size=n, p=w / w.sum()).tolist()


capacities = st.integers(1, 10)


# ---------------------------------------------------------------------------
# Reference implementations
# ---------------------------------------------------------------------------

def brute_next_use(ids) -> list[int]:
    """For each position, the next position with the same id (len(ids) if none), by scanning."""
    ids = list(ids)
    out = []
    for i, row in enumerate(ids):
        j = i + 1
        while j < len(ids) and ids[j] != row:
            j += 1
        out.append(j)
    return out


class RefCache:
    """A fast tier as a list of held rows; the victim is found by scanning all of them.

    lru: the row looked up longest ago; lfu: the fewest lookups since the
    start (held or not), ties to the one looked up longest ago; opt: the row
    whose next lookup is farthest, rows never looked up again first and,
    among those, the one looked up longest ago.
    """

    def __init__(self, kind: str, ids, capacity: int) -> None:
        self.kind, self.capacity = kind, capacity
        self.ids = [int(r) for r in ids]
        self.nxt = brute_next_use(self.ids)
        self.held: list[int] = []
        self.last: dict[int, int] = {}
        self.count: dict[int, int] = {}
        self.next: dict[int, int] = {}

    def victim(self, pinned=()) -> int | None:
        cand = [r for r in self.held if r not in pinned]
        if not cand:
            return None
        if self.kind == "lru":
            return min(cand, key=lambda r: self.last[r])
        if self.kind == "lfu":
            return min(cand, key=lambda r: (self.count[r], self.last[r]))
        return max(cand, key=lambda r: (self.next[r], -self.last[r]))

    def lookup(self, t: int) -> bool:
        row = self.ids[t]
        self.count[row] = self.count.get(row, 0) + 1
        hit = row in self.held
        if not hit:
            if len(self.held) >= self.capacity:
                self.held.remove(self.victim())
            self.held.append(row)
        self.last[row] = t
        self.next[row] = self.nxt[t]
        return hit


def ref_hits(kind: str, ids, capacity: int) -> np.ndarray:
    ref = RefCache(kind, ids, capacity)
    return np.array([ref.lookup(t) for t in range(len(ref.ids))], dtype=bool)


def serve_batches(ids, capacity: int, policy, sizes) -> np.ndarray:
    """Serve `ids` as a store does: each batch announced through observe() before its lookups."""
    ids = np.asarray(ids, dtype=np.int64)
    policy.reset(capacity)
    hits = np.zeros(ids.size, dtype=bool)
    t0, k = 0, 0
    while t0 < ids.size:
        size = sizes[k % len(sizes)]
        k += 1
        b = ids[t0:t0 + size]
        policy.observe(b, t0)
        for t, row in enumerate(b.tolist(), start=t0):
            if row in policy:
                policy.hit(row, t)
                hits[t] = True
            else:
                if len(policy) >= capacity:
                    policy.remove(policy.victim(t))
                policy.insert(row, t)
        t0 += b.size
    return hits


# ---------------------------------------------------------------------------
# Hit/miss sequences against the references
# ---------------------------------------------------------------------------

@settings(max_examples=100, derandomize=True, deadline=None)
@given(ids=traces(), capacity=capacities)
def test_lru_lfu_match_reference(ids, capacity):
    for kind in ("lru", "lfu"):
        got = replay(np.array(ids, dtype=np.int64), capacity, CLASSIC[kind]())
        np.testing.assert_array_equal(got, ref_hits(kind, ids, capacity), err_msg=kind)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(ids=traces(), capacity=capacities)
def test_opt_matches_reference_and_beats_lru_lfu(ids, capacity):
    arr = np.array(ids, dtype=np.int64)
    opt = replay(arr, capacity, OPTPolicy())
    ref = ref_hits("opt", ids, capacity)
    # Belady's hit count is unique whatever the ties; with the documented tie-break the sequence is too.
    assert opt.sum() == ref.sum()
    np.testing.assert_array_equal(opt, ref)
    assert opt.sum() >= replay(arr, capacity, LRUPolicy()).sum()
    assert opt.sum() >= replay(arr, capacity, LFUPolicy()).sum()


def test_replay_hand_made():
    ids = np.array([0, 1, 0, 2, 1, 0])
    # LRU, 2 rows: 0 1 [0 hit] 2 evicts 1, 1 evicts 0, 0 evicts 2.
    np.testing.assert_array_equal(replay(ids, 2, LRUPolicy()), [0, 0, 1, 0, 0, 0])
    # OPT, 2 rows: 2 evicts the row used farthest ahead (0 at 5, not 1 at 4); 0 then misses.
    np.testing.assert_array_equal(replay(ids, 2, OPTPolicy()), [0, 0, 1, 0, 1, 0])
    # LFU, 2 rows: at 2 (counts 0:2, 1:1) 1 goes; at 1 (counts 0:2, 2:1) 2 goes; 0 hits.
    np.testing.assert_array_equal(replay(ids, 2, LFUPolicy()), [0, 0, 1, 0, 0, 1])
    for kind in CLASSIC:
        assert not replay(np.zeros(0, np.int64), 3, CLASSIC[kind]()).size
        assert replay(ids, 3, CLASSIC[kind]()).tolist() == [False, False, True, False, True, True]


def test_lfu_counts_outlive_evictions():
    # 2 rows. 0 (two lookups) is evicted at t=5 when 2 comes, 1 having three; 2 then gets three too.
    # Back at t=8, 0 evicts 1 and counts 3, so at t=9 row 3 evicts 2 (count 3, older) and 0 hits at t=10.
    # Had its count restarted at the eviction, 0 (count 1) would have been the victim at t=9.
    ids = [0, 0, 1, 1, 1, 2, 2, 2, 0, 3, 0]
    hits = replay(np.array(ids), 2, LFUPolicy())
    assert hits.tolist() == [False, True, False, True, True, False, True, True, False, False, True]
    np.testing.assert_array_equal(hits, ref_hits("lfu", ids, 2))


def test_reset_rejects_zero_capacity():
    for kind in CLASSIC:
        with pytest.raises(ValueError, match="capacity"):
            CLASSIC[kind]().reset(0)


# ---------------------------------------------------------------------------
# next_use and opt_next_hit
# ---------------------------------------------------------------------------

def test_next_use_hand_made():
    assert next_use(np.array([1, 2, 1, 3, 2])).tolist() == [2, 4, 5, 5, 5]
    assert next_use(np.array([7])).tolist() == [1]
    assert next_use(np.zeros(0, np.int64)).tolist() == []
    assert next_use(np.array([4, 4, 4])).tolist() == [1, 2, 3]
    assert next_use(np.array([5, 9, 5, 9, 5])).dtype == np.int64


def test_opt_next_hit_hand_made():
    ids = np.array([0, 1, 0, 2, 1])
    # 1 row: only back-to-back repeats could hit, there are none.
    assert opt_next_hit(ids, 1).tolist() == [False] * 5
    # 2 rows: OPT hits 0 at 2 and 1 at 4 (at 3 it evicts 0, never used again).
    assert opt_next_hit(ids, 2).tolist() == [True, True, False, False, False]
    # Enough room for everything: every lookup with a next one is a hit there.
    assert opt_next_hit(ids, 3).tolist() == [True, True, False, False, False]
    assert opt_next_hit(np.array([3, 3, 3]), 1).tolist() == [True, True, False]
    assert opt_next_hit(np.zeros(0, np.int64), 2).tolist() == []


@pytest.mark.parametrize("seed", range(6))
def test_opt_next_hit_in_c_as_the_python_replay(seed):
    # Labels come from the C priority shadow (rank -(next use), ties oldest first); OPTPolicy's heap in
    # Python is the specification. Long arrays with many rows never looked up again (ties) and many
    # repeats; negative ids take the Python replay.
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, int(rng.integers(5, 3000)), size=int(rng.integers(500, 6000)))
    capacity = int(rng.integers(1, 400))
    hits = replay(ids, capacity, OPTPolicy())
    nxt = next_use(ids)
    want = np.zeros(ids.size, dtype=bool)
    want[nxt < ids.size] = hits[nxt[nxt < ids.size]]
    np.testing.assert_array_equal(opt_next_hit(ids, capacity), want)
    np.testing.assert_array_equal(opt_next_hit(ids - 7, capacity), want)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(ids=traces(), capacity=capacities)
def test_next_use_and_opt_next_hit_brute_force(ids, capacity):
    arr = np.array(ids, dtype=np.int64)
    nxt = brute_next_use(ids)
    assert next_use(arr).tolist() == nxt
    hits = ref_hits("opt", ids, capacity)
    want = [bool(j < len(ids) and hits[j]) for j in nxt]
    assert opt_next_hit(arr, capacity).tolist() == want


# ---------------------------------------------------------------------------
# Pinned rows
# ---------------------------------------------------------------------------

@settings(max_examples=100, derandomize=True, deadline=None)
@given(ids=traces(n_rows=15, max_size=120), capacity=st.integers(1, 8),
       seed=st.integers(0, 2**32 - 1))
def test_victim_skips_pinned_rows(ids, capacity, seed):
    """At every step, with a random set of held rows pinned, the victim is the reference's choice
    among the others (all pinned: RuntimeError); pinning leaves the policy's order intact."""
    rng = np.random.default_rng(seed)
    arr = np.array(ids, dtype=np.int64)
    for kind in ("lru", "lfu", "opt"):
        pol = CLASSIC[kind]()
        pol.reset(capacity)
        pol.observe(arr, 0)
        ref = RefCache(kind, ids, capacity)
        for t, row in enumerate(ids):
            held = sorted(ref.held)
            assert sorted(r for r in range(15) if r in pol) == held
            if held:
                pinned = {r for r in held if rng.random() < 0.5}
                want = ref.victim(pinned)
                if want is None:
                    with pytest.raises(RuntimeError, match="pinned"):
                        pol.victim(t, pinned)
                else:
                    got = pol.victim(t, pinned)
                    assert got not in pinned
                    assert got == want, (kind, t)
                assert pol.victim(t) == ref.victim(), (kind, t)  # the skipped rows are back in order
            hit = ref.lookup(t)
            if row in pol:
                assert hit
                pol.hit(row, t)
            else:
                assert not hit
                if len(pol) >= capacity:
                    pol.remove(pol.victim(t))
                pol.insert(row, t)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(ids=traces(n_rows=15, max_size=150), capacity=st.integers(2, 8),
       sizes=st.lists(st.integers(1, 12), min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1))
def test_frozen_pins_give_the_same_victims(ids, capacity, sizes, seed):
    """A store passes one frozenset of pinned rows (its batch's) to every victim() call of a batch,
    and the heap policies keep the pinned rows they passed over aside until the set changes: the
    victims must be those of a fresh set at every call, with hits, victims() and unpinned calls
    in between."""
    rng = np.random.default_rng(seed)
    arr = np.array(ids, dtype=np.int64)
    for kind in ("lfu", "opt", "learned-order", "learned"):
        pols = []
        for _ in range(2):
            if kind == "learned":  # the rows its leader dropped are passed over the same way
                pol = LearnedCachePolicy(15, guard_step=8)
            else:
                pol = LearnedOrder() if kind == "learned-order" else CLASSIC[kind]()
            pol.reset(capacity)
            if kind == "opt":
                pol.observe(arr, 0)
            pols.append(pol)
        if kind == "learned-order":  # the model's order: predictions that reorder the heap
            p = rng.random(len(ids))
            for pol in pols:
                pol.set_predictions(p, 0)
        frozen_pol, fresh_pol = pols
        t, k = 0, 0
        while t < len(ids):
            batch = ids[t:t + sizes[k % len(sizes)]]
            k += 1
            frozen = frozenset(batch) | frozenset(int(r) for r in rng.choice(15, 2))
            if kind == "learned":
                for pol in pols:
                    pol.observe(np.array(batch, dtype=np.int64), t)
            for row in batch:
                if rng.random() < 0.1:  # a prefetch's look at the order, and an unpinned victim
                    assert frozen_pol.victims(t, 2) == fresh_pol.victims(t, 2)
                    if len(frozen_pol):
                        assert frozen_pol.victim(t) == fresh_pol.victim(t)
                assert (row in frozen_pol) == (row in fresh_pol)
                if row in frozen_pol:
                    frozen_pol.hit(row, t)
                    fresh_pol.hit(row, t)
                else:
                    if len(frozen_pol) >= capacity:
                        try:
                            want = fresh_pol.victim(t, set(frozen))
                        except RuntimeError:
                            with pytest.raises(RuntimeError, match="pinned"):
                                frozen_pol.victim(t, frozen)
                            want = fresh_pol.victim(t)  # all pinned: the row goes anyway (no store here)
                            assert frozen_pol.victim(t) == want
                        else:
                            assert frozen_pol.victim(t, frozen) == want, (kind, t)
                        frozen_pol.remove(want)
                        fresh_pol.remove(want)
                    frozen_pol.insert(row, t)
                    fresh_pol.insert(row, t)
                t += 1


def test_a_set_aside_row_that_leaves_does_not_come_back():
    """The learned policy sets aside the pinned rows its leader dropped while the same frozenset of
    pins comes; a row removed meanwhile must not return when the pins change."""
    pol = LearnedCachePolicy(10)
    pol.reset(5)
    for t in range(5):
        pol.insert(t, t)
    pol._outside.update({1: 10, 2: 11, 3: 12})  # rows its leader dropped, the newest last
    assert pol.victim(20, frozenset({3})) == 2  # 3 is pinned: set aside
    pol.remove(3)
    assert 3 not in pol
    assert pol.victim(21, frozenset()) == 2
    assert list(pol._outside) == [1, 2]


@pytest.mark.parametrize("make", [LRUPolicy, LFUPolicy, OPTPolicy, lambda: LearnedCachePolicy(10)],
                         ids=["lru", "lfu", "opt", "learned"])
def test_all_pinned_raises(make):
    pol = make()
    pol.reset(3)
    pol.observe(np.array([0, 1, 2, 0]), 0)
    for t, row in enumerate([0, 1, 2]):
        pol.insert(row, t)
    for pinned in ({0}, {1}, {0, 2}, {1, 2}):
        assert pol.victim(3, pinned) not in pinned
    with pytest.raises(RuntimeError, match=r"every one of the 3 fast-tier rows is pinned"):
        pol.victim(3, {0, 1, 2})
    with pytest.raises(RuntimeError, match="pinned"):
        pol.victim(3, set(range(10)))
    assert pol.victim(3) in {0, 1, 2}  # still works after the failure


# ---------------------------------------------------------------------------
# OPT fed a batch at a time
# ---------------------------------------------------------------------------

@settings(max_examples=100, derandomize=True, deadline=None)
@given(ids=traces(), capacity=capacities, sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8))
def test_opt_batch_by_batch_never_worse_than_lru(ids, capacity, sizes):
    arr = np.array(ids, dtype=np.int64)
    batched = serve_batches(arr, capacity, OPTPolicy(), sizes).sum()
    assert batched >= replay(arr, capacity, LRUPolicy()).sum()
    assert batched <= replay(arr, capacity, OPTPolicy()).sum()  # the full future can only help
    # The whole trace as one batch is the offline optimum.
    np.testing.assert_array_equal(serve_batches(arr, capacity, OPTPolicy(), [max(1, arr.size)]),
                                  replay(arr, capacity, OPTPolicy()))


def test_opt_rekeys_held_row_when_a_later_batch_uses_it():
    # 2 rows. Batch 1: 0 1 -- neither has a known next use, so both are keyed "never" (0 the older).
    # Batch 2: 2 0 -- observing it tells the policy 0 comes back at t=3, so 2 must evict 1, not 0.
    pol = OPTPolicy()
    pol.reset(2)
    pol.observe(np.array([0, 1]), 0)
    pol.insert(0, 0)
    pol.insert(1, 1)
    assert pol.victim(2) == 0  # before batch 2 is known: the one looked up longest ago
    pol.observe(np.array([2, 0]), 2)
    assert pol.victim(2) == 1  # re-keyed: 0 is used at t=3
    ids = np.array([0, 1, 2, 0])
    assert serve_batches(ids, 2, OPTPolicy(), [2]).tolist() == [False, False, False, True]
    assert replay(ids, 2, LRUPolicy()).tolist() == [False, False, False, False]


def test_opt_observe_overlap_and_gap():
    pol = OPTPolicy()
    pol.reset(2)
    pol.observe(np.array([0, 1, 0]), 0)
    pol.observe(np.array([1, 0]), 1)  # already known: ignored
    pol.observe(np.array([0, 5, 6]), 2)  # overlaps: only 5, 6 are new
    with pytest.raises(ValueError, match="from time 5"):
        pol.observe(np.array([1]), 7)
