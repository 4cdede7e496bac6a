"""The learned policy's guard: shadow caches, the choice of leader, and the real tier following it.

Shadows serve a batch exactly as replay() does and can say what they held
before it; the guard keeps the leader through close calls and hands over
only on a lead larger than its margin; the real fast tier, following a
leader, evicts only rows the leader does not hold. And the promise it all
serves: on random id arrays of several shapes, the learned policy stays
within 0.5 points of the best classical policy; with a prefetcher it never
fetches more on demand than without, on every trace kind.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.tiered_cache import (KINDS, LearnedCachePolicy, LearnedPrefetcher, make_trace,
                                             Trace, record_dlrm_trace, simulate)
from pymcoll.algorithms.tiered_cache.guard import Guard, Shadow, ShadowBatch
from pymcoll.algorithms.tiered_cache.policies import CLASSIC, ONLINE, replay

CI = bool(os.environ.get("CI"))


def zipf_ids(rng: np.random.Generator, rows: int, n: int, alpha: float) -> np.ndarray:
    w = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    return rng.choice(rows, size=n, p=w / w.sum())


# ---------------------------------------------------------------------------
# Shadows
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ONLINE)
def test_shadow_serves_as_replay_does(name):
    ids = zipf_ids(np.random.default_rng(1), 300, 5000, 0.9)
    want = replay(ids, 40, CLASSIC[name]())
    shadow = Shadow(name, CLASSIC[name]())
    shadow.reset(40)
    # A twin served lookup by lookup says what the shadow held before each lookup.
    twin = Shadow(name, CLASSIC[name]())
    twin.reset(40)
    rows = list(range(300))
    got, prev = [], None
    for t0 in range(0, ids.size, 700):
        b = ids[t0:t0 + 700]
        held = {}
        for k, row in enumerate(b.tolist()):
            if k in (0, 1, 350, b.size - 1):
                held[k] = [twin.holds(r) for r in rows]
            twin.run(np.array([row], dtype=np.int64), t0 + k)
        batch = shadow.run(b, t0)
        assert isinstance(batch, ShadowBatch) and batch.t0 == t0
        got.append(batch.hits)
        # Evictions happen only on misses once full, and name rows held then.
        assert np.all(batch.evicted[batch.hits] == -1)
        # What it held before the batch and before a lookup inside it, told from after the batch and
        # the batch's events.
        for k, want_held in held.items():
            assert shadow.held_before(rows, b, batch, k) == want_held, k
        # And a batch later, from the events of the batch served since.
        if prev is not None:
            for k, want_held in prev[2].items():
                assert shadow.held_before(rows, prev[0], prev[1], k, later=[(b, batch)]) == want_held, k
        prev = (b, batch, held)
    np.testing.assert_array_equal(np.concatenate(got), want)


# ---------------------------------------------------------------------------
# The choice of leader
# ---------------------------------------------------------------------------

def fake_batch(n: int, hits: int) -> ShadowBatch:
    h = np.zeros(n, dtype=bool)
    h[:hits] = True
    return ShadowBatch(0, h, np.full(n, -1, dtype=np.int64))


def steps(g: Guard, learned: int, a: int, b: int, served_by: str, times: int = 1) -> None:
    for _ in range(times):
        g.record({"learned": fake_batch(1000, learned), "a": fake_batch(1000, a), "b": fake_batch(1000, b)},
                 served_by)


def test_guard_keeps_its_leader_through_close_calls():
    shadows = {name: Shadow(name, CLASSIC["lru"]()) for name in ("learned", "a", "b")}
    g = Guard(shadows, "learned", half_life=1e12, margin=0.01, clip=0.05)  # no decay to speak of
    assert g.choose() == "learned"
    # a leads by 0.5 points: within the margin (1 point), so the preferred one keeps leading.
    steps(g, 500, 505, 400, "learned")
    assert g.choose() == "learned"
    # a leads by 5.5 points, counted as the clip's 5: a mean lead of 2.75 points, beyond the margin.
    steps(g, 500, 555, 400, "learned")
    assert g.choose() == "a"
    assert g.leads() == pytest.approx({"learned": -0.0275, "a": 0.0, "b": -0.05})
    # One step in which b is 40 points ahead of a counts as 5: b's mean lead stays below zero.
    steps(g, 500, 500, 900, "a")
    assert g.choose() == "a" and g.leads()["b"] == pytest.approx(-0.05 / 3)
    assert g.led == {"learned": 2000, "a": 1000, "b": 0}
    # A tie at the top goes to the preferred one.
    g.reset(10)
    g.leader = "a"
    steps(g, 900, 100, 900, "a")
    assert g.choose() == "learned"
    with pytest.raises(ValueError, match="preferred"):
        Guard(shadows, "c")
    with pytest.raises(ValueError, match="half_life"):
        Guard(shadows, "a", half_life=0)
    with pytest.raises(ValueError, match="margin"):
        Guard(shadows, "a", margin=1.0)
    with pytest.raises(ValueError, match="clip"):
        Guard(shadows, "a", clip=0.0)


def test_guard_forgets_the_past_by_its_half_life():
    shadows = {name: Shadow(name, CLASSIC["lru"]()) for name in ("learned", "a", "b")}
    # Steps of one half-life each: every step halves the weight of those before it.
    g = Guard(shadows, "learned", half_life=1000, margin=0.01, clip=0.05)
    steps(g, 500, 550, 450, "learned", times=5)
    assert g.choose() == "a"
    # b is 4 points ahead of a from now on: one step does not outweigh the past (lead -0.4 points),
    # two do (+1.8 points).
    steps(g, 500, 500, 540, "a")
    assert g.choose() == "a"
    steps(g, 500, 500, 540, "a")
    assert g.choose() == "b"


def test_guard_stops_following_a_preferred_shadow_whose_stints_lose():
    # The preferred shadow swings: 10 points ahead of a on one step, 20 behind on the next. Following
    # whoever was ahead on the last steps serves it on its bad steps; once a stint lost hits, it must
    # lead the slower comparison too, and does so only after a lasting lead.
    def alternate(slow):
        shadows = {name: Shadow(name, CLASSIC["lru"]()) for name in ("learned", "a", "b")}
        g = Guard(shadows, "learned", half_life=1000, margin=0.01, clip=0.05, slow=slow)
        steps(g, 400, 500, 0, "learned", times=3)
        assert g.choose() == "a"
        served, leaders = 0, []
        for k in range(20):
            hits = 600 if k % 2 == 0 else 300
            served += hits if g.leader == "learned" else 500
            steps(g, hits, 500, 0, g.leader)
            leaders.append(g.choose())
        return g, served, leaders

    g, served, leaders = alternate(None)
    assert leaders.count("learned") == 9 and served == 8200 and g.stints == 0.0  # led into each bad step
    g, served, leaders = alternate(4.0)
    assert leaders == ["a", "a", "learned"] + ["a"] * 17 and served == 9800 and g.stints < 0
    # A lasting lead still hands it the lead, once the slower comparison sees it: after two steps
    # here, where one would do without the check.
    taken = None
    for k in range(12):
        steps(g, 600, 500, 0, g.leader)
        if g.choose() == "learned" and taken is None:
            taken = k
    assert taken == 1
    with pytest.raises(ValueError, match="slow"):
        Guard(g.shadows, "a", slow=0.5)
    with pytest.raises(ValueError, match="guard_slow"):
        LearnedCachePolicy(10, guard_slow=0.0)


def test_first_training_hands_the_lead_to_the_best_classical_shadow():
    shadows = {name: Shadow(name, CLASSIC["lru"]()) for name in ("learned", "a", "b")}
    g = Guard(shadows, "learned", half_life=1e12, margin=0.005)
    steps(g, 520, 500, 510, "learned")
    # The preferred shadow's record is not its own yet: the one closest to it leads, whatever the margin.
    g.hand_lead_to_best_rival()
    assert g.leader == "b"
    # It takes the lead back by the margin rule, as any rival would.
    steps(g, 520, 500, 510, "b")
    assert g.choose() == "learned"
    # A classical leader stays where it is.
    g.leader = "a"
    g.hand_lead_to_best_rival()
    assert g.leader == "a"


def test_training_starts_the_guarded_policy_from_a_classical_leader():
    rng = np.random.default_rng(5)
    ids = zipf_ids(rng, 2000, 20000, 0.9)
    # A margin no rival passes: the untrained model's order (LRU's) leads until the training.
    pol = LearnedCachePolicy(2000, guard_margin=0.9)
    pol.reset(100)
    for t0 in range(0, 8192, 1024):
        pol.observe(ids[t0:t0 + 1024], t0)
    assert pol.guard.leader == "learned"
    pol.train()
    assert pol.guard.leader in ONLINE
    # A second training does not move the lead: by then the model's record is its own.
    pol.guard.leader = "learned"
    pol.train()
    assert pol.guard.leader == "learned"


def test_simulate_reports_the_leaders_followed():
    # LFU beats the untrained model's order (LRU's) on a fixed Zipf popularity: the guard changes leader.
    ids = zipf_ids(np.random.default_rng(4), 4000, 60000, 0.9)
    r = simulate(ids, 200, "learned")
    assert r.leaders[0] == (0, "learned") and len(r.leaders) >= 2
    starts = [t for t, _ in r.leaders]
    assert starts == sorted(set(starts)) and set(starts) <= set(step_starts(ids, 256, 4096))
    assert all(a != b for (_, a), (_, b) in zip(r.leaders, r.leaders[1:]))
    assert {name for _, name in r.leaders} <= {"learned", *ONLINE}
    # Counted from the stretches, the scored lookups served under classical leaders are guard_share's.
    warm_end = int(ids.size * 0.2)
    first_scored = -(-warm_end // 2048) * 2048
    ends = starts[1:] + [ids.size]
    followed = sum(max(0, end - max(start, first_scored))
                   for (start, name), end in zip(r.leaders, ends, strict=True) if name != "learned")
    assert followed == pytest.approx(r.guard_share * (ids.size - warm_end))
    assert r.to_dict()["leaders"] == r.leaders
    assert simulate(ids, 200, "lfu").leaders == []


def step_starts(ids: np.ndarray, step: int, step_max: int) -> list[int]:
    """Where the guard's steps begin: a step is at least `step` lookups and ends at the first lookup
    after that whose id is not above the one before, or after `step_max` lookups."""
    starts = [0]
    while True:
        k, last = starts[-1] + step, min(starts[-1] + step_max, ids.size)
        while k < last and ids[k] > ids[k - 1]:
            k += 1
        if k >= ids.size:
            return starts
        starts.append(k)


@pytest.mark.parametrize("batch", [None, 500])
def test_guard_steps_end_where_the_ids_stop_rising(batch):
    # Deduplicated, sorted batches (here of 700 and 90 rows) are compared whole: each step covers
    # whole batches, across the simulator's batches too; a stream that never stops rising is cut at
    # guard_step_max lookups.
    rng = np.random.default_rng(2)
    sorted_batches = [np.concatenate([np.sort(rng.choice(3000, size=per, replace=False)) for _ in range(n)])
                      for per, n in ((700, 20), (90, 120))]
    rising = np.arange(9000, dtype=np.int64)
    for ids, expect in ((sorted_batches[0], list(range(0, 14000, 700))),
                        (sorted_batches[1], list(range(0, 10800, 270))),
                        (rising, list(range(0, 9000, 1000)))):
        pol = LearnedCachePolicy(9000, guard_step=256, guard_step_max=1000)
        pol.guard.trail = []
        simulate(ids if batch is None else Trace(ids, n_rows=9000, batch_size=batch), 100, pol)
        assert expect == step_starts(ids, 256, 1000)
        # The trail holds the steps closed; the last one may still be open when the stream ends.
        closed = [t for t, _, _, _ in pol.guard.trail]
        assert closed == expect[:len(closed)] and len(closed) == len(expect) - bool(pol.guard.open_lookups)
        assert sum(n for _, n, _, _ in pol.guard.trail) + pol.guard.open_lookups == ids.size


def test_an_empty_batch_changes_nothing():
    # A lookup of no ids (an empty batch of a user's) leaves the steps and the leader as they were.
    ids = zipf_ids(np.random.default_rng(8), 2000, 12000, 0.9)

    def run(empty_at):
        pol = LearnedCachePolicy(2000, guard_step=64)
        pol.reset(100)
        hits = 0
        for t0 in range(0, ids.size, 1000):
            if t0 == empty_at:
                pol.observe(ids[:0], t0)
            pol.observe(ids[t0:t0 + 1000], t0)
            if t0 == 2000:
                pol.train()
            for t, row in enumerate(ids[t0:t0 + 1000].tolist(), start=t0):
                if row in pol:
                    pol.hit(row, t)
                    hits += 1
                else:
                    if len(pol) >= 100:
                        pol.remove(pol.victim(t))
                    pol.insert(row, t)
        return hits, pol.guard.changes

    assert run(5000) == run(None)


def test_guard_trail_records_each_step_as_served():
    # The trail (for offline replays of leader rules) holds every batch's hits per shadow, equal to
    # each classical policy replayed alone, and the leader that served it.
    ids = zipf_ids(np.random.default_rng(5), 3000, 30000, 0.9)
    pol = LearnedCachePolicy(3000)
    pol.guard.trail = []
    r = simulate(ids, 150, pol)
    trail = pol.guard.trail
    assert [t for t, _, _, _ in trail] == step_starts(ids, 256, 4096)[:-1]  # the last step is open
    covered = sum(n for _, n, _, _ in trail)
    assert covered + pol.guard.open_lookups == ids.size
    hits = np.stack([h for _, _, h, _ in trail])
    for name in ("lru", "lfu"):
        alone = replay(ids, 150, CLASSIC[name]())
        assert hits[:, pol.guard.names.index(name)].sum() == alone[:covered].sum(), name
    served = [s for _, _, _, s in trail]
    stretches = [(t, s) for (t, _, _, s), prev in zip(trail, [None] + served) if s != prev]
    assert stretches == r.leaders
    assert Guard({"a": Shadow("a", CLASSIC["lru"]())}, "a").trail is None  # off unless asked for


def test_offline_replay_of_the_code_rule_gives_the_leaders_served():
    # perf/replay_guard_rules.py scores leader rules on recorded trails; its copy of the rule in
    # the code must pick the leaders the simulator served, step for step.
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "perf" / "replay_guard_rules.py"
    spec = importlib.util.spec_from_file_location("replay_guard_rules", path)
    replay_rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay_rules)
    for shape, share in (("zipf-drift", 0.05), ("bursts", 0.1)):
        case = replay_rules.record_case(shaped_ids(shape, 3), share, "arrays", f"{shape}/3")
        served = [case["names"].index(name) for name in case["served"]]
        assert replay_rules.RULES[replay_rules.CODE](case) == served, shape
        assert len(set(served)) >= 2, shape  # the replay had a change of leader to reproduce
        for rule in replay_rules.RULES.values():
            leaders = rule(case)
            assert len(leaders) == len(case["sizes"]) and set(leaders) <= set(range(len(case["names"])))
    with pytest.raises(SystemExit):
        replay_rules.main([])


# ---------------------------------------------------------------------------
# The real tier following the leader
# ---------------------------------------------------------------------------

def serve(ids: np.ndarray, capacity: int, pol: LearnedCachePolicy, batch: int = 1024,
          check_follow: bool = True, after_batch: Optional[Callable[[int], None]] = None) -> np.ndarray:
    """Serve `ids` batch by batch; on every eviction check that the victim is not in the leader's shadow
    (or waits in the scan filter's probation);
    `after_batch(t0)` runs once each batch is served."""
    pol.reset(capacity)
    hits = np.zeros(ids.size, dtype=bool)
    for t0 in range(0, ids.size, batch):
        b = ids[t0:t0 + batch]
        pol.observe(b, t0)
        for t, row in enumerate(b.tolist(), start=t0):
            if row in pol:
                pol.hit(row, t)
                hits[t] = True
            else:
                if len(pol) >= capacity:
                    v = pol.victim(t)
                    if check_follow:  # a row the leader dropped, or one that came in during a scan
                        in_scan = pol.scan is not None and v in pol.scan.probation
                        assert v in pol._outside or in_scan, "evicted a row the leader holds"
                    pol.remove(v)
                pol.insert(row, t)
        if after_batch is not None:
            after_batch(t0)
    return hits


def serve_tracking(seed: int, capacity: int, batch: int, step: int, margin: float) -> LearnedCachePolicy:
    """Serve a stream whose best policy changes; after every batch, a row the real tier holds is
    marked outside the leader's contents exactly when the leader's shadow does not hold it."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([zipf_ids(rng, 120, 600, 0.9), rng.integers(120, 400, size=200),
                          zipf_ids(rng, 120, 600, 0.9) + 200])
    pol = LearnedCachePolicy(400, guard_step=step, guard_margin=margin, guard_half_life=64)

    def marks_match(t0: int) -> None:
        pol._apply_all()
        leader = pol.guard.shadows[pol.leader]
        for row in pol._key:
            assert (row in pol._outside) == (not leader.holds(row)), (t0, row, pol.leader)

    serve(ids, capacity, pol, batch, after_batch=marks_match)
    return pol


