#!/usr/bin/env python3
"""Copy path chosen per launch (trials) against the crossover table and MPI, in one launch.

Three communicators over the same ranks: the MPI library's own (mpi4py), pymcoll with the
crossover table alone (PYMCOLL_PATH_TRIALS=0) and pymcoll with per-launch trials (the default:
the first six blocking calls of each collective and size class take copy in/copy out and
single copy in turn, and the faster stays). Each cell is the median over --blocks blocks of
calls on the same buffers, the three variants interleaved block by block (OSU-style: a barrier
before a block, none inside); the warm-up block holds the trials. The slowest rank's median is
the call's time.

    python perf/bench_path_trials.py [--np 2] [--colls bcast,allgather,...] [--sizes 64K,256K,...]

Results: perf/results/path_trials_np<N>.json and .png.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from perfutil import add_launch_options, plotter, require_known, run_record, worker_or_launch, write_results

HERE = Path(__file__).resolve().parent
VARIANTS = ("mpi", "table", "trials")
COLLS = {"bcast": "Bcast", "allgather": "Allgather", "gather": "Gather", "scatter": "Scatter",
         "alltoall": "Alltoall", "reduce_scatter_block": "Reduce_scatter_block"}


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def caller(comm: Any, coll: str, n: int, size: int) -> Callable[[], None]:
    """One call of `coll` with n float64 per rank (block) on fixed buffers."""
    import numpy as np
    from mpi4py import MPI

    mine = np.ones(n)
    whole = np.ones(n * size)
    out = np.empty(n * size)
    if coll == "bcast":
        return lambda: comm.Bcast(mine, root=0)
    if coll == "allgather":
        return lambda: comm.Allgather(mine, out)
    if coll == "gather":
        return lambda: comm.Gather(mine, out, root=0)
    if coll == "scatter":
        return lambda: comm.Scatter(whole, mine, root=0)
    if coll == "alltoall":
        return lambda: comm.Alltoall(whole, out)
    return lambda: comm.Reduce_scatter_block(whole, mine, op=MPI.SUM)


def worker(a: argparse.Namespace) -> None:
    from mpi4py import MPI

    import pymcoll

    world = MPI.COMM_WORLD
    size, rank = world.Get_size(), world.Get_rank()
    theirs = world.Dup()
    os.environ["PYMCOLL_PATH_TRIALS"] = "0"
    table = pymcoll.Comm(world.Dup())
    os.environ["PYMCOLL_PATH_TRIALS"] = "1"
    trials = pymcoll.Comm(world.Dup())
    comms = {"mpi": theirs, "table": table, "trials": trials}
    local = table.layout.local_size
    rows = []
    if rank == 0:
        print(f"{'collective':>22s} {'bytes':>9s} {'mpi us':>9s} {'table us':>9s} {'trials us':>9s} "
              f"{'table':>6s} {'trials':>6s}  table path / trials' choice", flush=True)
    for coll in a.colls:
        for nbytes in a.sizes:
            n = max(1, nbytes // 8)
            iters = max(a.min_iters, min(a.iters, (256 << 20) // (nbytes * size)))
            calls = {v: caller(c, coll, n, size) for v, c in comms.items()}
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for block in range(a.blocks + 1):
                for v in VARIANTS:
                    run = calls[v]
                    world.Barrier()
                    t = time.perf_counter()
                    # The warm-up block runs at least the trials (eight calls).
                    for _ in range(iters if block else max(iters, 10)):
                        run()
                    if block:
                        times[v].append((time.perf_counter() - t) / iters)
            med = {v: world.allreduce(statistics.median(ts), op=MPI.MAX) for v, ts in times.items()}
            name = COLLS[coll]
            least = pymcoll.single_copy_min(name, local)
            table_path = "single copy" if least and nbytes >= least else "cells"
            tried = [t for t in trials.path_trials()
                     if t["collective"] == name and t["min_bytes"] <= nbytes < 2 * t["min_bytes"]]
            row = {"collective": name, "bytes": n * 8, "iters": iters, **{f"{v} us": 1e6 * m for v, m in med.items()},
                   "table_path": table_path, "trials_choice": tried[0]["chosen"] if tried else None,
                   "trial_cells_us": 1e6 * tried[0]["cells_s"] if tried else None,
                   "trial_single_copy_us": 1e6 * tried[0]["single_copy_s"] if tried else None}
            rows.append(row)
            if rank == 0:
                print(f"{name:>22s} {n * 8:9d} {row['mpi us']:9.1f} {row['table us']:9.1f} {row['trials us']:9.1f} "
                      f"{med['table'] / med['mpi']:6.2f} {med['trials'] / med['mpi']:6.2f}  "
                      f"{table_path} / {row['trials_choice']}"
                      + (f" (trials: cells {row['trial_cells_us']:.1f}, single copy {row['trial_single_copy_us']:.1f} us)"
                         if tried else ""), flush=True)
    if rank == 0:
        doc = run_record(ranks=size, local_ranks=local, blocks=a.blocks,
                         mpi=MPI.Get_library_version().splitlines()[0], rows=rows)
        write_results(doc, Path(a.out), plot)
    table.Free()
    trials.Free()
    theirs.Free()


@plotter("bench_path_trials.py")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    colls = list(dict.fromkeys(r["collective"] for r in doc["rows"]))
    cols = min(3, len(colls))
    rows_n = (len(colls) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.3 * cols, 3.3 * rows_n), squeeze=False)
    for ax, coll in zip(axes.flat, colls):
        rs = [r for r in doc["rows"] if r["collective"] == coll]
        x = [r["bytes"] for r in rs]
        for v in ("table", "trials"):
            ax.plot(x, [r[f"{v} us"] / r["mpi us"] for r in rs], marker="o", label=f"pymcoll {v} / MPI")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("time / MPI's")
        ax.set_title(f"{coll}, {doc['ranks']} ranks")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(colls):]:
        ax.axis("off")
    axes[0][0].legend(fontsize=8)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--colls", type=lambda s: s.split(","), default=list(COLLS))
    ap.add_argument("--sizes", type=lambda s: [parse_size(x) for x in s.split(",")],
                    default=[64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20])
    ap.add_argument("--iters", type=int, default=200, help="calls per block at most (fewer for large messages)")
    ap.add_argument("--min-iters", type=int, default=10, help="calls per block at least")
    ap.add_argument("--blocks", type=int, default=5)
    add_launch_options(ap, timeout=900)
    a = ap.parse_args()
    require_known(ap, "--colls", a.colls, list(COLLS))
    a.out = a.out or str(HERE / "results" / f"path_trials_np{a.np}.json")
    return worker_or_launch(__file__, a, worker, hint="lower --iters or --blocks, or fewer --sizes")


if __name__ == "__main__":
    sys.exit(main())
