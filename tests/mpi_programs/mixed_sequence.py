"""Collectives of different kinds interleaved at random (the same sequence on
every rank), each result checked: the data area changes layout between
consecutive calls, and cells must never be overwritten while a peer still
reads them.

Usage: python -m mpi_programs.mixed_sequence [--calls N] [--seed S]
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import CI, main


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=150 if CI else 600)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    rng = np.random.default_rng(args.seed)  # same draws on every rank
    sizes = [0, 1, 7, 100, 1000, 5000, 40000, 200000]
    for i in range(args.calls):
        kind = rng.integers(0, 5)
        n = int(rng.choice(sizes))
        root = int(rng.integers(0, size))
        data = np.random.default_rng([i, rank]).integers(-1000, 1000, n).astype(np.int64)
        every = [np.random.default_rng([i, r]).integers(-1000, 1000, n).astype(np.int64) for r in range(size)]
        if kind == 0:
            buf = data.copy() if rank == root else np.zeros(n, np.int64)
            comm.Bcast(buf, root=root)
            assert (buf == every[root]).all(), f"call {i}: Bcast n={n} root={root}"
        elif kind == 1:
            out = np.zeros(size * n, np.int64)
            comm.Allgather(data, out)
            assert (out == np.concatenate(every)).all(), f"call {i}: Allgather n={n}"
        elif kind == 2:
            out = np.zeros(n, np.int64)
            comm.Allreduce(data, out)
            assert (out == sum(every)).all(), f"call {i}: Allreduce n={n}"
        elif kind == 3:
            out = np.zeros(n, np.int64) if rank == root else None
            comm.Reduce(data, out, op=MPI.MAX, root=root)
            if rank == root:
                assert (out == np.max(every, axis=0)).all() if n else True, f"call {i}: Reduce n={n}"
        else:
            comm.Barrier()
    comm.Free()
    print(f"rank {rank} mixed ok", flush=True)


if __name__ == "__main__":
    main(body)