@settings(max_examples=15 if CI else 30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), capacity=st.integers(2, 40), batch=st.integers(16, 300),
       step=st.integers(1, 120), margin=st.sampled_from([0.0, 0.0025, 0.01]))
def test_real_tier_tracks_its_leader_through_changes_inside_batches(seed, capacity, batch, step, margin):
    # Whatever the batch and step sizes: the mark a change of leader inside a batch sets from what
    # the new leader held at that lookup, and the leader's events keep it right.
    serve_tracking(seed, capacity, batch, step, margin)


def test_leaders_change_inside_batches():
    pol = serve_tracking(0, 20, 100, 7, 0.0025)
    assert any(t % 100 for t, _ in pol.guard.changes[1:]), pol.guard.changes


@pytest.mark.parametrize("name", ["lru", "lfu", "arc", "learned"])
def test_victims_are_the_victims_one_at_a_time(name):
    # victims(t, k) names in one pass what k calls of victim() with a growing pin set name.
    ids = zipf_ids(np.random.default_rng(8), 600, 6000, 0.9)
    pol = LearnedCachePolicy(600, prefetch_grace=50) if name == "learned" else CLASSIC[name]()
    if name == "learned":
        serve(ids, 80, pol, batch=512, check_follow=False)
        pol.insert(599, ids.size, prefetched=True)  # held unused, past its grace by the time asked
        pol.remove(pol.victim(ids.size, {599}))
    else:
        replay(ids, 80, pol)  # leaves the policy holding what it served
    t = ids.size + 100
    for k in (1, 7, 40, 80, 200):
        pinned: set[int] = set()
        one_by_one = []
        while len(one_by_one) < k and len(pinned) < len(pol):
            one_by_one.append(pol.victim(t, pinned))
            pinned.add(one_by_one[-1])
        assert pol.victims(t, k) == one_by_one, (name, k)
    assert len(pol) == 80  # nothing removed


