"""The bubble of identical work: how long ranks wait for each other when every rank computes the same.

    python perf/bubble_floor.py                       # 2 ranks -> results/bubble_floor.json, .png
    python perf/bubble_floor.py --np 2 --steps 60 --work-ms 50,250,600

Starts itself under mpiexec. Every rank, pinned to a CPU of its own where the host has one per
rank, with one torch thread, runs the same matrix products per step (sized to about --work-ms
milliseconds on this host, measured once on rank 0 and broadcast, so every rank runs the same
count) and then synchronizes: each rank's arrival time is gathered and a barrier closes the
step. The bubble of a step is the time ranks waited for the last to arrive, summed over ranks,
as pymcoll.algorithms.balance.timeline counts it for training steps. No partition of samples
can remove this part: it is the machine's own noise (other tenants, the hypervisor, frequency),
the floor under every measured bubble of a training step of that length.

Reported per work size: the step time, the bubble per step and as a share of the step, the
systematic part (each rank's mean lateness: one CPU slower than the other through the run) and
the lag-1 autocorrelation of the ranks' difference (near 1: slow drifts a rebalancing by
measured speed could follow; near 0: noise no schedule can predict).
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
from perfutil import plotter, run_record, run_worker, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent


def worker(a: argparse.Namespace) -> None:
    import torch
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    cpus = sorted(os.sched_getaffinity(0))
    pinned = len(cpus) >= size
    if pinned:
        os.sched_setaffinity(0, {cpus[rank]})  # before torch starts a thread: it inherits the CPU
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)

    def work(n: int) -> None:
        for _ in range(n):
            torch.mm(x, y)

    # Products per millisecond, measured on rank 0 (every rank then runs the same count).
    if rank == 0:
        work(50)
        t0 = time.perf_counter()
        work(200)
        per_ms = 200 / ((time.perf_counter() - t0) * 1e3)
    else:
        per_ms = None
    per_ms = comm.bcast(per_ms, root=0)
    records = []
    for target in [float(v) for v in a.work_ms.split(",")]:
        n = max(1, int(round(per_ms * target)))
        durations, waits = [], []
        for step in range(a.warmup + a.steps):
            comm.Barrier()
            t0 = time.perf_counter()
            work(n)
            t1 = time.perf_counter()
            arrived = comm.allgather(t1)  # one clock per host (CLOCK_MONOTONIC)
            if step >= a.warmup:
                durations.append(t1 - t0)
                waits.append(max(arrived) - t1)
        d = comm.gather(durations, root=0)
        w = comm.gather(waits, root=0)
        if rank == 0:
            d = np.asarray(d)
            w = np.asarray(w)
            step_ms = float(np.mean(d.max(axis=0))) * 1e3
            bubble_ms = float(np.mean(w.sum(axis=0))) * 1e3
            late = (d - d.mean(axis=0)) * 1e3  # each rank's lateness against the mean of the ranks, per step
            diff = d[0] - d[1] if size > 1 else np.zeros(d.shape[1])
            ac = float(np.corrcoef(diff[:-1], diff[1:])[0, 1]) if size > 1 and diff.size > 2 and diff.std() > 0 else 0.0
            records.append({"work_ms_asked": target, "products": n, "step_ms": step_ms, "bubble_ms": bubble_ms,
                            "bubble_share": bubble_ms / step_ms, "mean_lateness_ms": late.mean(axis=1).tolist(),
                            "lag1_autocorrelation": ac, "durations_ms": (d * 1e3).round(3).tolist()})
            print(f"  work {target:6.0f} ms: step {step_ms:7.1f} ms, bubble {bubble_ms:6.2f} ms/step "
                  f"({100 * bubble_ms / step_ms:4.1f}%), ranks' mean lateness "
                  f"{', '.join(f'{v:+.2f}' for v in late.mean(axis=1))} ms, lag-1 autocorrelation {ac:+.2f}",
                  file=sys.stderr, flush=True)
    if rank == 0:
        print("RESULT " + json.dumps({"ranks": size, "pinned": pinned, "cpus": len(cpus), "records": records}),
              flush=True)


@plotter("bubble_floor")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    """Per work size, each step's difference between the ranks' compute times."""
    recs = doc["records"]
    fig, axes = plt.subplots(1, len(recs), figsize=(4 * len(recs), 3.4), squeeze=False)
    for ax, r in zip(axes[0], recs, strict=True):
        d = np.asarray(r["durations_ms"])
        if d.shape[0] > 1:
            ax.plot(d[0] - d[1], ".-", lw=0.8)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"step {r['step_ms']:.0f} ms: bubble {100 * r['bubble_share']:.1f}%", fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("rank 0 - rank 1 compute (ms)")
    fig.suptitle(f"Identical work on {doc['ranks']} ranks ({doc['cpus']} CPUs, pinned: {doc['pinned']})",
                 fontsize=10)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--work-ms", default="50,250,600", help="compute per step, ms (comma-separated)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bubble_floor.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    if a.np < 2:
        ap.error("--np: at least 2 ranks (a bubble needs someone to wait for)")
    args = ["--worker", "--steps", str(a.steps), "--warmup", str(a.warmup), "--work-ms", a.work_ms]
    doc = run_worker(a.np, __file__, args, timeout=3600)
    if doc is None:
        return 1
    doc = run_record(steps=a.steps, **doc)
    print(f"# identical work, {doc['ranks']} ranks on {doc['cpus']} CPUs (pinned: {doc['pinned']}), "
          f"{a.steps} steps each")
    print(f"# {'work ms':>8} {'step ms':>8} {'bubble ms':>10} {'share':>6} {'lag-1':>6}")
    for r in doc["records"]:
        print(f"  {r['work_ms_asked']:8.0f} {r['step_ms']:8.1f} {r['bubble_ms']:10.2f} "
              f"{100 * r['bubble_share']:5.1f}% {r['lag1_autocorrelation']:+6.2f}")
    write_results(doc, a.out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
