"""How far prefetching can cut on-demand fetches on a generated trace: the learned prefetcher against two oracles.

    python perf/prefetch_limits.py                  # -> results/prefetch_limits.{json,png}
    python perf/prefetch_limits.py --rows 20000 --seeds 0 --out /tmp/pl.json   # a quick run

Belady's optimum bounds what a cache can keep; the oracles of
pymcoll.algorithms.tiered_cache.oracles bound what a prefetcher can bring in,
on the same trace (make_trace, --kind, --rows rows)
and fast tier (--capacity of the distinct rows), with the learned caching
policy doing the replacement and prefetched rows taking fast-tier slots:

* ``next-batch oracle``: after batch i it is handed batch i+1 and brings in
  the rows that batch looks up and batch i does not, in order of first
  lookup, at most --budgets rows (never wrong; bounded by its budget);
* ``group oracle``: knows the generator's co-access groups; when a row of a
  group comes back after an absence of more than 2 x capacity lookups (the
  learned prefetcher's trigger), it brings in the row's companions already
  looked up before (what history could at best have taught), at most
  capacity / 8 per batch, with prefetched rows ranked as looked up
  --ages x capacity lookups ago (0: as if just looked up).

Reported per variant: hit rate, on-demand fetches and their ratio to LRU's,
prefetches and their accuracy, over the lookups after the warm-up (20%).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, write_results  # noqa: E402

from pymcoll.algorithms.tiered_cache import (GroupOracle, LearnedCachePolicy, NextBatchOracle,  # noqa: E402
                                             Trace, make_trace, resolve_capacity, simulate)

HERE = Path(__file__).resolve().parent
GOAL = 0.75  # on-demand fetches / LRU's that learned prefetching is asked to reach


def measure(trace: Trace, cap: int, budgets: list[int], ages: list[float]) -> list[dict[str, Any]]:
    lru = simulate(trace, cap, "lru")
    variants: list[tuple[str, Any, Any]] = [
        ("lru", "lru", None), ("opt", "opt", None), ("learned", "learned", None),
        ("learned+prefetch", "learned+prefetch", None)]
    for b in budgets:
        variants.append((f"learned + next-batch oracle ({b}/batch)", LearnedCachePolicy(trace.n_rows),
                         NextBatchOracle(trace, b)))
    for a in ages:
        variants.append((f"learned + group oracle (age {a:g} x cap)",
                         LearnedCachePolicy(trace.n_rows, prefetch_age=int(a * cap)), GroupOracle(trace)))
    out = []
    for label, policy, pf in variants:
        r = lru if label == "lru" else simulate(trace, cap, policy, prefetcher=pf)
        d = r.to_dict()
        d.update(variant=label, fetches_vs_lru=r.on_demand_fetches / lru.on_demand_fetches)
        out.append(d)
    return out


@plotter("prefetch_limits")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    labels = [v["variant"] for v in doc["results"][0]["variants"]]
    ratios = np.array([[v["fetches_vs_lru"] for v in r["variants"]] for r in doc["results"]])
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(labels) + 1.4))
    y = np.arange(len(labels))[::-1]
    ax.barh(y, ratios.mean(axis=0), xerr=[ratios.mean(0) - ratios.min(0), ratios.max(0) - ratios.mean(0)],
            color="tab:blue", alpha=0.75)
    ax.axvline(GOAL, color="tab:red", ls="--", lw=1, label=f"goal {GOAL}x LRU")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("on-demand fetches / LRU's (mean over seeds, bars: range)")
    ax.set_title(f"{doc['kind']} trace, {doc['rows']} rows, fast tier {100 * doc['capacity_share']:g}% of the "
                 f"distinct rows", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--kind", default="mixed")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    ap.add_argument("--capacity", type=float, default=0.05, help="share of the trace's distinct rows")
    ap.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="next-batch oracle rows per batch (default: 100 and capacity / 8)")
    ap.add_argument("--ages", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 2.0, 6.0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "prefetch_limits.json")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    results = []
    for seed in a.seeds:
        trace = make_trace(a.rows, a.kind, seed)
        cap = resolve_capacity(trace, a.capacity)
        budgets = a.budgets if a.budgets is not None else [100, max(1, cap // 8)]
        variants = measure(trace, cap, budgets, a.ages)
        results.append({"seed": seed, "capacity": cap, "variants": variants})
        print(f"[seed {seed} done, {time.perf_counter() - started:.0f}s]", file=sys.stderr, flush=True)
    print(f"# {a.kind} trace, {a.rows} rows, fast tier {100 * a.capacity:g}% of the distinct rows; scored after "
          "the 20% warm-up")
    print("# seed  cap  variant                                    hit_rate  on_demand  vs_lru  prefetches  accuracy")
    for r in results:
        for v in r["variants"]:
            print(f"{r['seed']:>6}{r['capacity']:>5}  {v['variant']:<42}{v['hit_rate']:>9.4f}"
                  f"{v['on_demand_fetches']:>11}{v['fetches_vs_lru']:>8.3f}{v['prefetches']:>12}"
                  f"{v['prefetch_accuracy']:>10.3f}")
    doc = run_record(rows=a.rows, kind=a.kind, seeds=a.seeds, capacity_share=a.capacity, ages=a.ages,
                     warmup=0.2, goal_fetches_vs_lru=GOAL, results=results)
    write_results(doc, a.out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
