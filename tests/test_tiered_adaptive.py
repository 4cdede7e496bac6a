"""The adaptive classical policies (ARC, LeCaR, W-TinyLFU) against plain reference replays.

Each reference below follows the published description step by step on
plain lists, scanning them at every eviction; the policies, behind the fast
tier's interface, must hit and miss exactly where the references do, never
evict a pinned row, and keep their bookkeeping within its bounds.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.tiered_cache.policies import (CLASSIC, ONLINE, ARCPolicy, LeCaRPolicy, LRUPolicy,
                                                      TinyLFUPolicy, replay)


@st.composite
def streams(draw, max_rows: int = 40, max_size: int = 400) -> np.ndarray:
    """Short shrinkable lists, or longer Zipf-skewed draws over a random number of rows."""
    if draw(st.booleans()):
        return np.array(draw(st.lists(st.integers(0, 11), max_size=60)), dtype=np.int64)
    rows = draw(st.integers(1, max_rows))
    n = draw(st.integers(max_size // 4, max_size))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = np.arange(1, rows + 1, dtype=np.float64) ** -draw(st.sampled_from([0.0, 0.8, 1.4]))
    return rng.choice(rows, size=n, p=w / w.sum()).astype(np.int64)


# ---------------------------------------------------------------------------
# References, step by step from the published descriptions
# ---------------------------------------------------------------------------

def ref_arc(ids, c: int) -> list[bool]:
    """ARC (Megiddo and Modha, 2003): lists T1, T2 (held), B1, B2 (remembered), least recent first."""
    t1: list[int] = []
    t2: list[int] = []
    b1: list[int] = []
    b2: list[int] = []
    p = 0.0
    out = []

    def replace(x: int) -> None:
        if t1 and ((x in b2 and len(t1) == p) or len(t1) > p):
            b1.append(t1.pop(0))
        else:
            b2.append(t2.pop(0))

    for x in ids:
        if x in t1 or x in t2:
            (t1 if x in t1 else t2).remove(x)
            t2.append(x)
            out.append(True)
            continue
        out.append(False)
        if x in b1:
            p = min(c, p + max(1.0, len(b2) / len(b1)))
            replace(x)
            b1.remove(x)
            t2.append(x)
        elif x in b2:
            p = max(0.0, p - max(1.0, len(b1) / len(b2)))
            replace(x)
            b2.remove(x)
            t2.append(x)
        else:
            l1 = len(t1) + len(b1)
            total = l1 + len(t2) + len(b2)
            if l1 == c:
                if len(t1) < c:
                    b1.pop(0)
                    replace(x)
                else:
                    t1.pop(0)
            elif total >= c:
                if total == 2 * c:
                    b2.pop(0)
                replace(x)
            t1.append(x)
        assert len(t1) + len(b1) <= c and len(t1) + len(t2) + len(b1) + len(b2) <= 2 * c
    return out


def ref_lecar(ids, c: int, learning_rate: float = 0.45, seed: int = 0) -> list[bool]:
    """LeCaR (Vietri et al., 2018): one random draw per eviction picks LRU's or LFU's victim."""
    last: dict[int, int] = {}
    count: dict[int, int] = {}
    held: set[int] = set()
    history = {"lru": OrderedDict(), "lfu": OrderedDict()}
    w_lru, rng, d = 0.5, random.Random(seed), 0.005 ** (1.0 / c)
    out = []
    for t, x in enumerate(ids):
        count[x] = count.get(x, 0) + 1
        if x in held:
            last[x] = t
            out.append(True)
            continue
        out.append(False)
        for name, h in history.items():
            if x in h:
                penalty = math.exp(-learning_rate * d ** (t - h.pop(x)))
                a, b = (w_lru * penalty, 1 - w_lru) if name == "lru" else (w_lru, (1 - w_lru) * penalty)
                w_lru = a / (a + b)
        if len(held) >= c:
            expert = "lru" if rng.random() < w_lru else "lfu"
            if expert == "lru":
                v = min(held, key=lambda r: last[r])
            else:
                v = min(held, key=lambda r: (count[r], last[r]))
            held.remove(v)
            history[expert][v] = t
            if len(history[expert]) > c:
                history[expert].popitem(last=False)
        held.add(x)
        last[x] = t
    return out


def ref_tinylfu(ids, c: int, window: float = 0.01, sample=None) -> list[bool]:
    """W-TinyLFU in front of LRU: a window LRU, a main LRU, admission by (exact, aged) frequency."""
    w = max(1, int(round(window * c)))
    sample = sample or 10 * c
    win: list[int] = []
    main: list[int] = []
    freq: dict[int, int] = {}
    counted = 0
    out = []

    def count(x: int) -> None:
        nonlocal freq, counted
        freq[x] = freq.get(x, 0) + 1
        counted += 1
        if counted >= sample:
            freq = {r: f // 2 for r, f in freq.items() if f // 2}
            counted = 0

    for x in ids:
        if x in win or x in main:
            count(x)
            held = win if x in win else main
            held.remove(x)
            held.append(x)
            out.append(True)
            continue
        out.append(False)
        if len(win) + len(main) >= c:
            if len(win) >= w and main:
                cand, loser = win[0], main[0]
                if freq.get(cand, 0) > freq.get(loser, 0):
                    main.remove(loser)
                    win.remove(cand)
                    main.append(cand)
                else:
                    win.remove(cand)
            elif main:
                main.pop(0)
            else:
                win.pop(0)
        count(x)
        win.append(x)
        while len(win) > w and len(win) + len(main) <= c:
            main.append(win.pop(0))
    return out


# ---------------------------------------------------------------------------
# Hit/miss sequences against the references
# ---------------------------------------------------------------------------

REFERENCES = {"arc": lambda ids, c: ref_arc(ids, c), "lecar": lambda ids, c: ref_lecar(ids, c),
              "tinylfu": lambda ids, c: ref_tinylfu(ids, c)}


@settings(max_examples=80, derandomize=True, deadline=None)
@given(ids=streams(), capacity=st.integers(1, 12))
def test_adaptive_policies_match_reference(ids, capacity):
    for name, ref in REFERENCES.items():
        got = replay(ids, capacity, CLASSIC[name]())
        np.testing.assert_array_equal(got, np.array(ref(ids.tolist(), capacity), dtype=bool), err_msg=name)


def test_tinylfu_window_and_ageing_match_reference():
    # A larger capacity (a window of several rows) and a short sample (frequent halving).
    rng = np.random.default_rng(11)
    ids = rng.choice(300, size=6000, p=np.arange(1, 301) ** -1.0 / np.sum(np.arange(1, 301) ** -1.0))
    for capacity, sample in ((200, None), (120, 97)):
        got = replay(ids, capacity, TinyLFUPolicy(window=0.05, sample=sample))
        want = ref_tinylfu(ids.tolist(), capacity, window=0.05, sample=sample)
        np.testing.assert_array_equal(got, np.array(want, dtype=bool))


def test_lecar_weights_move_against_the_expert_that_errs():
    # A scan through more rows than fit, repeated: LRU evicts each row just before it comes back, so its
    # mistakes show up in its history and its weight falls; LFU's ties fall to the oldest too, but a hot row
    # looked up between scans keeps its count.
    ids = np.array([r for _ in range(30) for r in list(range(1, 9)) + [0, 0]], dtype=np.int64)
    pol = LeCaRPolicy(seed=3)
    replay(ids, 6, pol)
    assert 0.0 < pol.w_lru < 0.5
    assert all(len(h) <= 6 for h in pol.history.values())
    with pytest.raises(ValueError, match="learning_rate"):
        LeCaRPolicy(learning_rate=0)


def test_arc_adapts_to_a_scan_where_lru_fails():
    # A hot set of 4 rows looked up between scans of new rows: LRU loses the hot rows to every scan, ARC
    # keeps them in T2 (looked up twice) while scans pass through T1.
    ids, fresh = [], 100
    for _ in range(40):
        ids += [0, 1, 2, 3, 0, 1, 2, 3]
        ids += list(range(fresh, fresh + 6))
        fresh += 6
    ids = np.array(ids, dtype=np.int64)
    arc, lru = replay(ids, 8, ARCPolicy()).sum(), replay(ids, 8, LRUPolicy()).sum()
    assert arc > lru
    pol = ARCPolicy()
    replay(ids, 8, pol)
    assert len(pol.t1) + len(pol.b1) <= 8 and len(pol) + len(pol.b1) + len(pol.b2) <= 16
    assert 0.0 <= pol.p <= 8


@pytest.mark.parametrize("name", ["arc", "lecar", "tinylfu"])
def test_adaptive_victims_skip_pinned_rows(name):
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 20, 400)
    pol = CLASSIC[name]()
    pol.reset(6)
    pol.observe(ids, 0)
    for t, row in enumerate(ids.tolist()):
        if row in pol:
            pol.hit(row, t)
            continue
        if len(pol) >= 6:
            held = [r for r in range(20) if r in pol]
            pinned = set(rng.choice(held, size=int(rng.integers(0, 6)), replace=False).tolist())
            v = pol.victim(t, pinned)
            assert v in pol and v not in pinned
            pol.remove(v)
        pol.insert(row, t)
        assert len(pol) <= 6
    held = [r for r in range(20) if r in pol]
    with pytest.raises(RuntimeError, match="pinned"):
        pol.victim(len(ids), set(held))


def test_online_names_and_arguments():
    assert set(ONLINE) == set(CLASSIC) - {"opt"}
    with pytest.raises(ValueError, match="window"):
        TinyLFUPolicy(window=0.0)
    with pytest.raises(ValueError, match="sample"):
        TinyLFUPolicy(sample=0)
    # Without observe() ARC and LeCaR still work (a miss then counts as one on a row in no list).
    for name in ("arc", "lecar"):
        pol = CLASSIC[name]()
        pol.reset(2)
        for t, row in enumerate([1, 2, 3, 1]):
            if row not in pol:
                if len(pol) >= 2:
                    pol.remove(pol.victim(t))
                pol.insert(row, t)
        assert len(pol) == 2
