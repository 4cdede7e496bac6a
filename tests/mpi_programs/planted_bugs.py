"""Deliberately broken collectives, and pymcoll.testing run against them.

Usage: python -m mpi_programs.planted_bugs BUG [--deadline S]
Prints the report's failures as JSON lines (rank 0), one per failure.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import pymcoll.testing as pt

from .common import main


class Forwarding:
    """Forwards everything to an mpi4py communicator; bugs override methods."""

    def __init__(self, comm: MPI.Comm) -> None:
        self._comm = comm

    def __getattr__(self, name: str):
        return getattr(self._comm, name)


class OffByOneAboveThreshold(Forwarding):
    """Allgather loses the last element once a block passes 4 KiB."""

    def Allgather(self, sendbuf, recvbuf):  # noqa: N802
        self._comm.Allgather(sendbuf, recvbuf)
        block = np.asarray(recvbuf).nbytes // self._comm.Get_size()
        if block > 4096:
            np.asarray(recvbuf)[-1] = 0


class WrongRoot(Forwarding):
    """Bcast always from rank 0."""

    def Bcast(self, buf, root=0):  # noqa: N802
        self._comm.Bcast(buf, 0)


class InPlaceIgnored(Forwarding):
    """Allgather with MPI.IN_PLACE sends zeros instead of the rank's block."""

    def Allgather(self, sendbuf, recvbuf):  # noqa: N802
        if sendbuf is MPI.IN_PLACE:
            arr = np.asarray(recvbuf)
            sendbuf = np.zeros(arr.size // self._comm.Get_size(), arr.dtype)
        self._comm.Allgather(sendbuf, recvbuf)


class NarrowSum(Forwarding):
    """Allreduce of float64 data accumulates in float32."""

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM):  # noqa: N802
        recv = np.asarray(recvbuf)
        send = recv.copy() if sendbuf is MPI.IN_PLACE else np.asarray(sendbuf)
        if recv.dtype == np.float64:
            tmp = np.empty(recv.size, np.float32)
            self._comm.Allreduce(send.astype(np.float32), tmp, op)
            recv[:] = tmp
        else:
            self._comm.Allreduce(sendbuf, recvbuf, op)


class WritesPastEnd(Forwarding):
    """Gather's root writes one byte after its receive buffer."""

    def Gather(self, sendbuf, recvbuf, root=0):  # noqa: N802
        self._comm.Gather(sendbuf, recvbuf, root)
        if self._comm.Get_rank() == root:
            pt.write_past(np.asarray(recvbuf))


class HangsAtOneSize(Forwarding):
    """Rank 1 never returns from Bcast when the message holds exactly 7 elements."""

    def Bcast(self, buf, root=0):  # noqa: N802
        if self._comm.Get_rank() == 1 and np.asarray(buf).size == 7:
            time.sleep(3600)
        self._comm.Bcast(buf, root)


class BarrierReturnsAtOnce(Forwarding):
    """Barrier that does not wait."""

    def Barrier(self):  # noqa: N802
        return None


def wrong_root(comm: MPI.Comm) -> WrongRoot:
    """Factory for ``python -m pymcoll.testing --impl mpi_programs.planted_bugs:wrong_root``."""
    return WrongRoot(comm.Dup())


BUGS = {
    "barrier": (BarrierReturnsAtOnce, ["Barrier"], {}),
    "off_by_one": (OffByOneAboveThreshold, ["Allgather"], {"thresholds": [4096], "max_bytes": 8192}),
    "wrong_root": (WrongRoot, ["Bcast"], {}),
    "in_place": (InPlaceIgnored, ["Allgather"], {}),
    "precision": (NarrowSum, ["Allreduce"], {"ops": ["SUM"]}),
    "write_past": (WritesPastEnd, ["Gather"], {}),
    "hang": (HangsAtOneSize, ["Bcast"], {"max_bytes": 64}),
    "none": (Forwarding, ["Bcast", "Allgather", "Allreduce", "Gather"], {}),
}


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bug", choices=sorted(BUGS))
    ap.add_argument("--deadline", type=float, default=60.0)
    ap.add_argument("--examples", type=int, default=100)
    args = ap.parse_args()
    cls, names, options = BUGS[args.bug]
    world = MPI.COMM_WORLD
    impl = cls(world.Dup())
    report = pt.check(impl, world, names, max_examples=args.examples, deadline=args.deadline, **options)
    if world.Get_rank() == 0:
        for f in report.failures:
            print(json.dumps({"collective": f.collective, "case": f.case, "message": f.message,
                              "call": f.call}), flush=True)
        print(f"REPORT ok={report.ok} failures={len(report.failures)}", flush=True)


if __name__ == "__main__":
    main(body)
