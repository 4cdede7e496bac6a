"""Rooted collectives across nodes called back to back, results checked only
at the end: the lanes' tree gives each call the next slot of a ring of node
buffers, so a rank that finished a call starts the next ones while the
others still read theirs. Sizes cross the slot (the data area over the ring's
slots) and the whole data area. The calls come in loops of one collective,
root and size, at whose start one rank dawdles, so that the others run as
far ahead as the ring lets them; Allgather (the whole node buffer) and
Barrier calls are mixed in, so the ring restarts after them.

Usage: python -m mpi_programs.tree_run_ahead [--calls N] [--seed S]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import CI, main


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400 if CI else 1500)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    assert comm.layout.nnodes >= 2, "run with PYMCOLL_NODE_SIZE so that there are several nodes"
    rng = np.random.default_rng(args.seed)  # the same draws on every rank
    # Blocks in int64 elements: one element, around a line, and around the slots and the whole
    # area of a 64 KiB data area (slots of 8 or 32 KiB) for this many ranks.
    edges = sorted({max(1, (b // 8) // size + d) for b in (8 << 10, 32 << 10, 64 << 10) for d in (-1, 0, 1)})
    blocks = [1, 7, 8, 9, 100, *edges]
    calls = []
    late = {}
    while len(calls) < args.calls:
        # A loop of one collective with one root and size (as a data loader's), longer than the
        # ring; one rank dawdles at its start, so that the others run as far ahead as the ring
        # lets them; then and now a collective of another layout.
        kind = str(rng.choice(["bcast", "scatter", "gather"]))
        n, root = int(rng.choice(blocks)), int(rng.integers(0, size))
        late[len(calls)] = int(rng.integers(0, size))
        calls += [(kind, n, root)] * int(rng.integers(1, 40))
        if rng.random() < 0.2:
            calls.append((str(rng.choice(["allgather", "barrier"])), n, root))
    # Every input and output buffer made before the loop, one per call, so that the calls run
    # back to back and a rank's results stay put until they are checked.
    inputs, outputs = [], []
    for i, (kind, n, root) in enumerate(calls):
        mine = np.random.default_rng([args.seed, i, rank]).integers(-10**9, 10**9, n * size)
        if kind == "bcast":
            inputs.append(None)
            outputs.append(mine[:n].copy() if rank == root else np.full(n, -1, np.int64))
        elif kind == "scatter":
            inputs.append(mine if rank == root else None)
            outputs.append(np.full(n, -1, np.int64))
        elif kind in ("gather", "allgather"):
            inputs.append(mine[:n].copy())
            outputs.append(np.full(n * size, -1, np.int64) if kind == "allgather" or rank == root else None)
        else:
            inputs.append(None)
            outputs.append(None)
    comm.Barrier()
    for i, (kind, n, root) in enumerate(calls):
        if late.get(i) == rank:
            time.sleep(0.005)
        if kind == "bcast":
            comm.Bcast(outputs[i], root=root)
        elif kind == "scatter":
            comm.Scatter(inputs[i], outputs[i], root=root)
        elif kind == "gather":
            comm.Gather(inputs[i], outputs[i], root=root)
        elif kind == "allgather":
            comm.Allgather(inputs[i], outputs[i])
        else:
            comm.Barrier()
    bad = []
    for i, (kind, n, root) in enumerate(calls):

        def of(r: int) -> np.ndarray:
            return np.random.default_rng([args.seed, i, r]).integers(-10**9, 10**9, n * size)
        if kind == "bcast":
            want = of(root)[:n]
        elif kind == "scatter":
            want = of(root)[rank * n:(rank + 1) * n]
        elif kind == "allgather" or (kind == "gather" and rank == root):
            want = np.concatenate([of(r)[:n] for r in range(size)])
        else:
            continue
        if not np.array_equal(outputs[i], want):
            bad.append(f"call {i} {kind} block={n} root={root}: {int(np.sum(outputs[i] != want))} elements wrong")
    assert not bad, f"rank {rank}: " + "; ".join(bad[:5])
    comm.Free()
    print(f"rank {rank} run-ahead ok ({len(calls)} calls)", flush=True)


if __name__ == "__main__":
    main(body)