def test_untrained_guarded_policy_follows_the_best_shadow():
    # A fixed Zipf popularity: LFU beats LRU (the untrained model's order) by far; the guard hands the
    # real tier to a frequency policy and it ends within a point of the best classical policy.
    rng = np.random.default_rng(4)
    ids = zipf_ids(rng, 4000, 60000, 0.9)
    pol = LearnedCachePolicy(4000)
    hits = serve(ids, 200, pol)
    best = max(replay(ids, 200, CLASSIC[name]())[30000:].mean() for name in ONLINE)
    assert pol.leader != "learned" and sum(v for k, v in pol.guard.led.items() if k != "learned") > 30000
    assert hits[30000:].mean() >= best - 0.01
    # Unguarded, it is the model's order alone (LRU, untrained): clearly worse here.
    plain = serve(ids, 200, LearnedCachePolicy(4000, guard=False), check_follow=False)
    assert plain[30000:].mean() < best - 0.02


def test_prefetched_rows_stay_until_their_grace_ends():
    pol = LearnedCachePolicy(100, prefetch_grace=5, guard=False, scan_run=None)  # 0..9 would be a scan
    serve(np.arange(10, dtype=np.int64), 4, pol, check_follow=False)  # holds 6..9, as its shadow does
    pol.remove(pol.victim(10))  # row 6, the oldest
    pol.insert(50, 10, prefetched=True)
    assert 50 in pol and 6 not in pol
    # Within its grace the unused prefetched row ranks by the model's order (untrained: LRU, as if looked
    # up at 10), so the oldest row goes; past it, it goes first.
    assert pol.victim(12) == 7
    assert pol.victim(16) == 50
    pol.hit(50, 16)  # used: an ordinary row from now on
    assert pol.victim(30) == 7
    with pytest.raises(ValueError, match="prefetch_grace"):
        LearnedCachePolicy(10, prefetch_grace=-1)
    with pytest.raises(ValueError, match="experts"):
        LearnedCachePolicy(10, experts=("opt",))
    with pytest.raises(ValueError, match="guard_step"):
        LearnedCachePolicy(10, guard_step=0)
    with pytest.raises(ValueError, match="guard_step_max must be at least guard_step"):
        LearnedCachePolicy(10, guard_step=64, guard_step_max=32)
    with pytest.raises(ValueError, match="guard_half_life"):
        LearnedCachePolicy(10, guard_half_life=0.5)


