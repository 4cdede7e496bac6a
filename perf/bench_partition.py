"""Load balancing of variable-length samples: partition quality and time per call.

    python perf/bench_partition.py                    # -> results/partition.{json,png}
    python perf/bench_partition.py --batches 5 --reps 3 --out /tmp/p.json

One process, one thread. Sample lengths come from MovieLens-100K user
histories (../shared/data/sequences, skipped when absent) and from the
synthetic generator (log-normal and power-law, its defaults: median 65, cap
1024); the cost of a sample is L**2 (attention-dominated, the hardest to
balance). For every source, global batch (64 to 4096 samples), part count
(2, 4, 8), with and without equal counts, and method (lpt, kk, auto, and the
contiguous split that cuts the batch in index order into equal-count parts),
over --batches batches drawn with seeds 0, 1, ...: max / mean load and max /
lower bound (worst and median over the batches), how many batches are
bound-limited (one sample, or with equal counts the part that must hold it,
outweighs the mean part), which of lpt and kk ends lower and what auto picks,
and microseconds per call (median and minimum over batches x --reps calls,
methods interleaved).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
BATCHES = (64, 256, 1024, 2048, 4096)
PARTS = (2, 4, 8)
METHODS = ("lpt", "kk", "auto", "contiguous")


def shared_dir() -> Path:
    env = os.environ.get("PYMCOLL_SHARED_DATA")
    return Path(env) if env else HERE.parents[1] / "shared" / "data"


def contiguous(costs: np.ndarray, k: int, equal_count: bool = True) -> list[np.ndarray]:
    """The baseline: the batch in index order cut into k parts of equal count."""
    return np.array_split(np.arange(costs.size, dtype=np.int64), k)


def sources() -> dict[str, np.ndarray]:
    from pymcoll.algorithms.balance import load_lengths, synthetic_lengths

    out: dict[str, np.ndarray] = {}
    real = shared_dir() / "sequences" / "ml100k_user_history_lengths.txt"
    if real.is_file():
        out["ml100k"] = load_lengths(real)
    else:
        print(f"# {real} not present: real lengths skipped", file=sys.stderr)
    out["lognormal"] = synthetic_lengths(100_000, "lognormal", seed=1)
    out["powerlaw"] = synthetic_lengths(100_000, "powerlaw", seed=2)
    return out


def measure(pool: np.ndarray, batch: int, k: int, equal_count: bool, a: argparse.Namespace) -> dict[str, Any]:
    from pymcoll.algorithms.balance import CostModel, loads, lower_bound, partition, sample_batch

    costs = [CostModel.quadratic()(sample_batch(pool, batch, seed)) for seed in range(a.batches)]
    calls: dict[str, Callable[..., list[np.ndarray]]] = {
        "lpt": lambda c: partition(c, k, equal_count, "lpt"),
        "kk": lambda c: partition(c, k, equal_count, "kk"),
        "auto": lambda c: partition(c, k, equal_count, "auto"),
        "contiguous": lambda c: contiguous(c, k)}
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    top: dict[str, list[float]] = {m: [] for m in METHODS}
    for c in costs:  # the quality (and a warm-up call of each)
        for m in METHODS:
            top[m].append(float(loads(c, calls[m](c)).max()))
    for rep in range(a.reps):
        for i, c in enumerate(costs):
            order = METHODS if (rep + i) % 2 == 0 else METHODS[::-1]
            for m in order:
                t0 = time.perf_counter()
                calls[m](c)
                times[m].append(time.perf_counter() - t0)
    means = np.array([c.sum() / k for c in costs])
    bounds = np.array([lower_bound(c, k, equal_count) for c in costs])
    lpt, kk, auto = (np.array(top[m]) for m in ("lpt", "kk", "auto"))
    tol = 1e-12 * bounds
    out: dict[str, Any] = {
        "source": None, "batch": batch, "parts": k, "equal_count": equal_count,
        "bound_limited": int((bounds > means * (1 + 1e-12)).sum()), "batches": a.batches,
        "lpt_lower": int((lpt < kk - tol).sum()), "kk_lower": int((kk < lpt - tol).sum()),
        "auto_picked_kk": int((auto < lpt - tol).sum()),
        # auto runs KK only when LPT ends above the lower bound by more than 1e-4
        "auto_ran_kk": int((lpt > bounds * (1 + 1e-4)).sum()), "methods": {}}
    for m in METHODS:
        t = np.array(top[m])
        out["methods"][m] = {
            "max_over_mean_worst": float((t / means).max()), "max_over_mean_median": float(np.median(t / means)),
            "max_over_bound_worst": float((t / bounds).max()), "max_over_bound_median": float(np.median(t / bounds)),
            "us_median": float(np.median(times[m]) * 1e6), "us_min": float(np.min(times[m]) * 1e6),
            "calls": len(times[m])}
    return out


def print_table(records: list[dict[str, Any]], equal_count: bool) -> None:
    n = records[0]["batches"] if records else 0
    print(f"# partition of L**2 costs, {'equal counts' if equal_count else 'any counts'}; worst and median over "
          f"{n} batches per row; limited: batches whose lower bound exceeds the mean part")
    print(f"# {'source':<10}{'batch':>6}{'parts':>6}{'method':>11}{'max/mean':>10}{'median':>9}{'max/lb':>9}"
          f"{'median':>9}{'limited':>8}{'us':>9}{'min_us':>8}  (of the batches)")
    for r in records:
        if r["equal_count"] != equal_count:
            continue
        for m, v in r["methods"].items():
            note = ""
            if m == "kk":
                note = f"lower than lpt in {r['kk_lower']}, higher in {r['lpt_lower']}"
            elif m == "auto":
                note = f"ran kk on {r['auto_ran_kk']}, kept it on {r['auto_picked_kk']}"
            print(f"  {r['source']:<10}{r['batch']:>6}{r['parts']:>6}{m:>11}{v['max_over_mean_worst']:>10.5f}"
                  f"{v['max_over_mean_median']:>9.5f}{v['max_over_bound_worst']:>9.5f}"
                  f"{v['max_over_bound_median']:>9.5f}{r['bound_limited']:>8}{v['us_median']:>9.1f}"
                  f"{v['us_min']:>8.1f}  {note}")


@plotter("bench_partition")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    recs = [r for r in doc["results"] if not r["equal_count"]]
    srcs = list(dict.fromkeys(r["source"] for r in recs))
    styles = dict(zip(srcs, ["-", "--", ":"], strict=False))
    colors = {"lpt": "tab:blue", "kk": "tab:orange", "auto": "tab:green", "contiguous": "tab:gray"}
    fig, axes = plt.subplots(2, len(PARTS), figsize=(4.3 * len(PARTS), 7.5), squeeze=False)
    for col, k in enumerate(PARTS):
        for src in srcs:
            rows = sorted((r for r in recs if r["parts"] == k and r["source"] == src), key=lambda r: r["batch"])
            xs = [r["batch"] for r in rows]
            for m in METHODS:
                # A log axis cannot show 0: a perfect split is drawn at 1e-7.
                gap = [max(r["methods"][m]["max_over_bound_worst"] - 1, 1e-7) for r in rows]
                axes[0][col].plot(xs, gap, styles[src], color=colors[m], marker="o", ms=3, label=f"{m}, {src}")
                axes[1][col].plot(xs, [r["methods"][m]["us_median"] for r in rows], styles[src], color=colors[m],
                                  marker="o", ms=3, label=f"{m}, {src}")
        axes[0][col].set_title(f"{k} parts, any counts, L**2 cost", fontsize=9)
        axes[0][col].set_ylabel("worst max / lower bound - 1")
        axes[0][col].axhline(0.02, color="red", lw=0.8)
        axes[1][col].axhline(1000, color="red", lw=0.8)
        axes[1][col].set_ylabel("us per call (median)")
        for row in (0, 1):
            axes[row][col].set_xscale("log", base=2)
            axes[row][col].set_yscale("log")
            axes[row][col].set_xlabel("global batch (samples)")
    axes[0][0].legend(fontsize=6, ncol=2)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=10, help="batches drawn per case (seeds 0..)")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per batch and method")
    ap.add_argument("--sizes", default=",".join(map(str, BATCHES)), help="global batch sizes")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "partition.json")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    records: list[dict[str, Any]] = []
    for name, pool in sources().items():
        for eq in (False, True):
            for batch in (int(s) for s in a.sizes.split(",")):
                for k in PARTS:
                    r = measure(pool, batch, k, eq, a)
                    r["source"] = name
                    records.append(r)
    for eq in (False, True):
        print_table(records, eq)
    doc = run_record(threads=1, cost="L**2", batches=a.batches, reps=a.reps,
                     synthetic={"lognormal": "median 65, sigma 0.88, cap 1024, seed 1",
                                "powerlaw": "median 65, alpha 2.0, cap 1024, seed 2"},
                     results=records)
    write_results(doc, a.out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
