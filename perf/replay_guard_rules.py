#!/usr/bin/env python3
"""Replay rules for the learned policy's guard offline, on recorded shadow hits.

Every shadow of the guard serves the stream on its own contents, so the hits a
guard would collect by following any sequence of leaders can be added up from
the shadows' hits per step (the guard chooses a leader at each step: 256 lookups or more, ending where
the ids stop rising),
without serving the stream again. This script
records those hits once per case (``simulate(..., "learned")`` with the
guard's ``trail`` on) and then scores leader rules against the best classical
policy of each case:

    python perf/replay_guard_rules.py --record /tmp/guard_trails.npz            # 84 cases + hold-out + arrays
    python perf/replay_guard_rules.py --trails /tmp/guard_trails.npz            # every rule below, table

Cases: the six generated kinds and the DLRM ids for seeds 0-2 at 1, 5, 10 and
20% (the 84 cases of bench_tiered_cache.py), a hold-out of seeds 3-7 for
"scan", "stack", "drift", "mixed" and "bursty", and the property test's
random id arrays (``shaped_ids`` of tests/test_tiered_guard.py, 4 shapes x
24 seeds x 2, 5, 10%). Scores count the steps from the batch where the model
is trained (the first at or after the 20% warm-up), so a case's classical
hit rates here differ from simulate()'s by the part of one batch. A change
of leader is charged ``--switch-cost`` x capacity hits: the real tier's misses
while it converges to the new leader's contents (the recorded runs put the
median at about 1% of the capacity and the worst tenth at 3-9%).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

HERE = Path(__file__).resolve().parent
CAPS = (0.01, 0.05, 0.10, 0.20)
ARRAY_CAPS = (0.02, 0.05, 0.10)
GENERATED = ("irm", "bursty", "mixed", "stack", "drift", "scan", "dlrm")
HOLD_OUT = ("scan", "stack", "drift", "mixed", "bursty")
TOLERANCE = 0.005
WARMUP = 0.2  # the share of each trace served unscored (the model trains on it)

Rule = Callable[[dict], list[int]]


# --------------------------------------------------------------------------- recording

def record_case(ids_or_trace, cap: float, group: str, label: str) -> dict:
    """One case: the guard's trail of simulate(..., "learned")."""
    from pymcoll.algorithms.tiered_cache import simulate
    from pymcoll.algorithms.tiered_cache.learned import LearnedCachePolicy
    from pymcoll.algorithms.tiered_cache.traces import Trace

    trace = ids_or_trace if isinstance(ids_or_trace, Trace) else Trace(
        np.asarray(ids_or_trace), n_rows=int(np.max(ids_or_trace)) + 1)
    pol = LearnedCachePolicy(trace.n_rows)
    pol.guard.trail = []
    res = simulate(trace, cap, pol, warmup=WARMUP)
    trail = pol.guard.trail
    warm = int(len(trace.ids) * WARMUP)
    trained_at = min((t0 for t0, _ in trace.batches() if t0 >= warm), default=len(trace.ids))
    return {"group": group, "label": label, "cap": cap, "capacity": res.capacity, "trained_at": trained_at,
            "names": list(pol.guard.names), "t0": np.array([t for t, _, _, _ in trail]),
            "sizes": np.array([n for _, n, _, _ in trail]), "hits": np.stack([h for _, _, h, _ in trail]),
            "served": [s for _, _, _, s in trail], "learned": res.hit_rate}