# ---------------------------------------------------------------------------
# Never far below the best classical policy, on any id array
# ---------------------------------------------------------------------------

def shaped_ids(shape: str, seed: int, n: int = 40000, rows: int = 6000) -> np.ndarray:
    """Random id arrays of several shapes (not the generators of make_trace)."""
    rng = np.random.default_rng([seed, len(shape)])
    if shape == "zipf-drift":
        ranks = zipf_ids(rng, rows, n, float(rng.uniform(0.7, 1.2)))
        shift = (np.arange(n) // int(rng.integers(2000, 10000))) * int(rng.integers(50, 400))
        return (ranks + shift) % rows
    if shape == "scans":
        hot = zipf_ids(rng, rows // 10, n, 0.9)
        out = hot.copy()
        length = int(rng.integers(100, 800))
        for start in rng.integers(0, n - length, size=int(0.3 * n / length)):
            out[start:start + length] = rows // 10 + int(rng.integers(0, rows // 2)) + np.arange(length)
        return out
    if shape == "bursts":
        out = zipf_ids(rng, rows, n, 0.6)
        burst = int(rng.integers(20, 200))
        for start in rng.integers(0, n - 4 * burst, size=n // (8 * burst)):
            rows_b = rng.integers(0, rows, size=burst // 4 + 1)
            out[start:start + 4 * burst] = rng.choice(rows_b, size=4 * burst)
        return out
    if shape == "sorted-batches":
        # Batches deduplicated and sorted before the lookup, over ids numbered by popularity (as a
        # vocabulary ordered by frequency): every batch walks from the hottest rows to the coldest.
        per = int(rng.integers(300, 2000))
        w = np.arange(1, rows + 1, dtype=np.float64) ** -float(rng.uniform(0.7, 1.1))
        parts = [np.sort(rng.choice(rows, size=per, replace=False, p=w / w.sum())) for _ in range(n // per + 1)]
        return np.concatenate(parts)[:n]
    return rng.integers(0, rows, size=n)  # uniform


SHAPES = ("zipf-drift", "scans", "bursts", "uniform")
#: Shapes where the learned policy is known to trail the best classical policy by more than half a
#: point (perf/studies/tiered_cache.md); perf/sweep_guard_arrays.py measures them with the others.
OPEN_SHAPES = ("sorted-batches",)


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=2 if CI else 3, derandomize=True, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), share=st.sampled_from([0.02, 0.05, 0.1]))
def test_learned_within_half_a_point_of_the_best_classical(shape, seed, share):
    ids = shaped_ids(shape, seed)
    learned = simulate(ids, share, "learned").hit_rate
    best = max(simulate(ids, share, name).hit_rate for name in ONLINE)
    assert learned >= best - 0.005, (shape, seed, share, learned, best)


@pytest.mark.parametrize("seed, share", [(30, 0.05), (38, 0.1)])
def test_sorted_batches_that_fell_furthest_behind(seed, share):
    # With steps cut every 256 lookups the guard compared the heads of sorted batches with their
    # tails and fell 5.9 and 5.6 points below the best classical policy on these two arrays.
    ids = shaped_ids("sorted-batches", seed)
    learned = simulate(ids, share, "learned").hit_rate
    best = max(simulate(ids, share, name).hit_rate for name in ONLINE)
    assert learned >= best - 0.005, (seed, share, learned, best)


# ---------------------------------------------------------------------------
# Prefetching that pays or stays off
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(KINDS) + ["dlrm"])
def test_prefetching_never_adds_on_demand_fetches(kind):
    if kind == "dlrm":
        trace = record_dlrm_trace(8000, 24)
    else:
        trace = make_trace(8000, kind, seed=1, n_lookups=48000)
    plain = simulate(trace, 0.05, "learned")
    with_pf = simulate(trace, 0.05, "learned+prefetch")
    assert with_pf.on_demand_fetches <= plain.on_demand_fetches, (kind, with_pf, plain)
    assert 0.0 <= with_pf.prefetch_on_share <= 1.0 and plain.prefetch_on_share == 0.0
    assert 0.0 <= plain.guard_share <= 1.0 and plain.guard_us_per_lookup > 0


def test_prefetcher_turns_off_when_its_evictions_cost_more_than_it_saves():
    # Trained to always predict (no threshold to meet). First its predictions are right and cost nothing:
    # once enough are scored it turns on. Then half are right but every row its prefetches evicted comes
    # back at once: the break-even rises above its precision and it turns off.
    pf = LearnedPrefetcher(1000, window=64, min_precision=0.0, min_support=1, min_checked=4, decay=0.9)
    rng = np.random.default_rng(0)
    group = [7, 14, 21, 28]
    parts = []
    for _ in range(30):
        parts += [rng.integers(100, 300, 300), np.array(group + group)]
    pf.train(np.concatenate(parts).astype(np.int64), 16)
    assert np.isfinite(pf.threshold)
    t = 20000
    on = []
    for k in range(24):
        pf.predict(np.array([group[0]], dtype=np.int64), t)
        on.append(pf.on)
        t += 1
        costly = k >= 8
        if costly:
            pf.evicted(np.array([900 + k]), t)  # the slot its prefetch took
        follow = ([900 + k] if costly else []) + ([group[1]] if not costly or k % 2 == 0 else [])
        pf.predict(np.array(follow, dtype=np.int64), t)
        t += 200
    assert not on[0] and any(on[:8]) and not on[-1]
    assert pf.running_cost > pf.running_precision and pf.break_even == pf.running_cost
    assert pf.batches == 48 and 0 < pf.on_batches < 48
