"""Sizes that disagree between ranks, found while a single copy moves data
(PYMCOLL_CHECK off): the rank that finds it raises ValueError, the ranks
waiting on it raise PeerFailedError (or ValueError where they compare the
sizes too) long before the deadline, nothing is
written past the exposed buffer, every communicator is broken afterwards and
a new one works.

Usage: PYMCOLL_CMA_MIN=64K PYMCOLL_TIMEOUT=30 python -m mpi_programs.mismatch_single_copy
"""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import assert_broken, free_and_recover, main

BLOCK = 1 << 20  # bytes per rank, above the 64 KiB crossover the test sets
EXTRA = 64       # what the odd rank adds to its count
GUARD = 4096     # bytes after the root's receive buffer that must stay untouched
RS_BLOCK = 256 << 10  # bytes per rank's block of the heap case: its inputs fit the default heap at 4 ranks


def gather_sender_sends_more(comm: pymcoll.Comm) -> tuple[Callable[[], None], int]:
    """Gather (senders store into the root): the last rank's block is longer,
    so its store would run past the root's buffer; the last rank finds it."""
    last = comm.size - 1
    mine = BLOCK + EXTRA if comm.rank == last else BLOCK
    send = np.full(mine, comm.rank + 1, np.uint8)
    room = np.zeros(comm.size * BLOCK + GUARD, np.uint8)

    def call() -> None:
        try:
            comm.Gather(send, room[:comm.size * BLOCK] if comm.rank == 0 else None, root=0)
        finally:
            assert not room[comm.size * BLOCK:].any(), "a store ran past the root's receive buffer"
    return call, last


def gatherv_root_expects_more(comm: pymcoll.Comm) -> tuple[Callable[[], None], int]:
    """Gatherv (senders store where the root's table says): the root expects
    more from the last rank than it sends; the last rank finds it in the
    table before it writes anything."""
    last, size = comm.size - 1, comm.size
    counts = [BLOCK] * size
    counts[last] += EXTRA
    displs = [i * BLOCK for i in range(size)]
    send = np.full(BLOCK, comm.rank + 1, np.uint8)
    room = np.zeros(sum(counts) + GUARD, np.uint8)

    def call() -> None:
        try:
            comm.Gatherv(send, [room[:sum(counts)], counts, displs, MPI.BYTE] if comm.rank == 0 else None, root=0)
        finally:
            assert not room[sum(counts):].any(), "a store ran past the root's receive buffer"
    return call, last


def gatherv_sender_below_crossover(comm: pymcoll.Comm) -> tuple[Callable[[], None], int]:
    """Gatherv: the last rank's count is below the crossover, so it sends
    through the cells, while the root counts a single-copy block for it; the
    root finds the block was never stored (the sender's next call learns)."""
    last, size = comm.size - 1, comm.size
    counts = [BLOCK] * size
    small = 4096
    displs = [i * BLOCK for i in range(size)]
    send = np.full(small if comm.rank == last else BLOCK, comm.rank + 1, np.uint8)
    recv = np.zeros(sum(counts), np.uint8) if comm.rank == 0 else None

    def call() -> None:
        comm.Gatherv(send, [recv, counts, displs, MPI.BYTE] if comm.rank == 0 else None, root=0)
    return call, 0


def bcast_receiver_expects_more(comm: pymcoll.Comm) -> tuple[Callable[[], None], int]:
    """Bcast: the last rank's buffer is longer than the root's; it finds it
    when it reads the root's exposed buffer."""
    last = comm.size - 1
    buf = np.full(BLOCK + (EXTRA if comm.rank == last else 0), comm.rank, np.uint8)

    def call() -> None:
        comm.Bcast(buf, root=0)
    return call, last


def reduce_scatter_heap_reader_expects_more(comm: pymcoll.Comm) -> tuple[Callable[[], None], int]:
    """Reduce_scatter_block with buffers in the shared heap (inputs read in place, not
    fetched): the last rank's block is longer, so the slice it reduces runs past the
    others' exposed inputs; it finds it before it reads."""
    last = comm.size - 1
    block = (RS_BLOCK + (EXTRA if comm.rank == last else 0)) // 4
    send = pymcoll.alloc(comm.size * block, np.float32, comm)
    send[:] = comm.rank + 1
    recv = pymcoll.alloc(block, np.float32, comm)
    # Otherwise the inputs would be fetched, not read in place, and this case would test nothing new.
    assert pymcoll.heap_usage(comm)[1] >= send.nbytes + recv.nbytes, "the buffers are not in the shared heap"

    def call() -> None:
        comm.Reduce_scatter_block(send, recv)
    return call, last


CASES = [gather_sender_sends_more, gatherv_root_expects_more, gatherv_sender_below_crossover,
         bcast_receiver_expects_more, reduce_scatter_heap_reader_expects_more]
#: Cases where a rank that waits on nobody who failed may finish the call (its next call learns).
MAY_RETURN = {"gatherv_root_expects_more", "gatherv_sender_below_crossover", "bcast_receiver_expects_more"}


def body() -> None:
    world = MPI.COMM_WORLD
    rank, size = world.rank, world.size
    timeout = float(os.environ["PYMCOLL_TIMEOUT"])
    # Every collective takes single copy from this size on (copy-in/copy-out cannot see the mismatch).
    assert os.environ.get("PYMCOLL_CMA_MIN") == "64K", "run with PYMCOLL_CMA_MIN=64K"
    recv = np.zeros(size * 8, np.int32)
    for case in CASES:
        comm = pymcoll.Comm(world)
        call, finder = case(comm)
        comm.Barrier()
        t0 = time.monotonic()
        try:
            call()
            got = None
        except ValueError as exc:
            # The finder, or a peer that compares sizes itself (a Bcast root splitting the copy).
            assert "disagree" in str(exc) and "Free()" in str(exc), str(exc)
            got = exc
        except pymcoll.PeerFailedError as exc:
            assert rank != finder, f"{case.__name__}: the finding rank raised {exc}"
            got = exc
        if got is None:
            # A rank that waits on nobody who failed (a Bcast leaf beside the
            # finder, a Gatherv sender done with its part) may finish the
            # call; its next collective learns.
            assert rank != finder and rank != 0 and case.__name__ in MAY_RETURN, \
                f"{case.__name__}: rank {rank} returned"
            try:
                comm.Barrier()
                raise AssertionError(f"{case.__name__}: the next call on rank {rank} did not learn of the failure")
            except pymcoll.PeerFailedError as exc:
                print(f"rank {rank} {case.__name__}: returned, then the next call raised {exc}", flush=True)
        waited = time.monotonic() - t0
        print(f"rank {rank} {case.__name__}: {type(got).__name__ if got else 'returned'} after {waited:.2f} s: "
              f"{got}", flush=True)
        assert waited < min(5.0, timeout / 2), f"{case.__name__}: waited {waited:.2f} s for a failure found at once"
        assert_broken(comm)
        free_and_recover(comm, world, recv)


if __name__ == "__main__":
    main(body)
