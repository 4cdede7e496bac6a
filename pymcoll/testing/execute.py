"""Running one case on one implementation and judging the result on this rank."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from .case import NO_IN_PLACE, SENTINEL, Case, mpi_type, recv_layout, send_data, send_layout
from .oracle import compare, expected

GUARD = 16  # sentinel elements on each side of every receive region


@dataclass
class Buffers:
    """This rank's arguments for a case, and the memory around them."""

    args: tuple
    send: Optional[np.ndarray]        # the send buffer passed (None: none or in place)
    send_copy: Optional[np.ndarray]   # its contents before the call
    recv: Optional[np.ndarray]        # the receive region (a view into backing)
    backing: Optional[np.ndarray]     # receive region plus guards, as bytes
    root_send_in_place: Optional[np.ndarray] = None  # Scatter in place: root's send buffer


def _guarded(dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    item = np.dtype(dtype).itemsize
    backing = np.full((n + 2 * GUARD) * item, SENTINEL, dtype=np.uint8)
    region = backing[GUARD * item:(GUARD + n) * item].view(dtype)
    return region, backing


def build(case: Case, rank: int) -> Buffers:
    """Arguments of `case.method` for `rank`, with guarded receive memory."""
    c, root = case.collective, case.root
    t = mpi_type(case.dtype) if c != "Barrier" else None
    op = getattr(MPI, case.op) if case.op else None
    in_place = case.in_place and c not in NO_IN_PLACE
    if c == "Barrier":
        return Buffers((), None, None, None, None)
    if c == "Bcast":
        buf = send_data(case, root) if rank == root else None
        region, backing = _guarded(case.dtype, case.count)
        if buf is not None:
            region[:] = buf
        return Buffers((region, root), None, None, region, backing)

    rlen, rcounts, rdispls = recv_layout(case, rank)
    slen, scounts, sdispls = send_layout(case, rank)
    send = send_data(case, rank)
    if c in ("Gather", "Gatherv", "Reduce") and rank != root:
        recv, backing = None, None  # not significant on non-roots
    else:
        recv, backing = _guarded(case.dtype, rlen)
    sendarg: Any = send
    recvarg: Any = recv
    root_send = None

    if c in ("Scatter", "Scatterv"):
        if rank != root:
            sendarg = None
        elif c == "Scatterv":
            sendarg = [send, scounts, sdispls, t]
        if rank == root and in_place:
            recvarg, recv, backing = MPI.IN_PLACE, None, None
            root_send = send
    elif c in ("Gather", "Gatherv"):
        if rank == root:
            if c == "Gatherv":
                recvarg = [recv, rcounts, rdispls, t]
            if in_place:
                recv[rdispls[rank]:rdispls[rank] + rcounts[rank]] = send
                sendarg, send = MPI.IN_PLACE, None
        else:
            recvarg = None
    elif c in ("Allgather", "Allgatherv"):
        if c == "Allgatherv":
            recvarg = [recv, rcounts, rdispls, t]
        if in_place:
            recv[rdispls[rank]:rdispls[rank] + rcounts[rank]] = send
            sendarg, send = MPI.IN_PLACE, None
    elif c in ("Alltoall", "Alltoallv"):
        if c == "Alltoallv":
            sendarg = [send, scounts, sdispls, t]
            recvarg = [recv, rcounts, rdispls, t]
        if in_place:  # same layout: the data to send sits in the receive blocks
            for n, d in zip(rcounts, rdispls):
                recv[d:d + n] = send[d:d + n]
            sendarg, send = MPI.IN_PLACE, None
    elif c in ("Reduce", "Allreduce", "Scan", "Exscan", "Reduce_scatter_block", "Reduce_scatter"):
        if c == "Reduce" and rank != root:
            recvarg = None
        elif in_place:
            recv[:] = send
            sendarg, send = MPI.IN_PLACE, None

    if c in ("Scatter", "Scatterv", "Gather", "Gatherv", "Reduce"):
        args: tuple = (sendarg, recvarg, op, root) if c == "Reduce" else (sendarg, recvarg, root)
    elif c == "Reduce_scatter":
        args = (sendarg, recvarg, list(case.counts), op)
    elif op is not None:
        args = (sendarg, recvarg, op)
    else:
        args = (sendarg, recvarg)
    send_copy = send.copy() if send is not None else None
    if root_send is not None:
        send_copy = root_send.copy()
    return Buffers(args, send, send_copy, recv, backing, root_send)


def call(impl: Any, case: Case, bufs: Buffers) -> None:
    """Call the implementation; waits on the request of a non-blocking method,
    and starts, waits for and frees a persistent one."""
    result = getattr(impl, case.method)(*bufs.args)
    if case.method.endswith("_init"):
        if result is None or not hasattr(result, "Start"):
            raise TypeError(f"{case.method} returned {type(result).__name__}, not a persistent request")
        result.Start()
        result.Wait()
        result.Free()
    elif case.method != case.collective:
        if result is None or not hasattr(result, "Wait"):
            raise TypeError(f"{case.method} returned {type(result).__name__}, not a request with Wait()")
        result.Wait()


def judge(case: Case, rank: int, bufs: Buffers) -> Optional[str]:
    """None if this rank's buffers are right after the call, else why not."""
    if bufs.backing is not None:
        item = np.dtype(case.dtype).itemsize
        head = bufs.backing[:GUARD * item]
        tail = bufs.backing[len(bufs.backing) - GUARD * item:]
        before, after = int((head != SENTINEL).sum()), int((tail != SENTINEL).sum())
        if before or after:
            return (f"wrote outside the receive buffer: {before} byte(s) in the {GUARD * item} before "
                    f"its start, {after} in the {GUARD * item} after its end")
    if bufs.send is not None and bufs.send_copy is not None and bufs.send.tobytes() != bufs.send_copy.tobytes():
        return "modified the send buffer"
    if bufs.root_send_in_place is not None and bufs.root_send_in_place.tobytes() != bufs.send_copy.tobytes():
        return "modified the root's send buffer (Scatter in place)"
    if bufs.recv is None:
        return None
    return compare(case, rank, bufs.recv, expected(case, rank))


class BarrierProbe:
    """Checks that nobody leaves a Barrier before everybody entered it.

    Ranks that share a node each store the round number in their own slot of
    an MPI shared-memory window before entering the Barrier, one of them a
    little late; after the Barrier each rank must see every slot of its node
    at that round. Plain loads and stores, so the probe needs no progress
    from an MPI library that the Barrier under test may not be calling.
    Ranks on other nodes are not observed.
    """

    def __init__(self, comm: MPI.Comm) -> None:
        self.node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        item = np.dtype(np.int64).itemsize
        self.win = MPI.Win.Allocate_shared(item, item, comm=self.node)
        self.slots = []
        for r in range(self.node.Get_size()):
            buf, _ = self.win.Shared_query(r)
            self.slots.append(np.frombuffer(buf, dtype=np.int64, count=1))
        self.mine = self.slots[self.node.Get_rank()]
        self.mine[0] = 0
        self.win.Lock_all()
        self.node.Barrier()
        self.world_rank, self.world_size = comm.Get_rank(), comm.Get_size()
        self.rounds = 0

    def before(self, case: Case) -> None:
        """Arrive (the seed picks a rank that is late)."""
        self.rounds += 1
        if self.world_rank == case.seed % self.world_size:
            time.sleep(0.002)
        self.mine[0] = self.rounds
        self.win.Sync()

    def after(self) -> Optional[str]:
        """Depart: every rank of this node must have arrived."""
        self.win.Sync()
        late = [r for r, slot in enumerate(self.slots) if slot[0] < self.rounds]
        if late:
            return (f"left the Barrier before node-local ranks {late} of {len(self.slots)} had "
                    f"entered it")
        return None

    def free(self) -> None:
        """Release the window (collective)."""
        self.win.Unlock_all()
        self.win.Free()
        self.node.Free()


def write_past(buf: np.ndarray, nbytes: int = 1, value: int = 0x77) -> None:
    """Write bytes just past the end of `buf` (for planting bugs in examples)."""
    ctypes.memset(buf.ctypes.data + buf.nbytes, value, nbytes)
