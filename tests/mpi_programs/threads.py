"""The thread contract (docs/design.md, "Threads and progress", as MPI_THREAD_MULTIPLE) and
request progress.

Parts (select with --parts, default acd):
  a  two or three pymcoll.Comm over duplicates of COMM_WORLD, each driven by
     its own Python thread through a few hundred mixed collectives (blocking,
     non-blocking, persistent) whose data changes per iteration, every result
     checked;
  b  with PYMCOLL_PROGRESS_THREAD=1: requests started and left alone for a
     while are complete at their first Test (the background thread moved them);
  c  without the progress thread: requests complete through Test loops alone;
  d  many outstanding requests on one communicator, started in the same order
     everywhere and waited for in reverse order.

Prints "SKIP: ..." and exits 0 if MPI gives less than MPI_THREAD_MULTIPLE.

Usage: python -m mpi_programs.threads [--parts acd] [--iters N] [--threads T]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import CI, agree, main

I8 = MPI.INT64_T
JOIN_TIMEOUT = 120.0  # seconds for every thread of part a together
LOOP_TIMEOUT = 30.0  # seconds a Test loop may spin before it counts as a hang
# Elements (float64: 1.6 MB) of the large requests: too large for one progress
# pass, so without a progress thread a single Test after a pause does not
# complete them (checked by hand: part b fails without the thread), and with
# one it must.
BIG = 200_000


def check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


# -- a: one communicator per thread ----------------------------------------------
def drive(comm: pymcoll.Comm, t: int, iters: int) -> None:
    """A few hundred mixed collectives on `comm` from one thread, each checked."""
    n, r = comm.size, comm.rank
    ar = np.arange
    sizes = [1, 7, 64, 1000, 20000]  # small ones, and one past the small-message paths
    psend = np.zeros(4, np.int64)
    precv = np.zeros(4 * n, np.int64)
    pgather = comm.Allgather_init(psend, precv)
    for i in range(iters):
        tag = f"thread {t} iteration {i}"
        m = sizes[(i + t) % len(sizes)]
        base = 1000 * i + 100 * t

        out = np.zeros(m, np.int64)
        comm.Allreduce(ar(m, dtype=np.int64) * (r + 1) + base, out)
        check(np.array_equal(out, ar(m) * (n * (n + 1) // 2) + n * base), f"{tag}: Allreduce m={m}")

        root = (i + t) % n
        buf = ar(m, dtype=np.float64) + base if r == root else np.full(m, -1.0)
        comm.Bcast(buf, root=root)
        check(np.array_equal(buf, ar(m) + float(base)), f"{tag}: Bcast m={m} root={root}")

        k = 1 + (i + t) % 5
        gathered = np.full(n * k, -1, np.int32)
        comm.Allgather(np.full(k, 7 * r + i + t, np.int32), gathered)
        check(np.array_equal(gathered, np.repeat(7 * ar(n) + i + t, k).astype(np.int32)), f"{tag}: Allgather")

        # Block sizes differ per pair and iteration, zero included.
        scounts = [(r + j + i) % 4 for j in range(n)]
        rcounts = [(q + r + i) % 4 for q in range(n)]
        send = np.concatenate([np.full(scounts[j], 10**6 * r + 10**3 * j + i, np.int64) for j in range(n)])
        recv = np.full(sum(rcounts), -1, np.int64)
        comm.Alltoallv([send, scounts, None, I8], [recv, rcounts, None, I8])
        want = np.concatenate([np.full(rcounts[q], 10**6 * q + 10**3 * r + i, np.int64) for q in range(n)])
        check(np.array_equal(recv, want), f"{tag}: Alltoallv")

        fout = np.full(m, -1.0)
        req = comm.Iallreduce(np.full(m, float(r + i + t)), fout, op=MPI.MAX)
        req.Wait()
        check(np.array_equal(fout, np.full(m, float(n - 1 + i + t))), f"{tag}: Iallreduce MAX m={m}")

        psend[:] = 10 * r + ar(4) + base
        pgather.Start()
        pgather.Wait()
        check(np.array_equal(precv.reshape(n, 4), 10 * ar(n)[:, None] + ar(4) + base), f"{tag}: Allgather_init")
    pgather.Free()


def part_a(world: MPI.Comm, verdicts: MPI.Comm, nthreads: int, iters: int) -> None:
    """Each thread drives its own communicator; all run at the same time."""
    # Creating a pymcoll.Comm is collective: done here, in one order on every rank.
    comms = [pymcoll.Comm(world.Dup()) for _ in range(nthreads)]
    errors: list[str] = []

    def run(t: int) -> None:
        try:
            drive(comms[t], t, iters)
        except BaseException:  # noqa: BLE001 - reported by the main thread
            errors.append(f"thread {t}:\n{traceback.format_exc()}")

    threads = [threading.Thread(target=run, args=(t,), name=f"driver-{t}", daemon=True) for t in range(nthreads)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    # Poll so an error on this rank surfaces at once (its peers would otherwise wait).
    while any(th.is_alive() for th in threads) and not errors and time.monotonic() - t0 < JOIN_TIMEOUT:
        for th in threads:
            th.join(timeout=0.05)
    check(not errors, "\n".join(errors))
    stuck = [th.name for th in threads if th.is_alive()]
    check(not stuck, f"threads {stuck} still running after {JOIN_TIMEOUT} s (hang?)")
    check(agree(True, verdicts), "another rank failed part a")
    for c in comms:
        c.Free()
    if world.rank == 0:
        print(f"part a: {nthreads} threads x {iters} iterations x 6 collectives in "
              f"{time.monotonic() - t0:.2f} s", flush=True)


# -- requests of several kinds, with their expected results ------------------------
@dataclass
class Pending:
    """A started request, its receive buffer and a check of its result."""

    name: str
    req: Any
    recv: np.ndarray
    right: Callable[[], bool]


def start_mixed(comm: pymcoll.Comm, seed: int, m: int) -> list[Pending]:
    """Start an Iallreduce and an Ibcast of `m` elements and a persistent
    Allgather, in this order on every rank."""
    n, r = comm.size, comm.rank
    ar = np.arange
    ar_out = np.full(m, -1.0)
    ar_req = comm.Iallreduce(ar(m) + float(r + seed), ar_out)
    root = seed % n
    bc = ar(m, dtype=np.int64) * seed if r == root else np.full(m, -1, np.int64)
    bc_req = comm.Ibcast(bc, root=root)
    psend = np.full(5, r * 100 + seed, np.int32)
    precv = np.full(5 * n, -1, np.int32)
    preq = comm.Allgather_init(psend, precv)
    preq.Start()
    return [
        Pending("Iallreduce", ar_req, ar_out,
                lambda: np.array_equal(ar_out, n * ar(m) + n * (n - 1) / 2 + n * seed)),
        Pending("Ibcast", bc_req, bc, lambda: np.array_equal(bc, ar(m, dtype=np.int64) * seed)),
        Pending("Allgather_init", preq, precv,
                lambda: np.array_equal(precv, np.repeat(100 * ar(n) + seed, 5).astype(np.int32))),
    ]


def part_b(world: MPI.Comm, verdicts: MPI.Comm, rounds: int) -> None:
    """With the progress thread, requests left alone complete by themselves."""
    check(os.environ.get("PYMCOLL_PROGRESS_THREAD") == "1", "part b needs PYMCOLL_PROGRESS_THREAD=1")
    comm = pymcoll.Comm(world)
    late: list[str] = []
    for rnd in range(rounds):
        verdicts.Barrier()  # every rank starts at about the same moment
        pending = start_mixed(comm, seed=rnd + 1, m=BIG)
        time.sleep(0.5)  # no Test, no Wait: only the background thread can move them
        done = [p.req.Test() for p in pending]  # exactly one Test each
        for p, d in zip(pending, done):
            if not d:
                t0 = time.monotonic()
                p.req.Wait()
                late.append(f"round {rnd}: {p.name} was not complete 0.5 s after its start "
                            f"(Wait took {time.monotonic() - t0:.3f} s more)")
            check(p.right(), f"round {rnd}: {p.name} result wrong")
        for p in pending:
            p.req.Free()
    check(not late, "progress thread did not progress:\n" + "\n".join(late))
    check(agree(True, verdicts), "another rank failed part b")
    comm.Free()
    if world.rank == 0:
        print(f"part b: {rounds} rounds of 3 requests completed in the background", flush=True)


def poll_until_done(req: Any, what: str) -> int:
    """Call Test until it says complete; the number of calls."""
    calls, t0 = 0, time.monotonic()
    while True:
        calls += 1
        if req.Test():
            return calls
        check(time.monotonic() - t0 < LOOP_TIMEOUT, f"{what}: Test loop not complete after {LOOP_TIMEOUT} s")


def part_c(world: MPI.Comm, verdicts: MPI.Comm, rounds: int) -> None:
    """Without the progress thread, Test loops alone complete requests."""
    check(not os.environ.get("PYMCOLL_PROGRESS_THREAD"), "part c must run without the progress thread")
    comm = pymcoll.Comm(world)
    tests = 0
    for rnd in range(rounds):
        pending = start_mixed(comm, seed=rnd + 1, m=[1000, BIG][rnd % 2])
        if rnd % 2:
            time.sleep(0.05)  # an idle spell (nothing moves them) before testing
        for p in pending:  # one at a time, in start order
            tests += poll_until_done(p.req, f"round {rnd}: {p.name}")
            check(p.right(), f"round {rnd}: {p.name} result wrong")
        # The persistent one again, its receive buffer cleared first so that a
        # start that moved nothing shows.
        again = pending[2]
        again.recv[:] = -1
        again.req.Start()
        tests += poll_until_done(again.req, f"round {rnd}: {again.name} restarted")
        check(again.right(), f"round {rnd}: {again.name} restarted, result wrong")
        again.req.Free()
        # A fresh set, polled together with Testall.
        more = start_mixed(comm, seed=rnd + 100, m=[BIG, 1000][rnd % 2])
        t0 = time.monotonic()
        while not pymcoll.Request.Testall([p.req for p in more]):
            tests += 1
            check(time.monotonic() - t0 < LOOP_TIMEOUT, f"round {rnd}: Testall loop did not finish")
        for p in more:
            check(p.right(), f"round {rnd}: {p.name} (Testall) result wrong")
            p.req.Free()
    check(agree(True, verdicts), "another rank failed part c")
    comm.Free()
    if world.rank == 0:
        print(f"part c: {rounds} rounds completed by Test loops ({tests} Test calls on rank 0)", flush=True)


def part_d(world: MPI.Comm, verdicts: MPI.Comm, rounds: int) -> None:
    """Many outstanding requests on one communicator, waited for in reverse order."""
    comm = pymcoll.Comm(world)
    n, r = comm.size, comm.rank
    ar = np.arange
    for rnd in range(rounds):
        reqs: list[Any] = []
        checks: list[tuple[str, Callable[[], bool]]] = []
        persistent: list[Any] = []
        for j in range(6):
            s = 100 * rnd + 10 * j
            m = [3, 100, 5000][j % 3]
            o1 = np.full(m, -1, np.int64)
            reqs.append(comm.Iallreduce(ar(m, dtype=np.int64) + r + s, o1))
            checks.append((f"Iallreduce {j}", lambda o1=o1, m=m, s=s: np.array_equal(
                o1, n * ar(m) + n * (n - 1) // 2 + n * s)))
            root = j % n
            o2 = ar(m, dtype=np.float64) + s if r == root else np.full(m, -1.0)
            reqs.append(comm.Ibcast(o2, root=root))
            checks.append((f"Ibcast {j}", lambda o2=o2, m=m, s=s: np.array_equal(o2, ar(m) + float(s))))
            o3 = np.full(2 * n, -1, np.int16)
            reqs.append(comm.Iallgather(np.full(2, r + j, np.int16), o3))
            checks.append((f"Iallgather {j}", lambda o3=o3, j=j: np.array_equal(
                o3, np.repeat(ar(n) + j, 2).astype(np.int16))))
            o4 = np.full(n, -1, np.int64)
            reqs.append(comm.Ialltoall(100 * r + ar(n, dtype=np.int64) + s, o4))
            checks.append((f"Ialltoall {j}", lambda o4=o4, s=s: np.array_equal(o4, 100 * ar(n) + r + s)))
            o5 = np.full(4, -1.0)
            reqs.append(comm.Iscan(np.full(4, r + 1.0 + j), o5))
            checks.append((f"Iscan {j}", lambda o5=o5, j=j: np.array_equal(
                o5, np.full(4, (r + 1) * (r + 2) / 2 + (r + 1) * j))))
            o6 = np.full(3, -1, np.int32) if r == root else None
            reqs.append(comm.Ireduce(np.full(3, r + j, np.int32), o6, op=MPI.MAX, root=root))
            checks.append((f"Ireduce {j}", lambda o6=o6, j=j: o6 is None or np.array_equal(
                o6, np.full(3, n - 1 + j, np.int32))))
            psend = np.full(3, 10 * r + j + rnd, np.int64)
            o7 = np.full(3 * n, -1, np.int64)
            preq = comm.Allgather_init(psend, o7)
            preq.Start()
            persistent.append(preq)
            reqs.append(preq)
            checks.append((f"Allgather_init {j}", lambda o7=o7, j=j, rnd=rnd: np.array_equal(
                o7, np.repeat(10 * ar(n) + j + rnd, 3))))
        pymcoll.Request.Waitall(list(reversed(reqs)))
        for name, right in checks:
            check(right(), f"round {rnd}: {name} result wrong after the reversed Waitall")
        for preq in persistent:
            preq.Free()
    check(agree(True, verdicts), "another rank failed part d")
    comm.Free()
    if world.rank == 0:
        print(f"part d: {rounds} rounds of {len(checks)} outstanding requests waited in reverse", flush=True)


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="acd")
    ap.add_argument("--iters", type=int, default=50 if CI else 200)
    ap.add_argument("--threads", type=int, default=3)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    provided = MPI.Query_thread()
    if provided < MPI.THREAD_MULTIPLE:
        if world.rank == 0:
            print(f"SKIP: MPI provides thread level {provided}, below MPI_THREAD_MULTIPLE "
                  f"({MPI.THREAD_MULTIPLE}); the thread contract cannot be tested", flush=True)
        return
    verdicts = world.Dup()  # agreement on results, outside the communicators under test
    if "a" in args.parts:
        part_a(world, verdicts, args.threads, args.iters)
    if "b" in args.parts:
        part_b(world, verdicts, rounds=3)
    if "c" in args.parts:
        part_c(world, verdicts, rounds=6)
    if "d" in args.parts:
        part_d(world, verdicts, rounds=3)
    verdicts.Free()
    print(f"rank {world.rank} threads ok", flush=True)


if __name__ == "__main__":
    main(body)
