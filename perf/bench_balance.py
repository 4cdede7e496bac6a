"""Sequence recommendation training: bubbles of a contiguous vs a balanced split, and the
exchange overlapped with compute by a progress thread.

    python perf/bench_balance.py                    # both parts -> results/balance.json
    python perf/bench_balance.py --part bubbles --steps 60 --reps 3
    python perf/bench_balance.py --part overlap --links 0.25,0.5,1,2

Every variant is one launch of examples/seqrec_train.py (--np ranks, one torch thread each,
--json); variants alternate within each repetition and the table shows medians over the
repetitions.

Bubbles: global batches of --global-batch histories (MovieLens-100K lengths, synthetic
log-normal ones), split contiguously or balanced by the cost model fitted from the warm-up
steps (also with equal counts). The bubble is the time ranks wait at the step's
synchronizations (see pymcoll.algorithms.balance.timeline). "equal work" runs every sample at
the mean length, split contiguously: its bubble is the machine's noise floor for this step.

Overlap: --chunks chunks per step over an emulated link (--links, Gb/s): the same chunks inline
(compute and exchange one after the other: their times are the reference) and on a progress
thread. Goal: the overlapped step within 10% of max(compute, exchange) of the inline run, and
its compute no more than 10% slower.

"balanced, measured speeds" also moves each rank's share towards equal compute times every step
(examples/seqrec_train.py --speeds measured), for a host whose CPUs change speed for a while.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import commit, pyplot  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "seqrec_train.py"
RESULTS = HERE / "results"


def launch(np_: int, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    from pymcoll.cli import launch as launcher  # the project's mpiexec command line
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd, env2 = launcher.mpiexec_command(np_, [sys.executable, "-P", str(EXAMPLE), *args, "--quiet",
                                                   "--json", str(out)])
        env2.update(env)
        proc = subprocess.run(cmd, env=env2, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def interleaved(a: argparse.Namespace, base: list[str], variants: dict[str, list[str]], label: str,
                show: Callable[[dict], str]) -> dict[str, list[dict]]:
    """Every variant launched a.reps times, the order reversed on odd repetitions: its results."""
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for rep in range(a.reps):
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for v in order:
            r = launch(a.np, base + variants[v], {})
            runs[v].append(r)
            print(f"  {label} {v:<26} rep {rep}: {show(r)}", file=sys.stderr, flush=True)
    return runs


def mean_length_file(kind: str, tmp: Path) -> Path:
    """Lengths all equal to the mean of `kind` (the equal-work floor)."""
    import numpy as np

    from pymcoll.algorithms.balance import load_lengths, synthetic_lengths
    src = load_lengths(HERE.parent.parent / "shared" / "data" / "sequences" / "ml100k_user_history_lengths.txt") \
        if kind == "ml100k" else synthetic_lengths(100_000, kind, seed=0)
    path = tmp / f"equal_{kind}.txt"
    path.write_text("\n".join([str(int(round(float(np.mean(src)))))] * 1000) + "\n")
    return path


def bubbles(a: argparse.Namespace) -> dict[str, Any]:
    base = ["--steps", str(a.steps), "--global-batch", str(a.global_batch), "--threads", "1"]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in a.lengths.split(","):
            variants = {
                "contiguous": ["--lengths", kind, "--split", "contiguous"],
                "balanced": ["--lengths", kind, "--split", "balanced"],
                "balanced equal-count": ["--lengths", kind, "--split", "balanced", "--equal-count"],
                "balanced, measured speeds": ["--lengths", kind, "--split", "balanced", "--speeds", "measured"],
                "equal work": ["--lengths", "ml100k", "--lengths-file", str(mean_length_file(kind, Path(tmp))),
                               "--split", "contiguous"],
            }
            runs = interleaved(a, base, variants, f"{kind:<10}",
                               lambda r: f"bubble {r['bubble_s'] / r['steps'] * 1e3:7.2f} ms/step, "
                                         f"step {r['step_ms']:7.1f} ms")
            for v, rs in runs.items():
                records.append({
                    "lengths": kind, "variant": v,
                    "bubble_ms_per_step": statistics.median(r["bubble_s"] / r["steps"] * 1e3 for r in rs),
                    "step_ms": statistics.median(r["step_ms"] for r in rs),
                    "compute_ms_per_step": statistics.median(
                        max(p["compute_s"] for p in r["per_rank"]) / r["steps"] * 1e3 for r in rs),
                    "runs": [{"bubble_s": r["bubble_s"], "step_ms": r["step_ms"], "cost": r["cost"],
                              "per_rank": r["per_rank"]} for r in rs]})
    return {"steps": a.steps, "global_batch": a.global_batch, "records": records}


def overlap(a: argparse.Namespace) -> dict[str, Any]:
    base = ["--steps", str(a.steps), "--global-batch", str(a.global_batch), "--threads", "1", "--split", "balanced",
            "--cost", "1,0,0", "--warmup", "2", "--chunks", str(a.chunks)]
    records = []
    for gbps in [float(x) for x in a.links.split(",")]:
        variants = {"inline": ["--link-gbps", str(gbps)], "overlap": ["--link-gbps", str(gbps), "--overlap"]}
        runs = interleaved(a, base, variants, f"{gbps:5.2f} Gb/s", lambda r: f"step {r['step_ms']:7.1f} ms")

        def per_step(r: dict, key: str) -> float:
            return max(p[key] for p in r["pipeline"]) / r["steps"] * 1e3

        rec: dict[str, Any] = {"link_gbps": gbps}
        for v, rs in runs.items():
            rec[v] = {"step_ms": statistics.median(r["step_ms"] for r in rs),
                      "compute_ms": statistics.median(per_step(r, "compute_s") for r in rs),
                      "exchange_ms": statistics.median(per_step(r, "exchange_s") for r in rs),
                      "stall_ms": statistics.median(per_step(r, "stall_s") for r in rs),
                      "pinned_apart": rs[0]["pinned_apart"]}
        inline = rec["inline"]
        # The inline step is compute + exchange + the rest (allreduce, optimizer, batch building).
        rest = max(inline["step_ms"] - inline["compute_ms"] - inline["exchange_ms"], 0.0)
        rec["bound_ms"] = max(inline["compute_ms"] + rest, inline["exchange_ms"])
        rec["step_vs_bound"] = rec["overlap"]["step_ms"] / rec["bound_ms"]
        rec["compute_slowdown"] = rec["overlap"]["compute_ms"] / inline["compute_ms"]
        rec["speedup"] = inline["step_ms"] / rec["overlap"]["step_ms"]
        records.append(rec)
    return {"steps": a.steps, "global_batch": a.global_batch, "chunks": a.chunks, "records": records}


def plot(doc: dict, path: Path) -> None:
    plt = pyplot(__file__)
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if "bubbles" in doc:
        recs = doc["bubbles"]["records"]
        kinds = sorted({r["lengths"] for r in recs})
        present = {r["variant"] for r in recs}
        variants = [v for v in ("contiguous", "balanced", "balanced equal-count", "balanced, measured speeds",
                                "equal work") if v in present]
        width = 0.8 / len(variants)
        for i, v in enumerate(variants):
            ys = [next(r["bubble_ms_per_step"] for r in recs if r["lengths"] == k and r["variant"] == v) for k in kinds]
            axes[0].bar([x + i * width for x in range(len(kinds))], ys, width, label=v)
        axes[0].set_xticks([x + (len(variants) - 1) / 2 * width for x in range(len(kinds))], kinds)
        axes[0].set_ylabel("bubble per step (ms), 2 ranks")
        axes[0].set_title("waiting at synchronizations")
        axes[0].legend()
    if "overlap" in doc:
        recs = doc["overlap"]["records"]
        xs = [r["link_gbps"] for r in recs]
        axes[1].plot(xs, [r["inline"]["step_ms"] for r in recs], "o-", label="inline (sum)")
        axes[1].plot(xs, [r["overlap"]["step_ms"] for r in recs], "s-", label="progress thread")
        axes[1].plot(xs, [r["bound_ms"] for r in recs], "k--", label="max(compute, exchange)")
        axes[1].set_xscale("log")
        axes[1].set_xlabel("emulated link (Gb/s)")
        axes[1].set_ylabel("step (ms)")
        axes[1].set_title(f"overlapped exchange, {doc['overlap']['chunks']} chunks")
        axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["bubbles", "overlap", "both"], default="both")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--lengths", default="ml100k,lognormal")
    ap.add_argument("--links", default="0.25,0.5,1,4")
    ap.add_argument("--chunks", type=int, default=6)
    ap.add_argument("--out", type=Path, default=RESULTS / "balance.json")
    a = ap.parse_args()
    doc: dict[str, Any] = {"date": datetime.date.today().isoformat(), "commit": commit(), "ranks": a.np,
                           "args": {k: str(v) for k, v in vars(a).items()}}
    if a.part in ("bubbles", "both"):
        doc["bubbles"] = bubbles(a)
        print(f"# bubbles: {a.np} ranks, 1 torch thread each, global batch {a.global_batch}, {a.steps} steps, "
              f"medians of {a.reps} launches")
        print(f"# {'lengths':<10} {'split':<26} {'bubble ms/step':>15} {'step ms':>9} {'vs contiguous':>14}")
        for r in doc["bubbles"]["records"]:
            ref = next(x for x in doc["bubbles"]["records"] if x["lengths"] == r["lengths"]
                       and x["variant"] == "contiguous")
            print(f"  {r['lengths']:<10} {r['variant']:<26} {r['bubble_ms_per_step']:>15.2f} {r['step_ms']:>9.1f} "
                  f"{r['bubble_ms_per_step'] / ref['bubble_ms_per_step']:>14.2f}")
    if a.part in ("overlap", "both"):
        doc["overlap"] = overlap(a)
        print(f"# overlap: {a.np} ranks, {a.chunks} chunks, medians of {a.reps} launches (ms per step, slowest rank)")
        print(f"# {'Gb/s':>5} {'compute':>8} {'exchange':>9} {'inline':>8} {'overlap':>8} {'bound':>8} "
              f"{'vs_bound':>9} {'compute x':>10} {'speedup':>8}")
        for r in doc["overlap"]["records"]:
            print(f"  {r['link_gbps']:>5.2f} {r['inline']['compute_ms']:>8.1f} {r['inline']['exchange_ms']:>9.1f} "
                  f"{r['inline']['step_ms']:>8.1f} {r['overlap']['step_ms']:>8.1f} {r['bound_ms']:>8.1f} "
                  f"{r['step_vs_bound']:>9.3f} {r['compute_slowdown']:>10.3f} {r['speedup']:>8.2f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1))
    plot(doc, a.out.with_suffix(".png"))
    print(f"wrote {a.out} and {a.out.with_suffix('.png')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
