"""Copy-path trials: on one node, the first blocking calls of each collective
and size class take copy in/copy out and single copy in turn and the ranks
then keep the faster. Every call's result must be right whichever path it
took, requests started during and after the trials must be right too, and
every rank must report the same choices.

Usage: python -m mpi_programs.path_trials MODE
MODE "on": every collective with a single-copy path, called 10 times at each
size from 256 KiB, must have finished its trials with a choice; "off": no
trial may have run (PYMCOLL_PATH_TRIALS=0, a fixed PYMCOLL_CMA_MIN or
PYMCOLL_COPY, several nodes); "mismatch": ranks that disagree on
PYMCOLL_PATH_TRIALS get an error naming it when the communicator is made;
"retrial": a loop that slows down after its trials is tried again once;
"persistent": persistent requests alone have their trials.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main

# Trials start at 16 KiB: 16 KiB - 8 has no class, the others have one each (32 KiB, 128-256 KiB,
# 256 KiB, 1 MiB; a Bcast's start at 256 KiB where ranks share cores).
SIZES = ((16 << 10) - 8, 32 << 10, (256 << 10) - 8, 256 << 10, 1 << 20)
CALLS = 10  # eight trials, then the choice


def expect_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        raise AssertionError(f"{what}: {bad.size} elements differ, first at {bad[:4]}: {got[bad[:4]]} != {want[bad[:4]]}")


def calls(comm: pymcoll.Comm, nbytes: int, call: int) -> list[tuple[str, Callable[[], None]]]:
    """One round of every collective at `nbytes` per rank; each checks its result."""
    rank, size = comm.rank, comm.size
    n = nbytes // 8

    def mine(r: int = rank) -> np.ndarray:
        return np.arange(n, dtype=np.float64) + 1000 * call + r * 7

    def bcast() -> None:
        buf = mine(1) if rank == 1 % size else np.full(n, -1.0)
        comm.Bcast(buf, root=1 % size)
        expect_equal(buf, mine(1), f"Bcast {nbytes} B call {call}")

    def allgather() -> None:
        out = np.empty(n * size)
        comm.Allgather(mine(), out)
        expect_equal(out, np.concatenate([mine(r) for r in range(size)]), f"Allgather {nbytes} B call {call}")

    def allgatherv() -> None:
        counts = [n - r % 2 for r in range(size)]
        out = np.full(sum(counts) + 3, -1.0)
        comm.Allgatherv(mine()[:counts[rank]], [out, counts, [sum(counts[:r]) for r in range(size)], MPI.DOUBLE])
        want = np.concatenate([mine(r)[:counts[r]] for r in range(size)] + [np.full(3, -1.0)])
        expect_equal(out, want, f"Allgatherv {nbytes} B call {call}")

    def gather() -> None:
        out = np.full(n * size, -1.0) if rank == 0 else None
        comm.Gather(mine(), out, root=0)
        if rank == 0:
            expect_equal(out, np.concatenate([mine(r) for r in range(size)]), f"Gather {nbytes} B call {call}")

    def scatter() -> None:
        send = np.concatenate([mine(r) for r in range(size)]) if rank == 0 else None
        out = np.full(n, -1.0)
        comm.Scatter(send, out, root=0)
        expect_equal(out, mine(), f"Scatter {nbytes} B call {call}")

    def alltoall() -> None:
        send = np.concatenate([mine() + 0.5 * d for d in range(size)])
        out = np.full(n * size, -1.0)
        comm.Alltoall(send, out)
        expect_equal(out, np.concatenate([mine(s) + 0.5 * rank for s in range(size)]), f"Alltoall {nbytes} B call {call}")

    def reduce_scatter_block() -> None:
        send = np.concatenate([mine() * (d + 1) for d in range(size)])
        out = np.full(n, -1.0)
        comm.Reduce_scatter_block(send, out, op=MPI.SUM)
        expect_equal(out, sum(mine(r) * (rank + 1) for r in range(size)), f"Reduce_scatter_block {nbytes} B call {call}")

    def scan() -> None:
        out = np.full(n, -1.0)
        comm.Scan(mine(), out, op=MPI.SUM)
        expect_equal(out, sum(mine(r) for r in range(rank + 1)), f"Scan {nbytes} B call {call}")

    def allreduce() -> None:
        out = np.full(n, -1.0)
        comm.Allreduce(mine(), out, op=MPI.SUM)
        expect_equal(out, sum(mine(r) for r in range(size)), f"Allreduce {nbytes} B call {call}")
        inout = mine()
        comm.Allreduce(MPI.IN_PLACE, inout, op=MPI.SUM)
        expect_equal(inout, sum(mine(r) for r in range(size)), f"Allreduce in place {nbytes} B call {call}")

    def reduce() -> None:
        root = call % size
        out = np.full(n, -1.0)
        comm.Reduce(mine(), out if rank == root else None, op=MPI.MAX, root=root)
        if rank == root:
            expect_equal(out, mine(size - 1), f"Reduce to {root} {nbytes} B call {call}")

    def scatterv() -> None:
        # A v form takes the path its fixed-size form's trials agreed on, block by block.
        blocks = [n - r for r in range(size)]
        displs = [sum(blocks[:r]) for r in range(size)]
        send = np.concatenate([mine(0)[: blocks[r]] + r for r in range(size)]) if rank == 0 else None
        out = np.full(blocks[rank], -1.0)
        comm.Scatterv([send, blocks, displs, MPI.DOUBLE] if rank == 0 else None, out, root=0)
        expect_equal(out, mine(0)[: blocks[rank]] + rank, f"Scatterv {nbytes} B call {call}")

    def gatherv() -> None:
        blocks = [n - r for r in range(size)]
        displs = [sum(blocks[:r]) for r in range(size)]
        out = np.full(sum(blocks), -1.0) if rank == 0 else None
        comm.Gatherv(mine()[: blocks[rank]], [out, blocks, displs, MPI.DOUBLE] if rank == 0 else None, root=0)
        if rank == 0:
            expect_equal(out, np.concatenate([mine(r)[: blocks[r]] for r in range(size)]), f"Gatherv {nbytes} B call {call}")

    def ibcast() -> None:
        # A request between blocking calls: it takes the agreed path, or the table's during the trials.
        buf = mine(0) if rank == 0 else np.full(n, -1.0)
        comm.Ibcast(buf, root=0).Wait()
        expect_equal(buf, mine(0), f"Ibcast {nbytes} B call {call}")

    return [("Bcast", bcast), ("Allgather", allgather), ("Allgatherv", allgatherv), ("Gather", gather),
            ("Scatter", scatter), ("Alltoall", alltoall), ("Reduce_scatter_block", reduce_scatter_block),
            ("Scan", scan), ("Allreduce", allreduce), ("Reduce", reduce), ("Scatterv", scatterv),
            ("Gatherv", gatherv), ("Ibcast", ibcast)]


def spin(seconds: float) -> None:
    """Busy for `seconds`, as work between calls would be (a sleep would let the peer's core idle)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


def retrial(comm: pymcoll.Comm) -> None:
    """After the trials the loop slows down (10 ms of work between calls), as if the host had: the
    check after 64 calls finds the agreed path far slower than the other path's trials and tries
    both again, and the new trials time both paths with the work in them."""
    n = (1 << 20) // 8
    send = np.arange(n * comm.size, dtype=np.float64)
    out = np.empty(n)
    for call in range(8 + 64 + 8 + 10):
        if call >= 8:
            spin(0.01)
        comm.Scatter(send + call, out, root=0)
        expect_equal(out, send[comm.rank * n:(comm.rank + 1) * n] + call, f"Scatter call {call}")
    trials = comm.path_trials()
    everyone = MPI.COMM_WORLD.allgather(trials)
    assert all(e == everyone[0] for e in everyone), f"ranks report different trials: {everyone}"
    (t,) = trials
    assert t["collective"] == "Scatter" and t["retrials"] == 1 and t["calls"] == 8, t
    # The new trials ran with the work between calls: both paths took at least its 10 ms.
    assert t["chosen"] in ("cells", "single copy") and min(t["cells_s"], t["single_copy_s"]) >= 0.01, t
    if comm.rank == 0:
        print(f"path trials retrial: {t}")
        print("path trials ok")
    comm.Free()


def persistent(comm: pymcoll.Comm) -> None:
    """Only persistent requests: their Starts are the trials (a loop of Start and Wait), every
    result is right on either path, and the ranks agree on the choice."""
    n = (1 << 20) // 8
    send = np.empty(n * comm.size)
    out = np.empty(n)
    vec, total = np.empty(n), np.empty(n)
    scatter = comm.Scatter_init(send, out, root=0)
    allreduce = comm.Allreduce_init(vec, total, op=MPI.SUM)
    for call in range(12):
        send[:] = np.arange(n * comm.size) + call
        scatter.Start()
        scatter.Wait()
        expect_equal(out, send[comm.rank * n:(comm.rank + 1) * n], f"Scatter_init start {call}")
        vec[:] = np.arange(n) * (comm.rank + 1) + call
        allreduce.Start()
        allreduce.Wait()
        want = sum(np.arange(n) * (r + 1) + call for r in range(comm.size))
        expect_equal(total, want, f"Allreduce_init start {call}")
    scatter.Free()
    allreduce.Free()
    trials = comm.path_trials()
    everyone = MPI.COMM_WORLD.allgather(trials)
    assert all(e == everyone[0] for e in everyone), f"ranks report different trials: {everyone}"
    assert {t["collective"] for t in trials} == {"Scatter", "Allreduce"}, trials
    for t in trials:
        assert t["calls"] == 8 and t["chosen"] in ("cells", "single copy"), t
    if comm.rank == 0:
        print(f"path trials persistent: {trials}")
        print("path trials ok")
    comm.Free()


def body() -> None:
    mode = sys.argv[1]
    if mode == "mismatch":
        # Ranks that would try paths beside ranks that would not must be refused at creation.
        os.environ["PYMCOLL_PATH_TRIALS"] = "0" if MPI.COMM_WORLD.rank == 0 else "1"
        try:
            pymcoll.Comm(MPI.COMM_WORLD)
        except ValueError as exc:
            assert "PYMCOLL_PATH_TRIALS differs across ranks" in str(exc), str(exc)
        else:
            raise AssertionError("a communicator was made although PYMCOLL_PATH_TRIALS differs across ranks")
        MPI.COMM_WORLD.Barrier()
        if MPI.COMM_WORLD.rank == 0:
            print("path trials ok")
        return
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    if mode == "retrial":
        retrial(comm)
        return
    if mode == "persistent":
        persistent(comm)
        return
    for nbytes in SIZES:
        for call in range(CALLS):
            for _name, run in calls(comm, nbytes, call):
                run()
    trials = comm.path_trials()
    everyone = MPI.COMM_WORLD.allgather([(t["collective"], t["min_bytes"], t["calls"], t["chosen"]) for t in trials])
    assert all(e == everyone[0] for e in everyone), f"ranks report different trials: {everyone}"
    if mode == "off":
        assert trials == [], trials
    else:
        assert comm.layout.nnodes == 1
        least = 16 << 10
        names = {t["collective"] for t in trials}
        # Every collective that has a single-copy path on one node tried both.
        assert names >= {"Bcast", "Allgather", "Allgatherv", "Gather", "Scatter", "Alltoall",
                         "Reduce_scatter_block", "Scan", "Allreduce", "Reduce"}, names
        for t in trials:
            assert t["calls"] == 8 and t["chosen"] in ("cells", "single copy"), t
            assert t["min_bytes"] >= least and t["cells_s"] > 0 and t["single_copy_s"] > 0, t
            # The other path lost, or won by less than the margin that would leave the table's path
            # (5% from 256 KiB, 20% below).
            winner, loser = ((t["cells_s"], t["single_copy_s"]) if t["chosen"] == "cells"
                             else (t["single_copy_s"], t["cells_s"]))
            assert loser >= (0.95 if t["min_bytes"] >= 256 << 10 else 0.8) * winner, t
        # No trial below the smallest class (16 KiB): 16 KiB - 8 made no class of its own, 32 KiB did.
        assert min(t["min_bytes"] for t in trials) == 32 << 10, trials
        # Where the host's ranks outnumber the CPUs they may run on (the union of their affinities),
        # a Bcast's trials start at 256 KiB: 32 KiB and 256 KiB - 8 make no class, 256 KiB does.
        host = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        cpus = set().union(*host.allgather(sorted(os.sched_getaffinity(0))))
        shared = host.size > len(cpus)
        host.Free()
        bcast = sorted(t["min_bytes"] for t in trials if t["collective"] == "Bcast")
        assert bcast[0] == ((256 << 10) if shared else (32 << 10)), (shared, bcast)
    if comm.rank == 0:
        print(f"path trials {mode}: {len(trials)} classes, " + ", ".join(
            f"{t['collective']}@{t['min_bytes'] >> 10}K->{t['chosen']}" for t in trials))
        print("path trials ok")
    comm.Free()


if __name__ == "__main__":
    main(body)
