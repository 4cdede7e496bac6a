"""The codec against FP16, BF16, INT8 row-wise, FP8 row-wise, SZ3 and ZFP: ratio and throughput.

    python perf/bench_codec.py                         # -> results/codec.{json,png}
    python perf/bench_codec.py --emb-dir /tmp/emb      # + batches of perf/gen_embedding_batches.py
    python perf/bench_codec.py --reps 5 --out /tmp/c.json

One process, one thread (one core). Data sets: the shared real dumps
(../shared/data/embeddings, 128 x 32, few distinct rows), synthetic
2048 x 64 batches with 300 and 600 distinct rows (high cardinality) and 8
and 32 (low), and, with --emb-dir, the pooled embeddings of a trained DLRM
(high-cardinality tables: at least 100,000 rows). Per data set, bound
(0.01, 0.03, 0.05, relative to the value range) and method: the compression
ratio, compress and decompress throughput in GB/s of float32 input (median
of --reps timed calls, methods interleaved), and the largest error relative
to the value range (which the error-bounded methods must keep within the
bound; casts ignore it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
BOUNDS = (0.01, 0.03, 0.05)


def shared_dir() -> Path:
    env = os.environ.get("PYMCOLL_SHARED_DATA")
    return Path(env) if env else HERE.parents[1] / "shared" / "data"


def synthetic(distinct: int, seed: int) -> np.ndarray:
    g = np.random.default_rng([seed, distinct])
    pool = (g.standard_normal((distinct, 64)) * 0.1).astype(np.float32)
    # Power-law use of the distinct rows, as ids are used; every one of them appears.
    weights = 1.0 / np.arange(1, distinct + 1) ** 1.05
    picks = np.concatenate([np.arange(distinct), g.choice(distinct, 2048 - distinct, p=weights / weights.sum())])
    return pool[g.permutation(picks)]


def datasets(a: argparse.Namespace) -> dict[str, list[np.ndarray]]:
    out: dict[str, list[np.ndarray]] = {}
    emb = shared_dir() / "embeddings"
    dumps = sorted(emb.glob("*.f32")) if emb.exists() else []
    if dumps:
        out["shared dumps (128 rows, 2-7 distinct)"] = [np.fromfile(p, np.float32).reshape(-1, 32) for p in dumps]
    out["synthetic 2048x64, 300 distinct"] = [synthetic(300, s) for s in range(3)]
    out["synthetic 2048x64, 600 distinct"] = [synthetic(600, s) for s in range(3)]
    out["synthetic 2048x64, 8-32 distinct"] = [synthetic(8, 0), synthetic(32, 1)]
    if a.emb_dir:
        manifest = json.loads((a.emb_dir / "manifest.json").read_text())
        high = [f for f in manifest["files"] if f["table_rows"] >= 100_000]
        low = [f for f in manifest["files"] if f["distinct_rows"] <= 32]
        for label, group in (("DLRM high-cardinality tables", high), ("DLRM low-cardinality tables", low)):
            if group:
                d = sorted(f["distinct_rows"] for f in group)
                out[f"{label} ({group[0]['rows']}x{group[0]['dim']}, {d[0]}-{d[-1]} distinct)"] = [
                    np.fromfile(a.emb_dir / f["file"], np.float32).reshape(f["rows"], f["dim"]) for f in group]
    return out


def measure(methods: dict[str, Any], blocks: list[np.ndarray], bound: float, reps: int) -> dict[str, dict]:
    raw = sum(b.nbytes for b in blocks)
    comp_t: dict[str, list[float]] = {m: [] for m in methods}
    dec_t: dict[str, list[float]] = {m: [] for m in methods}
    sizes: dict[str, int] = {}
    errors: dict[str, float] = {}
    for rep in range(reps + 1):  # the first round warms up and checks
        order = list(methods) if rep % 2 == 0 else list(reversed(methods))
        for name in order:
            m = methods[name]
            t0 = time.perf_counter()
            bufs = [m.compress(b, bound) for b in blocks]
            t1 = time.perf_counter()
            outs = [m.decompress(buf) for buf in bufs]
            t2 = time.perf_counter()
            if rep == 0:
                sizes[name] = sum(len(buf) for buf in bufs)
                errors[name] = max(float(np.abs(o.astype(np.float64) - b).max() / max(float(b.max() - b.min()), 1e-30))
                                   for o, b in zip(outs, blocks, strict=True))
                continue
            comp_t[name].append(t1 - t0)
            dec_t[name].append(t2 - t1)
    return {name: {"ratio": raw / sizes[name], "compress_GBps": raw / float(np.median(comp_t[name])) / 1e9,
                   "decompress_GBps": raw / float(np.median(dec_t[name])) / 1e9, "max_rel_error": errors[name],
                   "error_bounded": methods[name].error_bounded,
                   "within_bound": errors[name] <= bound * (1 + 1e-9) or not methods[name].error_bounded}
            for name in methods}


@plotter("bench_codec")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    sets = list(doc["results"])
    fig, axes = plt.subplots(1, len(sets), figsize=(4.2 * len(sets), 4), squeeze=False)
    for ax, name in zip(axes[0], sets, strict=True):
        per_bound = doc["results"][name]
        methods = list(per_bound[str(BOUNDS[0])])
        for k, bound in enumerate(BOUNDS):
            ratios = [per_bound[str(bound)][m]["ratio"] for m in methods]
            ax.bar(np.arange(len(methods)) + (k - 1) * 0.27, ratios, 0.27, label=f"bound {bound}")
        ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("compression ratio")
        ax.set_title(name, fontsize=8)
        ax.legend(fontsize=7)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emb-dir", type=Path, default=None, help="output of perf/gen_embedding_batches.py")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "codec.json")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
    from pymcoll.algorithms.compression.baselines import available

    methods = available()
    results: dict[str, dict[str, Any]] = {}
    for name, blocks in datasets(a).items():
        results[name] = {}
        for bound in BOUNDS:
            r = measure(methods, blocks, bound, a.reps)
            results[name][str(bound)] = r
            print(f"# {name}, bound {bound} (relative to the value range)")
            print(f"# {'method':<14}{'ratio':>9}{'comp GB/s':>11}{'decomp GB/s':>13}{'max rel err':>13}  bounded")
            for m, v in r.items():
                print(f"  {m:<14}{v['ratio']:>9.1f}{v['compress_GBps']:>11.3f}{v['decompress_GBps']:>13.3f}"
                      f"{v['max_rel_error']:>13.5f}  {'yes' if v['error_bounded'] else 'no (cast)'}"
                      f"{'' if v['within_bound'] else '  OVER THE BOUND'}")
    write_results(run_record(reps=a.reps, threads=1, methods=list(methods), results=results), a.out, plot)
    bad = [(n, b, m) for n, per in results.items() for b, r in per.items() for m, v in r.items()
           if not v["within_bound"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
