"""A rank arrives at a single-copy collective after the others gave up on
it: it must not touch their buffers any more. The on-time ranks time out,
then reuse their buffers (as a program that handled the error does); the
late rank's call must raise PeerFailedError without writing into the
root's receive buffer (Gather, Gatherv: the senders store into it) and
without returning what the root's reused send buffer now holds (Scatter,
Bcast: the receivers read it).

Usage: PYMCOLL_CMA_MIN=64K python -m mpi_programs.late_single_copy TIMEOUT_SECONDS
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import free_and_recover, main

BLOCK = 1 << 20  # bytes per rank, above the 64 KiB crossover the test sets
REUSED = 0xEE    # what the on-time ranks write into their buffers after the timeout


class Case:
    """One collective: `call` runs it, `reuse` overwrites the buffers after a
    failure, `intact` says whether a buffer the late rank may not touch is
    still as reused, `late_result_ok` whether a late call that returned holds
    the data it should (never the reused bytes)."""

    def __init__(self, comm: pymcoll.Comm) -> None:
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size

    def call(self) -> None:
        raise NotImplementedError

    def reuse(self) -> None:
        raise NotImplementedError

    def intact(self) -> bool:
        raise NotImplementedError

    def late_result_ok(self) -> bool:
        raise NotImplementedError


class GatherStore(Case):
    """Gather: every sender stores its block into the root's receive buffer."""

    def __init__(self, comm: pymcoll.Comm) -> None:
        super().__init__(comm)
        self.send = np.full(BLOCK, self.rank + 1, np.uint8)
        self.recv = np.zeros(self.size * BLOCK, np.uint8) if self.rank == 0 else None

    def call(self) -> None:
        self.comm.Gather(self.send, self.recv, root=0)

    def reuse(self) -> None:
        if self.recv is not None:
            self.recv[:] = REUSED

    def intact(self) -> bool:
        return self.recv is None or bool((self.recv == REUSED).all())

    def late_result_ok(self) -> bool:
        return True  # a sender receives nothing


class GathervStore(GatherStore):
    """Gatherv: every sender stores where the root's table says."""

    def call(self) -> None:
        counts = [BLOCK] * self.size
        displs = [i * BLOCK for i in range(self.size)]
        self.comm.Gatherv(self.send, [self.recv, counts, displs, MPI.BYTE] if self.rank == 0 else None, root=0)


class ScatterFetch(Case):
    """Scatter: every receiver reads its block from the root's send buffer."""

    def __init__(self, comm: pymcoll.Comm) -> None:
        super().__init__(comm)
        self.send = (np.repeat(np.arange(1, self.size + 1, dtype=np.uint8), BLOCK) if self.rank == 0 else None)
        self.recv = np.zeros(BLOCK, np.uint8)

    def call(self) -> None:
        self.comm.Scatter(self.send, self.recv, root=0)

    def reuse(self) -> None:
        if self.send is not None:
            self.send[:] = REUSED

    def intact(self) -> bool:
        return True

    def late_result_ok(self) -> bool:
        return bool((self.recv == self.rank + 1).all())


class BcastFetch(Case):
    """Bcast: the receivers read the root's buffer."""

    def __init__(self, comm: pymcoll.Comm) -> None:
        super().__init__(comm)
        self.buf = np.full(BLOCK, 7 if self.rank == 0 else 0, np.uint8)

    def call(self) -> None:
        self.comm.Bcast(self.buf, root=0)

    def reuse(self) -> None:
        if self.rank == 0:
            self.buf[:] = REUSED

    def intact(self) -> bool:
        return True

    def late_result_ok(self) -> bool:
        return bool((self.buf == 7).all())


CASES: list[Callable[[pymcoll.Comm], Case]] = [GatherStore, GathervStore, ScatterFetch, BcastFetch]


def body() -> None:
    timeout = float(sys.argv[1])
    assert os.environ.get("PYMCOLL_CMA_MIN") == "64K", "run with PYMCOLL_CMA_MIN=64K"
    world = MPI.COMM_WORLD
    rank, size = world.rank, world.size
    late = size - 1
    check = np.zeros(size * 8, np.int32)
    for make in CASES:
        comm = pymcoll.Comm(world, timeout=timeout)
        case = make(comm)
        name = type(case).__name__
        comm.Barrier()
        gave_up = 0
        if rank == late:
            time.sleep(timeout + 1.0)
            world.Barrier()  # the others have timed out and reused their buffers
            try:
                case.call()
                assert case.late_result_ok(), f"{name}: the late rank returned the root's reused bytes"
                raise AssertionError(f"{name}: the late rank's call returned although its peers gave up")
            except pymcoll.PeerFailedError as exc:
                print(f"rank {rank} {name}: late, PeerFailedError: {exc}", flush=True)
        else:
            t0 = time.monotonic()
            try:
                case.call()
                # A rank that waits on nobody late (a sender done with its block, a receiver
                # that has read its own, a tree's root above the late leaf's parent) may finish.
                print(f"rank {rank} {name}: returned (waits on nobody late)", flush=True)
            except pymcoll.TimeoutError as exc:  # or PeerFailedError, one of its kinds
                print(f"rank {rank} {name}: {type(exc).__name__} after {time.monotonic() - t0:.2f} s", flush=True)
                gave_up = 1
            case.reuse()
            world.Barrier()
        # (after the late rank's call)
        assert world.allreduce(gave_up) >= 1, f"{name}: no rank gave up on the late rank"
        assert case.intact(), f"{name}: the late rank wrote into rank {rank}'s buffer after its call failed"
        print(f"rank {rank} {name}: buffers intact", flush=True)
        free_and_recover(comm, world, check)


if __name__ == "__main__":
    main(body)
