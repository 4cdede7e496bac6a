"""Collective faults injected for the trace analyzer's tests (4 ranks, PYMCOLL_TRACE set).

    mpiexec -n 4 python -m mpi_programs.trace_faults MODE [K]

A loop alternates Allreduce (4 doubles, even call numbers) and Bcast
(32 bytes from rank 0, odd call numbers), CALLS calls in all, the way a
training loop that logs errors and carries on would. MODE:
  clean      no fault
  sleep      rank 3 sleeps SLEEP s before call #K (the others time out)
  skip       rank 2 skips call #K (a Bcast)
  coll       rank 1 calls Bcast at #K where the others call Allreduce
  count      rank 1 calls Allreduce with 5 doubles at #K (the others 4)
  straggler  rank 2 arrives 20 ms late at every call
Collectives are numbered from 1 on the communicator, as in the trace.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

import pymcoll

CALLS = 12
SLEEP = 5.0


def call(comm: pymcoll.Comm, kind: str, count: int = 4) -> None:
    """One collective; an error is printed and the loop goes on."""
    try:
        if kind == "Allreduce":
            a = np.full(count, comm.rank + 1.0)
            b = np.empty(count)
            comm.Allreduce(a, b)
        else:
            buf = np.full(32, comm.rank, dtype=np.uint8)
            comm.Bcast(buf, root=0)
    except (pymcoll.Error, ValueError) as exc:
        print(f"rank {comm.rank}: {kind} failed: {type(exc).__name__}: {exc}", flush=True)


def main() -> None:
    mode = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank = comm.rank
    for n in range(1, CALLS + 1):
        kind = "Allreduce" if n % 2 == 0 else "Bcast"
        if mode == "sleep" and rank == 3 and n == k:
            time.sleep(SLEEP)
        if mode == "skip" and rank == 2 and n == k:
            continue
        if mode == "coll" and rank == 1 and n == k:
            kind = "Bcast" if kind == "Allreduce" else "Allreduce"
        if mode == "straggler" and rank == 2:
            time.sleep(0.02)
        call(comm, kind, 5 if mode == "count" and rank == 1 and n == k else 4)
    print(f"rank {rank}: done, trace id {comm.trace_id}", flush=True)


if __name__ == "__main__":
    main()
