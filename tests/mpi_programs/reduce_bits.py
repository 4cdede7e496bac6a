"""Reduce gives the bits Allreduce gives, at every root, whichever algorithm each one takes.

Float vectors whose elements span twelve orders of magnitude: a different order of combining
changes their sums' low bits, so any algorithm that combines in another order shows up. Sizes
on both sides of the Reduce's switch to the lanes (32 KiB). Rank 0 prints "reduce bits ok", or
the first mismatch of any rank.

Usage: python -m mpi_programs.reduce_bits
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import pymcoll

COUNTS = (1, 7, 100, 1000, 4096, 4097, 8192, 8193, 20000)


def main() -> None:
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    wrong: list[str] = []
    for count in COUNTS:
        for dtype in (np.float32, np.float64):
            g = np.random.default_rng([count, rank])
            x = (g.standard_normal(count) * 10.0 ** g.integers(-6, 7, count)).astype(dtype)
            ref = np.empty_like(x)
            comm.Allreduce(x, ref)
            for root in range(size):
                out = np.empty_like(x) if rank == root else None
                comm.Reduce(x, out, root=root)
                if rank == root and out.tobytes() != ref.tobytes():
                    wrong.append(f"{np.dtype(dtype).name} count={count} root={root}: "
                                 f"{int(np.count_nonzero(out != ref))} elements differ")
    everyone = MPI.COMM_WORLD.allgather(wrong)
    bad = [w for ws in everyone for w in ws]
    lay = comm.layout
    if rank == 0:
        print(f"{lay.nnodes} nodes, {lay.lanes} lanes: " + ("reduce bits ok" if not bad else "MISMATCH " + bad[0]),
              flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
