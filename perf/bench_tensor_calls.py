#!/usr/bin/env python3
"""Per-call time of small collectives on torch CPU tensors, numpy arrays and mpi4py's buffer specs
([array, MPI.FLOAT], made anew for every call as application code does), pymcoll beside mpi4py.

mpi4py hands a torch tensor to MPI through DLPack; pymcoll takes contiguous CPU tensors through a
numpy view, or (Allreduce) straight from their data pointers, and a spec whose datatype is the
array's own element type as the bare array. Each cell is the median over --blocks blocks of
--iters calls on the same buffers, the six variants interleaved block by block in one launch
(docs/measure.md), OSU-style: a barrier before each block, none inside.

    python perf/bench_tensor_calls.py [--np 2] [--colls allreduce,bcast,allgather] [--sizes 8,256,4096]

Results: perf/results/tensor_calls_np<N>.json and .png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from perfutil import add_launch_options, plotter, require_known, run_record, worker_or_launch, write_results

HERE = Path(__file__).resolve().parent
VARIANTS = ("pymcoll torch", "mpi4py torch", "pymcoll numpy", "mpi4py numpy", "pymcoll spec", "mpi4py spec")


def call(comm: Any, coll: str, a: Any, b: Any) -> None:
    if coll == "allreduce":
        comm.Allreduce(a, b)
    elif coll == "bcast":
        comm.Bcast(a, root=0)
    else:
        comm.Allgather(a, b)


def call_spec(comm: Any, coll: str, a: Any, b: Any, dt: Any) -> None:
    """The same call with [buffer, datatype] specs, made anew each call as application code does."""
    if coll == "allreduce":
        comm.Allreduce([a, dt], [b, dt])
    elif coll == "bcast":
        comm.Bcast([a, dt], root=0)
    else:
        comm.Allgather([a, dt], [b, dt])


def worker(a: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from mpi4py import MPI

    import pymcoll

    world = MPI.COMM_WORLD
    ours = pymcoll.Comm(world.Dup())
    theirs = world.Dup()
    size = world.Get_size()
    rows = []
    for coll in a.colls:
        for nbytes in a.sizes:
            n = max(1, nbytes // 4)
            out_n = n * size if coll == "allgather" else n
            bufs = {"torch": (torch.ones(n), torch.empty(out_n)),
                    "numpy": (np.ones(n, np.float32), np.empty(out_n, np.float32))}
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for block in range(a.blocks + 1):
                for v in VARIANTS:
                    who, kind = v.split()
                    comm = ours if who == "pymcoll" else theirs
                    x, y = bufs["numpy" if kind == "spec" else kind]
                    world.Barrier()
                    t = time.perf_counter()
                    if kind == "spec":
                        for _ in range(a.iters):
                            call_spec(comm, coll, x, y, MPI.FLOAT)
                    else:
                        for _ in range(a.iters):
                            call(comm, coll, x, y)
                    dt = (time.perf_counter() - t) / a.iters
                    if block:  # the first block warms up
                        times[v].append(dt)
            # The slowest rank's median is the call's time.
            med = {v: world.allreduce(statistics.median(ts), op=MPI.MAX) for v, ts in times.items()}
            rows.append({"collective": coll, "bytes": n * 4, **{f"{v} us": 1e6 * m for v, m in med.items()}})
            if world.Get_rank() == 0:
                cells = "  ".join(f"{v} {1e6 * m:7.1f}" for v, m in med.items())
                ratio = med["pymcoll torch"] / med["mpi4py torch"]
                print(f"{coll:10s} {n * 4:6d} B  {cells}  us   torch vs_ref {ratio:.2f}", flush=True)
    if world.Get_rank() == 0:
        doc = run_record(ranks=size, iters=a.iters, blocks=a.blocks, torch=torch.__version__,
                         mpi=MPI.Get_library_version().splitlines()[0], rows=rows)
        write_results(doc, Path(a.out), plot)
    ours.Free()
    theirs.Free()


@plotter("bench_tensor_calls.py")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    colls = sorted({r["collective"] for r in doc["rows"]})
    fig, axes = plt.subplots(1, len(colls), figsize=(4.2 * len(colls), 3.4), squeeze=False)
    for ax, coll in zip(axes[0], colls, strict=True):
        rs = [r for r in doc["rows"] if r["collective"] == coll]
        for v in VARIANTS:
            ax.plot([r["bytes"] for r in rs], [r[f"{v} us"] for r in rs], marker="o", label=v)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("us per call")
        ax.set_title(f"{coll}, {doc['ranks']} ranks")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--colls", type=lambda s: s.split(","), default=["allreduce", "bcast", "allgather"])
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[8, 256, 4096])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=7)
    add_launch_options(ap, timeout=600)
    a = ap.parse_args()
    require_known(ap, "--colls", a.colls, ("allreduce", "bcast", "allgather"))
    a.out = a.out or str(HERE / "results" / f"tensor_calls_np{a.np}.json")
    return worker_or_launch(__file__, a, worker, hint="lower --iters or --blocks")


if __name__ == "__main__":
    sys.exit(main())
