"""Running one case on one implementation and judging the result on this rank."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from .case import (IGNORED_OFF_ROOT, NO_IN_PLACE, REDUCING, SENTINEL, Case, mpi_type, recv_layout, send_data,
                   send_layout)
from .oracle import Expectation, compare, expected

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
    ignored: Optional[np.ndarray] = None  # off the root: the receive buffer MPI ignores, plus guards, as bytes

    def memory(self) -> list[Optional[np.ndarray]]:
        """Every array the arguments point into: the send buffer, and the
        receive and ignored memory with their guards (None where absent)."""
        return [self.send, self.backing, self.ignored]


def _guarded(dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    item = np.dtype(dtype).itemsize
    backing = np.full((n + 2 * GUARD) * item, SENTINEL, dtype=np.uint8)
    region = backing[GUARD * item:(GUARD + n) * item].view(dtype)
    return region, backing


def vector_spec(case: Case, buf: np.ndarray, counts: list[int], displs: list[int], arg: str = "buf") -> Any:
    """`buf` as a vector spec written the way `case` says (its spec,
    counts_as, displs_as and dtype_as; see :class:`Case`), for blocks of
    `counts` elements at `displs`. Raises ValueError, naming the Case field,
    when the layout does not allow the form (an integer count for unequal
    counts, a stride for blocks that are not strided, None counts for a
    buffer that equal blocks do not fill, None displacements with gaps)."""
    counts, displs = [int(c) for c in counts], [int(d) for d in displs]
    if len(counts) != len(displs):
        raise ValueError(f"displs: {len(displs)} displacements for {len(counts)} counts")
    size = len(counts)
    cval: Any = counts
    if case.counts_as != "list":
        if len(set(counts)) > 1:
            raise ValueError(f"counts_as: {case.counts_as!r} needs the same count for every rank in {arg}, "
                             f"got {counts}")
        cval = counts[0] if counts else 0
        if case.counts_as == "none":
            if buf.size != sum(counts):
                raise ValueError(f"counts_as: 'none' needs equal blocks filling {arg} exactly; {size} blocks of "
                                 f"{cval} in {buf.size} elements")
            cval = None
    packed, pos = [], 0
    for c in counts:
        packed.append(pos)
        pos += c
    dval: Any = displs
    if case.displs_as == "stride":
        stride = displs[1] - displs[0] if size > 1 else 0
        if displs != [i * stride for i in range(size)]:
            raise ValueError(f"displs_as: 'stride' needs rank i's block at i * stride in {arg}, got displacements "
                             f"{displs}")
        dval = stride
    elif case.displs_as == "none":
        if displs != packed:
            raise ValueError(f"displs_as: 'none' needs the blocks of {arg} back to back, got displacements "
                             f"{displs} for counts {counts}")
        dval = None
    dt: Any = None
    if case.dtype_as == "datatype":
        dt = mpi_type(case.dtype)
    elif case.dtype_as == "typecode":
        dt = np.dtype(case.dtype).char
    if case.spec == "full":
        return [buf, cval, dval, dt]
    if case.spec == "pair":
        return [buf, (cval, dval), dt] if dt is not None else [buf, (cval, dval)]
    if dval is not None:
        raise ValueError(f"spec: 'short' has no place for {arg}'s displacements; it needs displs_as='none'")
    if cval is None:
        return [buf, dt] if dt is not None else buf
    return [buf, cval, dt] if dt is not None else [buf, cval]


def build(case: Case, rank: int) -> Buffers:
    """Arguments of `case.method` for `rank`, with guarded receive memory,
    written in the case's argument forms. The same case and rank give the
    same arguments (fresh memory each time), so one call can run on two
    implementations."""
    c, root = case.collective, case.root
    op = getattr(MPI, case.op) if case.op else None
    in_place = case.in_place and c not in NO_IN_PLACE
    place: Any = MPI.IN_PLACE if case.in_place_as == "IN_PLACE" else None
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
    ignored: Optional[np.ndarray] = None
    ignored_arg: Any = None
    if c in IGNORED_OFF_ROOT and rank != root and case.ignored_as == "buffer" and c not in ("Scatter", "Scatterv"):
        # A receive buffer laid out as the root's, which MPI ignores here: it must stay untouched.
        ilen, icounts, idispls = recv_layout(case, root)
        region, ignored = _guarded(case.dtype, ilen)
        ignored_arg = vector_spec(case, region, icounts, idispls, "recvbuf") if c == "Gatherv" else region
    if c in ("Gather", "Gatherv", "Reduce") and rank != root:
        recv, backing = None, None  # not significant on non-roots
    else:
        recv, backing = _guarded(case.dtype, rlen)
    sendarg: Any = send
    recvarg: Any = recv
    root_send = None

    if c in ("Scatter", "Scatterv"):
        if c == "Scatterv":
            sendarg = vector_spec(case, send, scounts, sdispls, "sendbuf")
        if rank != root and case.ignored_as == "None":
            sendarg = None  # MPI ignores it off the root
        if rank == root and in_place:
            recvarg, recv, backing = place, None, None
            root_send = send
    elif c in ("Gather", "Gatherv"):
        if rank == root:
            if c == "Gatherv":
                recvarg = vector_spec(case, recv, rcounts, rdispls, "recvbuf")
            if in_place:
                recv[rdispls[rank]:rdispls[rank] + rcounts[rank]] = send
                sendarg, send = place, None
        else:
            recvarg = ignored_arg
    elif c in ("Allgather", "Allgatherv"):
        if c == "Allgatherv":
            recvarg = vector_spec(case, recv, rcounts, rdispls, "recvbuf")
        if in_place:
            recv[rdispls[rank]:rdispls[rank] + rcounts[rank]] = send
            sendarg, send = place, None
    elif c in ("Alltoall", "Alltoallv"):
        if c == "Alltoallv":
            sendarg = vector_spec(case, send, scounts, sdispls, "sendbuf")
            recvarg = vector_spec(case, recv, rcounts, rdispls, "recvbuf")
        if in_place:  # same layout: the data to send sits in the receive blocks
            for n, d in zip(rcounts, rdispls):
                recv[d:d + n] = send[d:d + n]
            sendarg, send = place, None
    elif c in REDUCING:
        if c == "Reduce" and rank != root:
            recvarg = ignored_arg
        elif in_place:
            recv[:] = send
            sendarg, send = place, None

    if c in ("Scatter", "Scatterv", "Gather", "Gatherv", "Reduce"):
        args: tuple = (sendarg, recvarg, op, root) if c == "Reduce" else (sendarg, recvarg, root)
    elif c == "Reduce_scatter":
        args = (sendarg, recvarg, None if case.counts_as == "none" else list(case.counts), op)
    elif op is not None:
        args = (sendarg, recvarg, op)
    else:
        args = (sendarg, recvarg)
    send_copy = send.copy() if send is not None else None
    if root_send is not None:
        send_copy = root_send.copy()
    return Buffers(args, send, send_copy, recv, backing, root_send, ignored)


def clone(bufs: Buffers) -> Buffers:
    """A copy of `bufs` in fresh memory holding the same bytes (padding bytes
    included: long doubles have some that numpy leaves unset), with the
    same arguments pointing into it: the same call for a second
    implementation, without drawing the data again."""
    bases = [a for a in bufs.memory() if a is not None]
    copies = [a.copy() for a in bases]

    def same(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            addr = x.__array_interface__["data"][0]
            for a, c in zip(bases, copies):
                if x is a:
                    return c
                off = addr - a.__array_interface__["data"][0]
                if 0 <= off and off + x.nbytes <= a.nbytes and x.flags.c_contiguous:
                    return c.view(np.uint8)[off:off + x.nbytes].view(x.dtype)
            raise ValueError("bufs: an argument points into memory Buffers does not hold")
        if isinstance(x, (list, tuple)):
            return type(x)(same(v) for v in x)
        return x

    return Buffers(args=same(bufs.args), send=same(bufs.send),
                   send_copy=None if bufs.send_copy is None else bufs.send_copy.copy(),
                   recv=same(bufs.recv), backing=same(bufs.backing),
                   root_send_in_place=same(bufs.root_send_in_place), ignored=same(bufs.ignored))


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


def judge(case: Case, rank: int, bufs: Buffers, exp: Optional[Expectation] = None) -> Optional[str]:
    """None if this rank's buffers are right after the call, else why not
    (`exp`: the oracle's expectation, when the caller has it already)."""
    if bufs.backing is not None:
        item = np.dtype(case.dtype).itemsize
        head = bufs.backing[:GUARD * item]
        tail = bufs.backing[len(bufs.backing) - GUARD * item:]
        before, after = int((head != SENTINEL).sum()), int((tail != SENTINEL).sum())
        if before or after:
            return (f"wrote outside the receive buffer: {before} byte(s) in the {GUARD * item} before "
                    f"its start, {after} in the {GUARD * item} after its end")
    if bufs.ignored is not None and bufs.ignored.tobytes() != bytes([SENTINEL]) * bufs.ignored.size:
        return (f"wrote {int((bufs.ignored != SENTINEL).sum())} byte(s) into (or around) the recvbuf that MPI "
                f"ignores off the root")
    if bufs.send is not None and bufs.send_copy is not None and bufs.send.tobytes() != bufs.send_copy.tobytes():
        return "modified the send buffer"
    if bufs.root_send_in_place is not None and bufs.root_send_in_place.tobytes() != bufs.send_copy.tobytes():
        return "modified the root's send buffer (Scatter in place)"
    if bufs.recv is None:
        return None
    return compare(case, rank, bufs.recv, exp if exp is not None else expected(case, rank))


def bitwise_comparable(case: Case) -> bool:
    """Whether two correct implementations must leave identical bytes: every
    collective but floating-point reductions (whose rounding depends on the
    reduction order MPI leaves open)."""
    return not (case.collective in REDUCING and np.dtype(case.dtype).kind in "fc")


def padding_mask(dtype: np.dtype) -> Optional[np.ndarray]:
    """Per byte of one element of `dtype`, True where the byte is padding
    (the 6 bytes after each 80-bit x87 long double in its 16), or None when
    every byte is part of the value."""
    if dtype not in (np.dtype(np.longdouble), np.dtype(np.clongdouble)) or np.finfo(np.longdouble).nmant != 63:
        return None
    part = np.dtype(np.longdouble).itemsize
    if part <= 10:
        return None
    one = np.zeros(part, dtype=bool)
    one[10:] = True
    return np.tile(one, dtype.itemsize // part)


def compare_memory(case: Case, bufs: Buffers, ref: Buffers, exp: Optional[Expectation],
                   name: str = "the wrapped communicator") -> Optional[str]:
    """None if the receive memory of `bufs` (region, guards, ignored buffer)
    holds the same bytes as `ref`'s after the same call elsewhere, else
    where it differs. Positions MPI leaves undefined (`exp.checked` False)
    are skipped; so are floating-point reductions (see
    :func:`bitwise_comparable`)."""
    if not bitwise_comparable(case):
        return None
    item = np.dtype(case.dtype).itemsize
    for label, a, b in (("receive buffer", bufs.backing, ref.backing), ("ignored recvbuf", bufs.ignored, ref.ignored)):
        if a is None or b is None:
            if (a is None) != (b is None):
                return f"the {label} exists in one run only"
            continue
        if a.tobytes() == b.tobytes():  # the usual case, at memcmp speed
            continue
        diff = a != b
        if label == "receive buffer" and exp is not None:
            undefined = np.repeat(~exp.checked, item)
            diff[GUARD * item:GUARD * item + undefined.size] &= ~undefined
        if label == "receive buffer":
            # An x87 long double's padding bytes are not part of its value, and
            # MPI libraries differ in whether they copy them.
            pad = padding_mask(np.dtype(case.dtype))
            if pad is not None:
                region = diff[GUARD * item:diff.size - GUARD * item]
                region &= ~np.tile(pad, region.size // item)
        if diff.any():
            at = int(np.flatnonzero(diff)[0])
            pos = at - GUARD * item
            n = (a.size - 2 * GUARD * item) // item
            if pos < 0:
                where = f"guard byte {-pos} before the {label}"
            elif pos >= n * item:
                where = f"guard byte {pos - n * item} after the {label}"
            else:
                where = f"element {pos // item} (byte {pos % item}) of the {label}"
            return (f"differs from {name}'s result on the same arguments: {where} is 0x{int(a[at]):02x} here, "
                    f"0x{int(b[at]):02x} there ({int(diff.sum())} byte(s) differ)")
    return None


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