def record(path: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from test_tiered_guard import SHAPES, shaped_ids

    from pymcoll.algorithms.tiered_cache import make_trace, record_dlrm_trace

    plan: list[tuple[str, str, Callable[[], object], tuple[float, ...]]] = []
    for seed in (0, 1, 2):
        for kind in GENERATED:
            make = (lambda s=seed: record_dlrm_trace(50_000, 200, seed=s)) if kind == "dlrm" else \
                (lambda k=kind, s=seed: make_trace(50_000, k, s))
            plan.append(("cases", f"{kind}/{seed}", make, CAPS))
    for seed in range(3, 8):
        for kind in HOLD_OUT:
            plan.append(("hold-out", f"{kind}/{seed}", lambda k=kind, s=seed: make_trace(50_000, k, s), CAPS))
    for shape in SHAPES:
        for seed in range(24):
            plan.append(("arrays", f"{shape}/{seed}", lambda h=shape, s=seed: shaped_ids(h, s), ARRAY_CAPS))
    cases, started = [], time.time()
    for i, (group, label, make, caps) in enumerate(plan):
        source = make()
        for cap in caps:
            cases.append(record_case(source, cap, group, label))
        print(f"[{i + 1}/{len(plan)}] {group} {label} ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    np.savez_compressed(path, cases=np.array(cases, dtype=object))
    print(f"wrote {len(cases)} cases to {path}")


def load(path: Path) -> list[dict]:
    return list(np.load(path, allow_pickle=True)["cases"])


# --------------------------------------------------------------------------- rules

def first_trained(c: dict) -> int:
    """The step at which the model is trained (the first of the first batch at or after the warm-up)."""
    return int(np.argmax(c["t0"] >= c["trained_at"]))


class Window:
    """Hits of each shadow over the last `span` lookups (whole batches)."""

    def __init__(self, k: int, span: int) -> None:
        self.span, self.sums, self.n, self.parts = span, np.zeros(k), 0, []

    def add(self, n: int, hits: np.ndarray) -> None:
        self.parts.append((n, hits))
        self.sums = self.sums + hits
        self.n += n
        while self.n - self.parts[0][0] >= self.span:
            old_n, old = self.parts.pop(0)
            self.n -= old_n
            self.sums = self.sums - old


def window_choice(window: Window, leader: int, model: int, margin: float) -> int:
    """The code's choice: the window's best shadow (the model's order on a tie) takes over when it
    is ahead of the leader by `margin` of the window's lookups."""
    top = int(np.argmax(window.sums))
    if window.sums[top] == window.sums[model]:
        top = model
    return top if window.sums[top] - window.sums[leader] > margin * window.n else leader


def warm_up_leaders(c: dict, window: Window, margin: float, out: list[int]) -> int:
    """The code's rule through the warm-up (the untrained order is the preferred shadow), then the
    hand-over of its lead to the best classical shadow of the window. Returns the leader at training."""
    names, hits, sizes = c["names"], c["hits"], c["sizes"]
    model = names.index("learned")
    leader = model
    for b in range(first_trained(c)):
        if b:
            leader = window_choice(window, leader, model, margin)
        out.append(leader)
        window.add(int(sizes[b]), hits[b])
    if leader == model:
        rivals = [i for i in range(len(names)) if i != model]
        leader = max(rivals, key=lambda i: (window.sums[i], -i))
    return leader


def rule_window(caps: float = 32, margin: float = 0.005) -> Rule:
    """The code's rule: a rival leads once it is ahead over the window by `margin` of its lookups."""
    def rule(c: dict) -> list[int]:
        names, hits, sizes = c["names"], c["hits"], c["sizes"]
        model = names.index("learned")
        w = Window(len(names), max(8192, int(caps * c["capacity"])))
        out: list[int] = []
        leader = warm_up_leaders(c, w, margin, out)
        for b in range(len(out), len(sizes)):
            if b > first_trained(c):
                leader = window_choice(w, leader, model, margin)
            out.append(leader)
            w.add(int(sizes[b]), hits[b])
        return out
    return rule


def rule_decayed(half_caps: float = 6, half_min: float = 1024, margin: float = 0.0025,
                 clip: float = 0.05, slow: float | None = 4.0) -> Rule:
    """The code's rule, run by guard.Guard itself on the recorded hits: a rival leads once its
    decayed mean of clipped per-step differences in hit rate over the leader exceeds `margin`;
    half-life `half_caps` capacities (at least `half_min` lookups); the model's order, once its
    stints as leader lost hits, must also lead a comparison `slow` times slower; at the training
    a lead of the untrained order goes to the shadow furthest ahead of it."""
    from pymcoll.algorithms.tiered_cache.guard import Guard, Shadow, ShadowBatch
    from pymcoll.algorithms.tiered_cache.policies import LRUPolicy

    def rule(c: dict) -> list[int]:
        names, hits, sizes = list(c["names"]), c["hits"], c["sizes"]
        trained = first_trained(c)
        guard = Guard({name: Shadow(name, LRUPolicy()) for name in names}, "learned",
                      max(half_min, half_caps * c["capacity"]), margin, clip, slow)
        out = []
        for b in range(len(sizes)):
            if b == trained:
                guard.hand_lead_to_best_rival()
            out.append(names.index(guard.choose()))
            n = int(sizes[b])
            # Only the number of hits of each shadow in the step counts.
            step = {name: ShadowBatch(0, np.arange(n) < int(hits[b][i]), np.empty(0, dtype=np.int64))
                    for i, name in enumerate(names)}
            guard.record(step, guard.leader)
        return out
    return rule


def rule_since_training(margin: float = 0.001, window_caps: float = 32, both: bool = False) -> Rule:
    """Follow the leader of the hits since the model's training (by `margin` of those lookups);
    with `both`, a rival must also lead the code's window by its margin."""
    def rule(c: dict) -> list[int]:
        names, hits, sizes = c["names"], c["hits"], c["sizes"]
        w = Window(len(names), max(8192, int(window_caps * c["capacity"])))
        out: list[int] = []
        leader = warm_up_leaders(c, w, 0.005, out)
        total, n = np.zeros(len(names)), 0
        for b in range(len(out), len(sizes)):
            if n:
                for top in np.argsort(-total):
                    top = int(top)
                    if top == leader:
                        break
                    ahead = total[top] - total[leader] > margin * n
                    if ahead and (not both or w.sums[top] - w.sums[leader] > 0.005 * w.n):
                        leader = top
                        break
            out.append(leader)
            total, n = total + hits[b], n + int(sizes[b])
            w.add(int(sizes[b]), hits[b])
        return out
    return rule


def rule_sequential(z: float = 2.0, big: float | None = None) -> Rule:
    """A rival leads once its hits since training exceed the leader's by `z` standard deviations
    of their per-batch differences (or, with `big`, by that share of the lookups)."""
    def rule(c: dict) -> list[int]:
        names, hits, sizes = c["names"], c["hits"].astype(np.float64), c["sizes"]
        w = Window(len(names), max(8192, int(32 * c["capacity"])))
        out: list[int] = []
        leader = warm_up_leaders(c, w, 0.005, out)
        seen: list[np.ndarray] = []
        for b in range(len(out), len(sizes)):
            if seen:
                d = np.array(seen) - np.array(seen)[:, [leader]]
                lead, spread = d.sum(0), np.sqrt((d ** 2).sum(0))
                ok = (lead > z * spread) & (lead > 0)
                if big is not None:
                    ok |= lead > big * int(sizes[first_trained(c):b].sum())
                top = int(np.argmax(np.where(ok, lead, -np.inf)))
                if ok[top] and top != leader:
                    leader = top
            out.append(leader)
            seen.append(hits[b])
        return out
    return rule


CODE = "decayed 6 caps, clip 5%, 0.25%, slow check 4x (the code)"
RULES: dict[str, Rule] = {
    CODE: rule_decayed(),
    "decayed 6 caps, clip 5%, 0.25%, no slow check": rule_decayed(slow=None),
    "decayed 4 caps, clip 5%, 0.25%": rule_decayed(4),
    "decayed 8 caps, clip 5%, 0.25%": rule_decayed(8),
    "decayed 6 caps, clip 3%, 0.25%": rule_decayed(clip=0.03),
    "decayed 6 caps, clip 8%, 0.25%": rule_decayed(clip=0.08),
    "decayed 6 caps, clip 5%, 0.4%": rule_decayed(margin=0.004),
    "decayed 6 caps, no clip, 0.25%": rule_decayed(clip=1.0),
    "window 32 caps, 0.5% (former)": rule_window(),
    "window 8 caps, 0.5%": rule_window(8),
    "since training, 0.05%": rule_since_training(0.0005),
    "since training, 0.1%": rule_since_training(0.001),
    "since training, 0.5%": rule_since_training(0.005),
    "since training 0.1% and the window": rule_since_training(0.001, both=True),
    "sequential z 1": rule_sequential(1.0),
    "sequential z 2": rule_sequential(2.0),
    "sequential z 2, or 1% ahead": rule_sequential(2.0, 0.01),
}


# --------------------------------------------------------------------------- scoring

def margin(c: dict, leaders: list[int], switch_cost: float) -> float:
    """(rule's hits - best classical's hits) / scored lookups, from the batch of the training on."""
    start = first_trained(c)
    hits, names = c["hits"][start:], c["names"]
    lookups = int(c["sizes"][start:].sum())
    classical = [i for i, name in enumerate(names) if name != "learned"]
    best = max(hits[:, i].sum() for i in classical)
    chosen = np.array(leaders[start:])
    got = hits[np.arange(len(chosen)), chosen].sum()
    changes = int(np.count_nonzero(np.diff(np.array(leaders[start - 1 if start else 0:])) != 0))
    return (got - switch_cost * c["capacity"] * changes - best) / lookups


def table(cases: list[dict], rules: Iterable[str], switch_cost: float) -> None:
    groups = ("cases", "hold-out", "arrays")
    sizes = {g: sum(1 for c in cases if c["group"] == g) for g in groups}
    print(f"| rule | " + " | ".join(f"{g} ({sizes[g]}): below -0.5, worst" for g in groups) + " | arrays below, by shape |")
    print("|---|" + "---|" * (len(groups) + 1))
    for name in rules:
        rule = RULES[name]
        cells, shapes = [], Counter()
        for g in groups:
            ms = [(margin(c, rule(c), switch_cost), c) for c in cases if c["group"] == g]
            below = [(m, c) for m, c in ms if m < -TOLERANCE]
            worst = min((m for m, _ in ms), default=0.0)
            cells.append(f"{len(below)} ({100 * worst:+.2f})")
            if g == "arrays":
                shapes.update(c["label"].split("/")[0] for _, c in below)
        print(f"| {name} | " + " | ".join(cells) + " | " + (", ".join(f"{k} {v}" for k, v in sorted(shapes.items())) or "-")
              + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", type=Path, help="simulate every case and write the trails here (.npz)")
    ap.add_argument("--trails", type=Path, help="score the rules on trails written by --record")
    ap.add_argument("--rules", type=lambda s: s.split(";"), default=list(RULES),
                    help=f"';'-separated rule names (default: all): {'; '.join(RULES)}")
    ap.add_argument("--switch-cost", type=float, default=0.01,
                    help="hits charged per change of leader, as a share of the capacity (default 0.01)")
    a = ap.parse_args(argv)
    if a.record is None and a.trails is None:
        ap.error("give --record FILE (simulate and write trails) or --trails FILE (score the rules)")
    unknown = [r for r in a.rules if r not in RULES]
    if unknown:
        ap.error(f"--rules: unknown {unknown}; choose from {list(RULES)}")
    if a.record is not None:
        record(a.record)
    path = a.trails or a.record
    table(load(path), a.rules, a.switch_cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
