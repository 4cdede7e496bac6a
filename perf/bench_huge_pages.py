#!/usr/bin/env python3
"""Large collectives on buffers that sit on 4 KiB pages (torch CPU tensors, malloc'd memory), with
the exposed buffers collapsed into huge pages on their second exposure (PYMCOLL_HUGE_PAGES=auto)
and without (off), beside the MPI's own on the same two sets of buffers.

A peer reads (or writes) an exposed buffer through the kernel's single copy, which pins its pages
one at a time: on 4 KiB pages that runs at a fraction of memcpy, on 2 MiB pages near it. Two
communicators of the same ranks, one per setting, each with its own buffers; every variant runs in
alternating blocks in one launch (docs/measure.md). Single copy is forced (PYMCOLL_COPY=cma) so
that both settings take the same path. The first two calls of the "auto" side are timed apart: the
second pays the collapse.

    python perf/bench_huge_pages.py [--np 2] [--sizes 4M,16M,64M] [--colls allreduce,reduce_scatter_block,allgather,bcast]

Results: perf/results/huge_pages_np<N>.json and .png.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # perfutil, also under python -P
from perfutil import add_launch_options, plotter, require_known, run_record, worker_or_launch, write_results  # noqa: E402

COLLS = ("allreduce", "reduce_scatter_block", "allgather", "bcast")
VARIANTS = ("pymcoll, huge pages", "pymcoll, 4 KiB pages", "MPI, huge pages", "MPI, 4 KiB pages")


def buffers(nbytes: int, ranks: int) -> dict[str, Any]:
    """Send and receive buffers of one set, on 4 KiB pages: torch tensors where torch is installed
    (its CPU allocator asks for no huge pages), else 64-byte aligned malloc'd memory."""
    import numpy as np
    try:
        import torch

        def make(n: int) -> np.ndarray:
            return torch.ones(n // 4, dtype=torch.float32).numpy()
        kind = "torch CPU tensors"
    except ImportError:
        import ctypes
        libc = ctypes.CDLL(None)

        def make(n: int) -> np.ndarray:
            raw = ctypes.c_void_p(0)
            if libc.posix_memalign(ctypes.byref(raw), 64, ctypes.c_size_t(n)) != 0:
                raise MemoryError(n)
            a = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(raw.value)).view(np.float32)
            a[:] = 1.0
            return a  # kept for the process's life
        kind = "malloc'd memory"
    return {"send": make(nbytes), "full": make(nbytes), "part": make(nbytes // ranks), "kind": kind}


def call(comm: Any, coll: str, b: dict[str, Any]) -> None:
    if coll == "allreduce":
        comm.Allreduce(b["send"], b["full"])
    elif coll == "reduce_scatter_block":
        comm.Reduce_scatter_block(b["send"], b["part"])
    elif coll == "allgather":
        comm.Allgather(b["part"], b["full"])
    else:
        comm.Bcast(b["send"], root=0)


def worker(a: argparse.Namespace) -> None:
    from mpi4py import MPI

    import pymcoll

    world = MPI.COMM_WORLD
    os.environ["PYMCOLL_COPY"] = "cma"
    os.environ["PYMCOLL_HUGE_PAGES"] = "auto"
    on = pymcoll.Comm(world.Dup())
    os.environ["PYMCOLL_HUGE_PAGES"] = "off"
    off = pymcoll.Comm(world.Dup())
    mpi = world.Dup()
    n = world.Get_size()
    records = []
    for nbytes in a.sizes:
        sets = {"on": buffers(nbytes, n), "off": buffers(nbytes, n)}
        for coll in a.colls:
            runs = {VARIANTS[0]: (on, sets["on"]), VARIANTS[1]: (off, sets["off"]),
                    VARIANTS[2]: (mpi, sets["on"]), VARIANTS[3]: (mpi, sets["off"])}
            first = []
            for _ in range(2):  # the auto side's first exposure, then the one that collapses
                world.Barrier()
                t = time.perf_counter()
                call(on, coll, sets["on"])
                first.append(world.allreduce(time.perf_counter() - t, op=MPI.MAX) * 1e3)
            for comm, b in runs.values():
                for _ in range(a.warmup):
                    call(comm, coll, b)
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(a.blocks):
                for v, (comm, b) in runs.items():
                    world.Barrier()
                    t = time.perf_counter()
                    for _ in range(a.iters):
                        call(comm, coll, b)
                    times[v].append(world.allreduce((time.perf_counter() - t) / a.iters, op=MPI.MAX) * 1e6)
            med = {v: statistics.median(ts) for v, ts in times.items()}
            rec = {"coll": coll, "bytes": nbytes, "median_us": med, "block_us": times,
                   "first_calls_ms": first, "huge_vs_4k": med[VARIANTS[0]] / med[VARIANTS[1]],
                   "vs_mpi_4k": med[VARIANTS[0]] / med[VARIANTS[3]], "kind": sets["on"]["kind"]}
            records.append(rec)
            if world.rank == 0:
                print(f"{coll:22s} {nbytes >> 20:4d} MiB  " + "  ".join(f"{v}: {med[v]:9.1f}" for v in VARIANTS)
                      + f"  huge/4K {rec['huge_vs_4k']:.2f}  first calls {first[0]:.1f}, {first[1]:.1f} ms",
                      flush=True)
    stats = world.gather(on.huge_pages(), root=0)
    if world.rank == 0:
        doc = {"header": run_record(script="perf/bench_huge_pages.py", ranks=n, sizes=a.sizes, colls=a.colls,
                                    blocks=a.blocks, iters=a.iters, buffers=records[0]["kind"] if records else None,
                                    kernel=os.uname().release),
               "huge_pages_per_rank": stats, "records": records}
        write_results(doc, Path(a.out), plot)
    for c in (on, off):
        c.Free()
    mpi.Free()


@plotter("bench_huge_pages")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    recs = doc["records"]
    colls = list(dict.fromkeys(r["coll"] for r in recs))
    fig, axes = plt.subplots(1, len(colls), figsize=(3.6 * len(colls), 3.6), squeeze=False)
    for ax, coll in zip(axes[0], colls):
        sel = [r for r in recs if r["coll"] == coll]
        x = [r["bytes"] >> 20 for r in sel]
        for v, style in zip(VARIANTS, ("o-", "o--", "s-", "s--")):
            ax.plot(x, [r["median_us"][v] / 1e3 for r in sel], style, label=v)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("MiB")
        ax.set_title(coll, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("ms per call (median of blocks)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"single copy from 4 KiB pages vs huge pages, {doc['header']['ranks']} ranks "
                 f"({doc['header']['buffers']})", fontsize=10)
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--sizes", default="4M,16M,64M", help="comma list of buffer sizes (K/M suffixes)")
    ap.add_argument("--colls", default=",".join(COLLS), help="comma list of " + ",".join(COLLS))
    ap.add_argument("--blocks", type=int, default=7, help="timed blocks per variant (default 7)")
    ap.add_argument("--iters", type=int, default=5, help="calls per block (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per variant after the first two")
    add_launch_options(ap, timeout=900)
    a = ap.parse_args(argv)
    a.colls = [c.strip() for c in a.colls.split(",") if c.strip()]
    require_known(ap, "--colls", a.colls, COLLS)
    from pymcoll.config import parse_bytes  # the options' size parser: 4M, 64K, 1G

    try:
        a.sizes = [parse_bytes(s, "--sizes") for s in a.sizes.split(",") if s.strip()]
    except ValueError as exc:
        ap.error(str(exc))
    a.out = a.out or str(HERE / "results" / f"huge_pages_np{a.np}.json")
    return worker_or_launch(__file__, a, worker, hint="fewer --sizes or --blocks")


if __name__ == "__main__":
    sys.exit(main())
