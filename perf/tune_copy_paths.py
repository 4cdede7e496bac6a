#!/usr/bin/env python3
"""Measure where the data paths cross over, to set the tuning table.

Two communicators over the same ranks, one per data path (PYMCOLL_COPY
forced at creation), run each collective in alternating blocks; the ratio
of medians says which path wins at each size. The crossover sizes are what
PYMCOLL_INLINE_MAX and PYMCOLL_CMA_MIN should be on this machine.

    mpiexec -n 2 python perf/tune_copy_paths.py [--paths cico,cma] [--min-bytes 4K] [--max-bytes 1M]
        [--colls Bcast,Allgather,Gather,Gatherv,Scatter,Alltoall,Scan,Exscan,Allreduce,Reduce,Reduce_scatter_block]

Any other setting compares the same way, and --with-mpi adds the MPI's own
collective as a last column, e.g. streaming stores off and on:

    mpiexec -n 2 python perf/tune_copy_paths.py --setting PYMCOLL_STREAM_MIN --paths off,1M \
        --min-bytes 1M --max-bytes 32M --with-mpi
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np
from mpi4py import MPI

import pymcoll
from pymcoll.config import parse_bytes


# Collectives whose receive buffer holds one block (or vector) of n bytes.
VECTOR_OUT = ("Scan", "Exscan", "Allreduce", "Reduce", "Reduce_scatter_block")


def make(comm: MPI.Comm, setting: str, value: str) -> pymcoll.Comm:
    os.environ[setting] = value
    try:
        return pymcoll.Comm(comm)
    finally:
        del os.environ[setting]


def call(c: pymcoll.Comm, coll: str, send: np.ndarray, recv: np.ndarray) -> None:
    if coll == "Bcast":
        c.Bcast(recv[: send.size], root=0)
    elif coll == "Gather":
        c.Gather(send, recv, root=0)
    elif coll == "Gatherv":
        n = send.nbytes
        c.Gatherv(send, [recv, [n] * c.size, [i * n for i in range(c.size)], MPI.BYTE], root=0)
    elif coll == "Scatter":
        c.Scatter(recv, send, root=0)
    else:
        getattr(c, coll)(send, recv)


def block_time(c: pymcoll.Comm | MPI.Comm, coll: str, send: np.ndarray, recv: np.ndarray, iters: int) -> float:
    c.Barrier()
    t0 = time.perf_counter()
    for i in range(iters):
        send[0] = i & 0xFF
        call(c, coll, send, recv)
    dt = (time.perf_counter() - t0) / iters
    return MPI.COMM_WORLD.allreduce(dt, op=MPI.MAX)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", default="cico,cma", help="values of --setting, one communicator each")
    ap.add_argument("--setting", default="PYMCOLL_COPY", help="the environment setting compared")
    ap.add_argument("--with-mpi", action="store_true", help="add the MPI's own collective as a column")
    ap.add_argument("--colls", default="Bcast,Allgather,Gather,Scatter,Alltoall")
    ap.add_argument("--min-bytes", default="4K")
    ap.add_argument("--max-bytes", default="1M")
    ap.add_argument("--blocks", type=int, default=9)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    size = world.Get_size()
    paths = args.paths.split(",")
    ours = list(paths)
    comms: dict[str, pymcoll.Comm | MPI.Comm] = {p: make(world, args.setting, p) for p in paths}
    if args.with_mpi:
        comms["mpi"] = world.Dup()
        paths.append("mpi")
    lo, hi = parse_bytes(args.min_bytes, "--min-bytes"), parse_bytes(args.max_bytes, "--max-bytes")
    rows: list[dict[str, Any]] = []
    for coll in args.colls.split(","):
        n = lo
        while n <= hi:
            # n: bytes per rank's block (the whole vector for Scan, Exscan, Allreduce, Reduce).
            # Written, not np.zeros: untouched zero pages all map one shared page, which every
            # read then finds in the cache, and copies from them look faster than from real data.
            send = np.full(n * size if coll in ("Alltoall", "Reduce_scatter_block") else n, 1 + world.Get_rank(),
                           np.uint8)
            recv = np.full(n if coll in VECTOR_OUT else n * size, 255, np.uint8)
            iters = max(5, min(2000, (64 << 20) // max(n * size, 1)))
            med = {}
            samples: dict[str, list[float]] = {p: [] for p in paths}
            for p in paths:
                block_time(comms[p], coll, send, recv, max(2, iters // 4))  # warm up
            for _ in range(args.blocks):
                for p in paths:
                    samples[p].append(block_time(comms[p], coll, send, recv, iters))
            for p in paths:
                med[p] = float(np.median(samples[p])) * 1e6
            rows.append({"collective": coll, "bytes": n, **{f"{p}_us": med[p] for p in paths}})
            if world.Get_rank() == 0:
                # The last setting against the first, then every setting against the MPI.
                ratios = [(ours[-1], ours[0])] if len(ours) > 1 else []
                ratios += [(p, "mpi") for p in ours] if args.with_mpi else []
                print(f"{coll:10s} {n:>9d} B  " + "  ".join(f"{p} {med[p]:9.2f} us" for p in paths)
                      + "".join(f"  {a}/{b} {med[a] / med[b]:5.2f}" for a, b in ratios), flush=True)
            n *= 2
    if world.Get_rank() == 0 and args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"ranks": size, "setting": args.setting, "paths": paths,
                       "mpi": MPI.Get_library_version().splitlines()[0],
                       "rows": rows}, fh, indent=1)
    for c in comms.values():
        c.Free()


if __name__ == "__main__":
    main()
