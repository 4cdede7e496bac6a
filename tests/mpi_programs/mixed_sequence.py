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
    # Counts lists reused across calls and changed in place, as a loop that
    # resizes its messages would: a repeated call must see the new counts.
    vcounts = [0] * size
    vdispls = [0] * size
    for i in range(args.calls):
        kind = rng.integers(0, 10)
        n = int(rng.choice(sizes))
        root = int(rng.integers(0, size))
        # Per-rank sizes only some ranks know (v forms): the same draws everywhere.
        counts = [int(rng.choice(sizes)) for _ in range(size)]
        data = np.random.default_rng([i, rank]).integers(-1000, 1000, n).astype(np.int64)
        every = [np.random.default_rng([i, r]).integers(-1000, 1000, n).astype(np.int64) for r in range(size)]
        own = [np.random.default_rng([i, r, 1]).integers(-1000, 1000, counts[r]).astype(np.int64)
               for r in range(size)]
        vcounts[:] = counts
        vdispls[:] = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
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
        elif kind == 4:
            out = np.zeros(size * n, np.int64) if rank == root else None
            comm.Gather(data, out, root=root)
            if rank == root:
                assert (out == np.concatenate(every)).all(), f"call {i}: Gather n={n} root={root}"
        elif kind == 5:
            out = np.full(sum(counts), -1, np.int64) if rank == root else None
            comm.Gatherv(own[rank], [out, vcounts, vdispls, MPI.INT64_T] if rank == root else None, root=root)
            if rank == root:
                assert (out == np.concatenate(own)).all(), f"call {i}: Gatherv counts={counts} root={root}"
        elif kind == 6:
            out = np.full(counts[rank], -1, np.int64)
            comm.Scatterv([np.concatenate(own), vcounts, vdispls, MPI.INT64_T] if rank == root else None, out,
                          root=root)
            assert (out == own[rank]).all(), f"call {i}: Scatterv counts={counts} root={root} rank={rank} bad={np.flatnonzero(out != own[rank])[:5]} of {len(out)} got={out[out != own[rank]][:3]}"
        elif kind == 7:
            out = np.full(sum(counts), -1, np.int64)
            comm.Allgatherv(own[rank], [out, vcounts, vdispls, MPI.INT64_T])
            assert (out == np.concatenate(own)).all(), f"call {i}: Allgatherv counts={counts}"
        elif kind == 8:
            # Rank r sends counts[(r + j) % size] // size elements to rank j.
            def pair(src: int, dst: int) -> int:
                return counts[(src + dst) % size] // size
            blocks = [np.random.default_rng([i, rank, j]).integers(-9, 9, pair(rank, j)).astype(np.int64)
                      for j in range(size)]
            send = np.concatenate(blocks)
            scounts = [pair(rank, j) for j in range(size)]
            rcounts = [pair(j, rank) for j in range(size)]
            out = np.full(sum(rcounts), -1, np.int64)
            comm.Alltoallv([send, scounts, MPI.INT64_T], [out, rcounts, MPI.INT64_T])
            want = [np.random.default_rng([i, j, rank]).integers(-9, 9, pair(j, rank)).astype(np.int64)
                    for j in range(size)]
            assert (out == np.concatenate(want)).all(), f"call {i}: Alltoallv counts={counts}"
        else:
            comm.Barrier()
    comm.Free()
    print(f"rank {rank} mixed ok", flush=True)


if __name__ == "__main__":
    main(body)
