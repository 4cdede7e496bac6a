"""Tiered embedding cache: every policy on every trace kind and capacity, and the learned policy's margin.

    python perf/bench_tiered_cache.py --timing        # -> results/tiered_cache.{json,png}
    python perf/bench_tiered_cache.py --rows 20000 --seeds 0 --kinds mixed --out /tmp/tc.json   # a quick run

One process (the learned policies' model and shadow caches run in one
background thread). For every trace -- each generated kind of make_trace
("irm", "bursty", "mixed", "stack", "drift", "scan"; --rows rows, 8
lookups per row) and the ids of the DLRM example's largest table (its
synthetic Criteo data as the example's data pipeline produces it, capped at
--rows rows, --dlrm-batches batches of 2048), for each of --seeds -- and
every fast-tier capacity (1%, 5%, 10%, 20% of the trace's distinct rows),
every policy of simulate() serves the trace; scores count the lookups after
the warm-up (the first 20%, on which the learned policies train).

Reported per case: hit rate, on-demand fetches, prefetches, their accuracy
and the share of batches the prefetcher was on, the model's CPU time per
lookup (features and predictions) and the guard's (its shadow caches), the
share of lookups the learned policy served following a classical policy,
the best classical policy (the best of lru, lfu, arc, lecar, tinylfu on
that case) and the learned policy's margin over it, and every policy's
distance to Belady's optimum. The summary gives, per trace kind and
capacity, the smallest margin over the seeds, and checks the learned
policy's acceptance points. --timing also times simulate("learned") on
10^6 lookups of a mixed trace (wall time, one process), and the model's and
the guard's CPU time per lookup inline on one core, one batch prepared at a
time and four at a time (``lookahead=4``, the same hits); and the same trace
through a TieredEmbeddingStore, one batch a call and four (``lookup_batches``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
CAPACITIES = (0.01, 0.05, 0.10, 0.20)
CLASSICAL = ("lru", "lfu", "arc", "lecar", "tinylfu")
POLICIES = CLASSICAL + ("opt", "learned", "learned+prefetch")
TOLERANCE = 0.005   # learned >= best classical - 0.5 points, every case and seed
MIXED_GOAL = 0.02   # learned >= best classical + 2 points on "mixed" at 5% (mean of the seeds)


def traces(a: argparse.Namespace) -> list[tuple[str, int, Any]]:
    from pymcoll.algorithms.tiered_cache import make_trace, record_dlrm_trace

    out = []
    for seed in a.seeds:
        for kind in a.kinds:
            out.append((kind, seed, make_trace(a.rows, kind, seed)))
        if a.dlrm_batches > 0:
            out.append(("dlrm", seed, record_dlrm_trace(a.rows, a.dlrm_batches, seed=seed)))
    return out


def run_case(trace: Any, cap: float, res: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Every policy on the case, or only those missing from `res` (results kept from an earlier run)."""
    from pymcoll.algorithms.tiered_cache import simulate

    res = dict(res or {})
    for p in POLICIES:
        if p not in res:
            res[p] = simulate(trace, cap, p).to_dict()
    opt = res["opt"]["hit_rate"]
    best = max(CLASSICAL, key=lambda p: res[p]["hit_rate"])
    for p in POLICIES:
        res[p]["gap_to_opt"] = opt - res[p]["hit_rate"]
    return {"policies": res, "best_classical": best, "best_classical_hit_rate": res[best]["hit_rate"],
            "learned_margin": res["learned"]["hit_rate"] - res[best]["hit_rate"],
            "prefetch_extra_fetches": res["learned+prefetch"]["on_demand_fetches"]
            - res["learned"]["on_demand_fetches"]}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (trace, capacity): the margins over the seeds; and the acceptance checks."""
    cases: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in records:
        cases.setdefault((r["trace"], r["capacity_share"]), []).append(r)
    rows = []
    for (name, cap), rs in cases.items():
        margins = [r["learned_margin"] for r in rs]
        rows.append({"trace": name, "capacity_share": cap, "seeds": [r["seed"] for r in rs],
                     "min_margin": min(margins), "mean_margin": sum(margins) / len(margins),
                     "best_classical": [r["best_classical"] for r in rs],
                     "learned_to_opt": [r["policies"]["learned"]["gap_to_opt"] for r in rs],
                     "max_prefetch_extra_fetches": max(r["prefetch_extra_fetches"] for r in rs)})
    mixed5 = [r for r in rows if r["trace"] == "mixed" and abs(r["capacity_share"] - 0.05) < 1e-9]
    learned = [p for r in records for n, p in r["policies"].items() if n == "learned"]
    return {
        "cases": rows,
        "min_margin": min(r["min_margin"] for r in rows) if rows else None,
        "within_tolerance_everywhere": all(r["min_margin"] >= -TOLERANCE for r in rows),
        "mixed_5pct_mean_margin": mixed5[0]["mean_margin"] if mixed5 else None,
        "mixed_goal_met": bool(mixed5) and mixed5[0]["mean_margin"] >= MIXED_GOAL,
        "prefetch_never_more_fetches": all(r["max_prefetch_extra_fetches"] <= 0 for r in rows),
        "max_model_us_per_lookup": max((p["us_per_lookup"] for p in learned), default=None),
        "max_guard_us_per_lookup": max((p["guard_us_per_lookup"] for p in learned), default=None),
    }


def timing(rows: int = 125_000) -> dict[str, Any]:
    """Wall time of simulate("learned") over about 10^6 lookups of a mixed trace, 5% capacity; and the
    model's and the guard's CPU time per lookup on one core (the same run inline, median of 3)."""
    from pymcoll.algorithms.tiered_cache import make_trace, simulate

    trace = make_trace(rows, "mixed", 0, n_lookups=1_000_000)
    started, cpu = time.perf_counter(), time.process_time()
    r = simulate(trace, 0.05, "learned")
    # CPU time too: on a shared machine the wall time includes whatever else ran (or stopped this process).
    out = {"lookups": len(trace), "wall_seconds": time.perf_counter() - started,
           "cpu_seconds": time.process_time() - cpu,
           "us_per_lookup": r.us_per_lookup, "guard_us_per_lookup": r.guard_us_per_lookup,
           "train_seconds": r.train_seconds}
    # With the model in a background thread, the two threads share the machine's cores (on two hyperthreads
    # of one core each runs at about half speed); inline, the model and the guard have a core to themselves.
    # Four batches prepared in one pass (their ids known ahead) give the same hits; each shadow then
    # fetches its hot rows into the caches once for four batches.
    for prefix, lookahead in (("inline", 1), ("inline_lookahead4", 4)):
        runs = sorted((x.us_per_lookup, x.guard_us_per_lookup)
                      for x in (simulate(trace, 0.05, "learned", background=False, lookahead=lookahead)
                                for _ in range(3)))
        model_us, guard_us = runs[1]
        out.update({f"{prefix}_us_per_lookup": model_us, f"{prefix}_guard_us_per_lookup": guard_us,
                    f"{prefix}_model_and_guard_us_per_lookup": model_us + guard_us})
    for batches_a_call in (1, 4):
        out.update(store_timing(trace, batches_a_call))
    return out


def store_timing(trace: Any, batches_a_call: int, share: float = 0.05, dim: int = 8) -> dict[str, Any]:
    """The same trace through a TieredEmbeddingStore with the learned policy: the warm-up served, the
    model trained, the rest served `batches_a_call` batches a call (lookup or lookup_batches); wall
    time a lookup in all and the policy's model and guard CPU time a lookup."""
    import tempfile

    from pymcoll.algorithms.tiered_cache import TieredEmbeddingStore

    batches = [b for _, b in trace.batches()]
    capacity = max(1, int(share * np.unique(trace.ids).size))
    warm = len(batches) // 5
    with tempfile.TemporaryDirectory() as tmp:
        store = TieredEmbeddingStore.create(Path(tmp) / "table.emb", np.zeros((trace.n_rows, dim), np.float32),
                                            capacity, "learned")
        for b in batches[:warm]:
            store.lookup(b)
        pol = store.policy
        pol.train()
        model0, guard0 = pol.model_seconds, pol.guard_seconds
        rest = batches[warm:]
        n = sum(b.size for b in rest)
        started = time.perf_counter()
        for i in range(0, len(rest), batches_a_call):
            if batches_a_call == 1:
                store.lookup(rest[i])
            else:
                store.lookup_batches(rest[i:i + batches_a_call])
        wall = time.perf_counter() - started
        prefix = f"store_{batches_a_call}_batches_a_call"
        out = {f"{prefix}_us_per_lookup": wall / n * 1e6,
               f"{prefix}_model_and_guard_us_per_lookup": (pol.model_seconds - model0 + pol.guard_seconds - guard0)
               / n * 1e6,
               f"{prefix}_hit_rate": store.stats()["hit_rate"]}
        store.close()
    return out


