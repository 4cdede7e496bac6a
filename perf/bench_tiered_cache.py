"""Tiered embedding cache: hit rate, on-demand fetches, prefetch accuracy and model time per lookup.

    python perf/bench_tiered_cache.py                 # -> results/tiered_cache.{json,png}
    python perf/bench_tiered_cache.py --rows 20000 --seeds 0 --out /tmp/tc.json   # a quick run

One process (the learned policies' model runs in one background thread).
For every trace -- the generated "irm", "bursty" and "mixed" kinds
(make_trace, --rows rows, 8 lookups per row) for each of --seeds, and the
ids of the DLRM example's largest table (its synthetic Criteo data, capped
at --rows rows, --dlrm-batches batches of 2048) -- and every fast-tier
capacity (1%, 5%, 10%, 20% of the trace's distinct rows), every policy
(lru, lfu, opt, learned, learned+prefetch) serves the trace; scores count
the lookups after the warm-up (the first 20%, on which the learned policies
train). Reported per case: hit rate, on-demand fetches (and / LRU's),
prefetches and their accuracy, model CPU time per lookup (features,
predictions, prefetch candidates; the training is reported apart), and the
hit rate's gap to Belady's optimum.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
CAPACITIES = (0.01, 0.05, 0.10, 0.20)
POLICIES = ("lru", "lfu", "opt", "learned", "learned+prefetch")


def traces(a: argparse.Namespace) -> list[tuple[str, int, Any]]:
    from pymcoll.algorithms.tiered_cache import make_trace, record_dlrm_trace

    out = []
    for seed in a.seeds:
        for kind in a.kinds:
            out.append((kind, seed, make_trace(a.rows, kind, seed)))
    if a.dlrm_batches > 0:
        out.append(("dlrm", 0, record_dlrm_trace(a.rows, a.dlrm_batches)))
    return out


def run_case(trace: Any, cap: float) -> dict[str, Any]:
    from pymcoll.algorithms.tiered_cache import simulate

    res = {}
    for p in POLICIES:
        r = simulate(trace, cap, p)
        res[p] = r.to_dict()
    lru = res["lru"]["on_demand_fetches"]
    opt = res["opt"]["hit_rate"]
    for p in POLICIES:
        res[p]["fetches_vs_lru"] = res[p]["on_demand_fetches"] / lru if lru else float("nan")
        res[p]["gap_to_opt"] = opt - res[p]["hit_rate"]
    return res


def print_table(records: list[dict[str, Any]]) -> None:
    print("# trace   seed  cap  policy              hit_rate  on_demand  vs_lru  prefetches  accuracy  "
          "us/lookup  train_s  to_opt")
    for r in records:
        for p, v in r["policies"].items():
            print(f"  {r['trace']:<7}{r['seed']:>5}{r['capacity_share']:>5.2f}  {p:<18}{v['hit_rate']:>10.4f}"
                  f"{v['on_demand_fetches']:>11}{v['fetches_vs_lru']:>8.3f}{v['prefetches']:>12}"
                  f"{v['prefetch_accuracy']:>10.3f}{v['us_per_lookup']:>11.3f}{v['train_seconds']:>9.2f}"
                  f"{v['gap_to_opt']:>8.4f}")


@plotter("bench_tiered_cache")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    names = list(dict.fromkeys(r["trace"] for r in doc["results"]))
    colors = {"lru": "tab:gray", "lfu": "tab:brown", "opt": "black", "learned": "tab:blue",
              "learned+prefetch": "tab:green"}
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    for col, name in enumerate(names):
        ax = axes[0][col]
        rows = [r for r in doc["results"] if r["trace"] == name and r["seed"] == doc["seeds"][0]]
        rows.sort(key=lambda r: r["capacity_share"])
        xs = [100 * r["capacity_share"] for r in rows]
        for p in POLICIES:
            ax.plot(xs, [r["policies"][p]["hit_rate"] for r in rows], marker="o", ms=3, color=colors[p],
                    ls="--" if p == "opt" else "-", label=p)
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs])
        ax.set_xlabel("fast tier (% of distinct rows)")
        ax.set_ylabel("hit rate (after warm-up)")
        ax.set_title(f"{name} (seed {doc['seeds'][0]})" if name != "dlrm" else "DLRM example's ids", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows of the table (generated traces: 8 lookups each)")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    ap.add_argument("--kinds", type=lambda s: s.split(","), default=["irm", "bursty", "mixed"])
    ap.add_argument("--capacities", type=lambda s: [float(x) for x in s.split(",")], default=list(CAPACITIES))
    ap.add_argument("--dlrm-batches", type=int, default=200, help="batches of the DLRM ids trace (0: none)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "tiered_cache.json")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    records: list[dict[str, Any]] = []
    cases = traces(a)
    total = len(cases) * len(a.capacities)
    done = 0
    started = time.perf_counter()
    for name, seed, tr in cases:
        stats = tr.stats()
        for cap in a.capacities:
            records.append({"trace": name, "seed": seed, "capacity_share": cap, "stats": stats,
                            "policies": run_case(tr, cap)})
            done += 1
            r = records[-1]["policies"]
            print(f"[{done}/{total} {time.perf_counter() - started:6.0f}s] {name} seed {seed} cap {cap:.2f}: "
                  + "  ".join(f"{p} {v['hit_rate']:.4f}" for p, v in r.items()), file=sys.stderr, flush=True)
    print_table(records)
    doc = run_record(rows=a.rows, seeds=a.seeds, kinds=a.kinds, dlrm_batches=a.dlrm_batches, warmup=0.2,
                     results=records)
    write_results(doc, a.out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
