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
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import commit, pyplot  # noqa: E402

from pymcoll.cli import launch

HERE = Path(__file__).resolve().parent
PARTS = ("splits", "lengths", "ids", "pooled", "pooled_grad", "exchange", "dense_allreduce", "step")


def run(np_: int, a: argparse.Namespace) -> dict[str, Any]:
    program = [sys.executable, "-P", str(HERE / "dlrm_bench_worker.py"), "--configs", a.configs, "--cap",
               str(a.cap), "--blocks", str(a.blocks), "--block-steps", str(a.block_steps)]
    cmd, env = launch.mpiexec_command(np_, program, a.mpiexec)
    print(f"bench_dlrm: running {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{np_} ranks: no result (exit {proc.returncode})\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


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


def plot(launches: list[dict[str, Any]], path: Path) -> bool:
    plt = pyplot("bench_dlrm")
    if plt is None:
        return False
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
        ax.set_ylabel("ms per step (median, slowest rank)")
        ax.set_title(f"DLRM exchange, dim {dim}, global batch {batch}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


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
    doc = {"date": datetime.date.today().isoformat(), "commit": commit(), "configs": a.configs, "cap": a.cap,
           "blocks": a.blocks, "block_steps": a.block_steps, "launches": launches}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1))
    if plot(launches, a.out.with_suffix(".png")):
        print(f"wrote {a.out} and {a.out.with_suffix('.png')}")
    return 0 if all(r["losses_agree"] for x in launches for r in x["records"]) else 1


if __name__ == "__main__":
    sys.exit(main())