def changes(result: dict[str, Any]) -> str:
    """Changes of leader in the learned policy's run ("-" in results recorded before runs kept them)."""
    leaders = result.get("leaders")
    return "-" if leaders is None else str(max(0, len(leaders) - 1))


def print_table(records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    print("# trace   seed  cap  " + "".join(f"{p:>9}" for p in POLICIES)
          + "   best      margin  to_opt  pf_on  guard  changes")
    for r in records:
        v = r["policies"]
        print(f"  {r['trace']:<7}{r['seed']:>5}{r['capacity_share']:>5.2f}  "
              + "".join(f"{v[p]['hit_rate']:>9.4f}" for p in POLICIES)
              + f"   {r['best_classical']:<8}{100 * r['learned_margin']:>+7.2f}{100 * v['learned']['gap_to_opt']:>8.2f}"
              f"{v['learned+prefetch']['prefetch_on_share']:>7.2f}{v['learned']['guard_share']:>7.2f}"
              f"{changes(v['learned']):>9}")
    print("# per trace and capacity: smallest margin over the seeds (points), learned to opt (points)")
    for c in summary["cases"]:
        print(f"  {c['trace']:<7}{c['capacity_share']:>5.2f}  min {100 * c['min_margin']:>+6.2f}  "
              f"mean {100 * c['mean_margin']:>+6.2f}  to opt {', '.join(f'{100 * g:.2f}' for g in c['learned_to_opt'])}"
              f"  best {','.join(c['best_classical'])}")
    print("# " + json.dumps({k: v for k, v in summary.items() if k != "cases"}))


@plotter("bench_tiered_cache")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    names = list(dict.fromkeys(r["trace"] for r in doc["results"]))
    colors = {"lru": "tab:gray", "lfu": "tab:brown", "arc": "tab:purple", "lecar": "tab:olive",
              "tinylfu": "tab:cyan", "opt": "black", "learned": "tab:blue", "learned+prefetch": "tab:green"}
    cols = min(4, len(names))
    nrows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.6 * nrows), squeeze=False)
    seed = doc["seeds"][0]
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        rows = sorted((r for r in doc["results"] if r["trace"] == name and r["seed"] == seed),
                      key=lambda r: r["capacity_share"])
        xs = [100 * r["capacity_share"] for r in rows]
        for p in POLICIES:
            ax.plot(xs, [r["policies"][p]["hit_rate"] for r in rows], marker="o", ms=3, color=colors[p],
                    ls="--" if p == "opt" else ":" if p == "learned+prefetch" else "-", label=p)
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs])
        ax.set_xlabel("fast tier (% of distinct rows)")
        ax.set_ylabel("hit rate (after warm-up)")
        ax.set_title(f"{name} (seed {seed})" if name != "dlrm" else f"DLRM example's ids (seed {seed})", fontsize=9)
        ax.grid(alpha=0.3)
    for j in range(len(names), nrows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def main() -> int:
    from pymcoll.algorithms.tiered_cache import KINDS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000, help="rows of the table (generated traces: 8 lookups each)")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    ap.add_argument("--kinds", type=lambda s: s.split(","), default=list(KINDS))
    ap.add_argument("--capacities", type=lambda s: [float(x) for x in s.split(",")], default=list(CAPACITIES))
    ap.add_argument("--dlrm-batches", type=int, default=200, help="batches of the DLRM ids traces (0: none)")
    ap.add_argument("--timing", action="store_true", help="also time simulate('learned') on 10^6 lookups")
    ap.add_argument("--progress", type=Path, default=None,
                    help="rewrite this JSON after every case; cases already in it are not run again")
    ap.add_argument("--rerun", type=lambda s: s.split(","), default=[],
                    help="policies to measure again in the cases already in --progress (the others are kept)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "tiered_cache.json")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    records: list[dict[str, Any]] = []
    if a.progress is not None and a.progress.exists():
        records = json.loads(a.progress.read_text())
    done = {(r["trace"], r["seed"], r["capacity_share"]): r for r in records}
    cases = traces(a)
    total = len(cases) * len(a.capacities)
    started = time.perf_counter()
    for name, seed, tr in cases:
        stats = tr.stats()
        for cap in a.capacities:
            old = done.get((name, seed, cap))
            if old is not None and not a.rerun:
                continue
            kept = {p: v for p, v in old["policies"].items() if p not in a.rerun} if old is not None else None
            r = {"trace": name, "seed": seed, "capacity_share": cap, "stats": stats, **run_case(tr, cap, kept)}
            if old is not None:
                records[records.index(old)] = r
            else:
                records.append(r)
            print(f"[{len(records)}/{total} {time.perf_counter() - started:6.0f}s] {name} seed {seed} cap {cap:.2f}: "
                  + "  ".join(f"{p} {v['hit_rate']:.4f}" for p, v in r["policies"].items())
                  + f"  margin {100 * r['learned_margin']:+.2f}", file=sys.stderr, flush=True)
            if a.progress is not None:
                a.progress.write_text(json.dumps(records) + "\n")
    summary = summarize(records)
    doc = run_record(rows=a.rows, seeds=a.seeds, kinds=a.kinds, dlrm_batches=a.dlrm_batches, warmup=0.2, rerun=a.rerun,
                     policies=list(POLICIES), classical=list(CLASSICAL), tolerance=TOLERANCE, mixed_goal=MIXED_GOAL,
                     seconds=time.perf_counter() - started, summary=summary, results=records)
    if a.timing:
        doc["timing"] = timing()
        print(f"# timing: {json.dumps(doc['timing'])}")
    print_table(records, summary)
    write_results(doc, a.out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
