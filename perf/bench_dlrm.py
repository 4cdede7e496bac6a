"""DLRM embedding exchange: pymcoll against torch.distributed gloo, per step and per exchange.

    python perf/bench_dlrm.py                      # 1, 2 and 4 ranks -> results/dlrm_exchange.{json,png}
    python perf/bench_dlrm.py --np 2 --configs 16:2048 --blocks 4

For each rank count it starts perf/dlrm_bench_worker.py under mpiexec. The
worker trains the same DLRM (Criteo Kaggle tables capped at --cap rows) twice
in one launch, one with the exchange and dense Allreduce on pymcoll, one on
gloo's all_to_all_single and all_reduce, alternating blocks of steps, and
reports medians of the slowest rank's time per step and per exchange. The
two must train alike (same losses), which the worker checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, run_worker, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
PARTS = ("splits", "lengths", "ids", "pooled", "pooled_grad", "exchange", "dense_allreduce", "step")


def run(np_: int, a: argparse.Namespace) -> dict[str, Any]:
    args = ["--configs", a.configs, "--cap", str(a.cap), "--blocks", str(a.blocks), "--block-steps", str(a.block_steps)]
    result = run_worker(np_, str(HERE / "dlrm_bench_worker.py"), args, a.timeout, a.mpiexec)
    if result is None:
        raise RuntimeError(f"{np_} ranks: the worker failed or printed no result (its output's tail is above)")
    return result


def table(launches: list[dict[str, Any]]) -> str:
    lines = []
    configs = sorted({(r["dim"], r["global_batch"]) for x in launches for r in x["records"]})
    for dim, batch in configs:
        lines.append(f"# DLRM dim {dim}, global batch {batch}: ms per step, median of the slowest rank")
        lines.append(f"# {'ranks':>5} {'part':<16}{'pymcoll':>10}{'gloo':>10}{'vs_ref':>8}")
        for x in launches:
            recs = {r["impl"]: r for r in x["records"] if (r["dim"], r["global_batch"]) == (dim, batch)}
            if set(recs) != {"pymcoll", "gloo"}:
                continue
            for part in PARTS:
                p, g = recs["pymcoll"]["median_ms"][part], recs["gloo"]["median_ms"][part]
                ratio = f"{p / g:8.2f}" if g > 0 else f"{'-':>8}"
                lines.append(f"  {x['ranks']:>5} {part:<16}{p:>10.3f}{g:>10.3f}{ratio}")
            if not recs["pymcoll"]["losses_agree"]:
                lines.append(f"  {x['ranks']:>5} WARNING: the two trainings' losses differ")
    return "\n".join(lines)


@plotter("bench_dlrm")
def plot(plt: Any, launches: list[dict[str, Any]]) -> Any:
    configs = sorted({(r["dim"], r["global_batch"]) for x in launches for r in x["records"]})
    fig, axes = plt.subplots(1, len(configs), figsize=(6 * len(configs), 4), squeeze=False)
    for ax, (dim, batch) in zip(axes[0], configs, strict=True):
        labels, width = [], 0.2
        for i, x in enumerate(launches):
            recs = {r["impl"]: r for r in x["records"] if (r["dim"], r["global_batch"]) == (dim, batch)}
            bars = (("pymcoll", "exchange", "tab:blue"), ("gloo", "exchange", "tab:orange"),
                    ("pymcoll", "step", "tab:cyan"), ("gloo", "step", "tab:red"))
            for j, (impl, part, color) in enumerate(bars):
                ax.bar(i + (j - 1.5) * width, recs[impl]["median_ms"][part], width, color=color,
                       label=f"{impl} {part}" if i == 0 else None)
            labels.append(f"{x['ranks']} rank(s)")
        ax.set_xticks(range(len(launches)), labels)
        ax.set(ylabel="ms per step (median, slowest rank)", title=f"DLRM exchange, dim {dim}, global batch {batch}")
        ax.legend(fontsize=8)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", default="1,2,4", help="rank counts, comma-separated")
    ap.add_argument("--configs", default="16:2048,64:8192", help="dim:global_batch pairs")
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--block-steps", type=int, default=5)
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "dlrm_exchange.json")
    a = ap.parse_args()
    launches = [run(int(n), a) for n in a.np.split(",")]
    text = table(launches)
    print(text)
    doc = run_record(configs=a.configs, cap=a.cap, blocks=a.blocks, block_steps=a.block_steps, launches=launches)
    write_results(doc, a.out, lambda d, png: plot(d["launches"], png))
    return 0 if all(r["losses_agree"] for x in launches for r in x["records"]) else 1


if __name__ == "__main__":
    sys.exit(main())
