"""Turning an mpi4py-style collective call into the core's ``pmc_args``.

Each ``prepare_<collective>`` checks its arguments the way mpi4py's callers
expect (before any data moves: buffer sizes, read-only or non-contiguous
receive buffers, mismatched send and receive sizes, bad roots, negative
counts) and returns a :class:`PreparedCall`: the filled ``pmc_args`` plus
what must stay alive while the core uses the buffers and what to do after
completion (unpacking derived datatypes). The same PreparedCall serves the
blocking, the non-blocking and the persistent forms.
"""

from __future__ import annotations

import functools
import inspect
import operator
from typing import Any, Callable, Optional

import numpy as np
from mpi4py import MPI

from . import buffers, elements
from ._native import ffi, lib

_IN_PLACE = MPI.IN_PLACE
_NULL = ffi.NULL


class PreparedCall:
    """A prepared collective: core arguments, keep-alives and completion steps."""

    __slots__ = ("args", "keep", "after", "before", "delegate")

    def __init__(self, coll: int) -> None:
        self.args = ffi.new("pmc_args *")
        self.args.coll = coll
        self.keep: list = []
        self.after: list[Callable[[], None]] = []  # run after each completion (unpack)
        self.before: list[Callable[[], None]] = []  # run before each persistent start (re-pack)
        # (method name, args) when the call runs in the wrapped MPI communicator.
        self.delegate: Optional[tuple[str, tuple]] = None

    def finish(self) -> None:
        """Completion steps of a successful run."""
        for step in self.after:
            step()


def _delegated(coll: int, method: str, *args: Any) -> PreparedCall:
    call = PreparedCall(coll)
    call.delegate = (method, args)
    return call


def _device_aware(coll: int, method: str) -> Callable[[Callable[..., PreparedCall]], Callable[..., PreparedCall]]:
    """A prepare function whose calls the core does not run (device memory:
    CUDA array interface, DLPack on a device; user-defined ops) run in the
    wrapped MPI communicator with the arguments as given, as mpi4py would."""

    def wrap(prepare: Callable[..., PreparedCall]) -> Callable[..., PreparedCall]:
        sig = inspect.signature(prepare)

        @functools.wraps(prepare)
        def run(comm: Any, *args: Any, **kwargs: Any) -> PreparedCall:
            try:
                return prepare(comm, *args, **kwargs)
            except buffers.RunInWrapped:
                bound = sig.bind(comm, *args, **kwargs)
                bound.apply_defaults()
                return _delegated(coll, method, *list(bound.arguments.values())[1:])

        return run

    return wrap


def _no_data(spec: Any) -> bool:
    """MPI.IN_PLACE, or None where mpi4py reads None as MPI.IN_PLACE."""
    return spec is _IN_PLACE or spec is None


def _check_root(root: Any, what: str, size: int) -> int:
    # Any integer type mpi4py takes (numpy integers too), but not bool.
    if isinstance(root, bool):
        raise TypeError(f"{what}: root must be an int, got bool")
    try:
        root = operator.index(root)
    except TypeError:
        raise TypeError(f"{what}: root must be an int, got {type(root).__name__}") from None
    if not 0 <= root < size:
        # mpi4py raises MPI.Exception(ERR_ROOT) for this mistake.
        raise MPI.Exception(MPI.ERR_ROOT)
    return root


def _msg(comm: Any, spec: Any, arg: str, writable: bool, blocks: Optional[int] = None) -> buffers.Message:
    # None here is neither MPI.IN_PLACE nor an argument MPI ignores (callers handle those).
    if spec is None:
        raise TypeError(f"{arg}: a buffer is required here, got None")
    return buffers.message(spec, arg, writable=writable, comm=comm._mpi, blocks=blocks)


def _vmsg(comm: Any, spec: Any, arg: str, writable: bool, hint: Optional[list] = None) -> buffers.VMessage:
    if spec is None:
        raise TypeError(f"{arg}: a buffer is required here, got None")
    return buffers.vmessage(spec, arg, writable=writable, comm=comm._mpi, size=comm._size, counts_hint=hint)


def _keep_send(call: PreparedCall, msg: Any) -> None:
    call.keep.append(msg)
    if msg.pack_from is not None:
        call.before.append(msg.repack)


def _keep_recv(call: PreparedCall, msg: Any) -> None:
    call.keep.append(msg)
    if msg.unpack_to is not None:
        call.after.append(msg.finish)


def _u64(call: PreparedCall, values: list) -> Any:
    arr = ffi.new("uint64_t[]", values)
    call.keep.append(arr)
    return arr


def _same_size(send_bytes: int, recv_bytes: int, what: str, who: str = "recvbuf") -> None:
    if send_bytes != recv_bytes:
        raise ValueError(f"{who}: {what} receives {recv_bytes} bytes per block but sendbuf sends "
                         f"{send_bytes}; the send and receive type signatures must match")


# -- data movement -----------------------------------------------------------
def prepare_barrier(comm: Any) -> PreparedCall:
    return PreparedCall(lib.PMC_COLL_BARRIER)


@_device_aware(lib.PMC_COLL_BCAST, "Bcast")
def prepare_bcast(comm: Any, buf: Any, root: int = 0) -> PreparedCall:
    root = _check_root(root, "Bcast", comm._size)
    call = PreparedCall(lib.PMC_COLL_BCAST)
    msg = _msg(comm, buf, "buf", writable=comm._rank != root)
    a = call.args
    a.recvbuf, a.count, a.root = msg.ptr, msg.nbytes, root
    if comm._rank == root:
        _keep_send(call, msg)
    else:
        _keep_recv(call, msg)
    return call


@_device_aware(lib.PMC_COLL_GATHER, "Gather")
def prepare_gather(comm: Any, sendbuf: Any, recvbuf: Any, root: int = 0) -> PreparedCall:
    root = _check_root(root, "Gather", comm._size)
    call = PreparedCall(lib.PMC_COLL_GATHER)
    a = call.args
    a.root = root
    is_root = comm._rank == root
    if is_root:
        recv = _msg(comm, recvbuf, "recvbuf", writable=True, blocks=comm._size)
        _keep_recv(call, recv)
        a.recvbuf = recv.ptr
    if is_root and _no_data(sendbuf):
        if recv.unpack_to is not None:
            raise ValueError("sendbuf: MPI.IN_PLACE needs a contiguous datatype in recvbuf")
        a.in_place, a.count = 1, recv.nbytes
    elif sendbuf is _IN_PLACE:
        raise ValueError("sendbuf: only the root of Gather may pass MPI.IN_PLACE")
    else:
        send = _msg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
        a.sendbuf, a.count = send.ptr, send.nbytes
        if is_root:
            _same_size(send.nbytes, recv.nbytes, "Gather")
    if is_root and recv.unpack_to is None and recv.capacity < a.count * comm._size:
        raise ValueError(f"recvbuf: Gather needs {a.count * comm._size} bytes at the root "
                         f"({comm._size} x {a.count}), the buffer holds {recv.capacity}")
    return call


@_device_aware(lib.PMC_COLL_GATHERV, "Gatherv")
def prepare_gatherv(comm: Any, sendbuf: Any, recvbuf: Any, root: int = 0) -> PreparedCall:
    root = _check_root(root, "Gatherv", comm._size)
    call = PreparedCall(lib.PMC_COLL_GATHERV)
    a = call.args
    a.root = root
    is_root = comm._rank == root
    if is_root:
        recv = _vmsg(comm, recvbuf, "recvbuf", writable=True)
        _keep_recv(call, recv)
        a.recvbuf = recv.ptr
        a.recvcounts = _u64(call, recv.counts)
        a.rdispls = _u64(call, recv.displs)
    if is_root and _no_data(sendbuf):
        a.in_place, a.count = 1, recv.counts[root]
    elif sendbuf is _IN_PLACE:
        raise ValueError("sendbuf: only the root of Gatherv may pass MPI.IN_PLACE")
    else:
        send = _msg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
        a.sendbuf, a.count = send.ptr, send.nbytes
        if is_root and send.nbytes != recv.counts[root]:
            raise ValueError(f"recvbuf: the root's block holds {recv.counts[root]} bytes but its sendbuf "
                             f"sends {send.nbytes}; the send and receive type signatures must match")
    return call


@_device_aware(lib.PMC_COLL_SCATTER, "Scatter")
def prepare_scatter(comm: Any, sendbuf: Any, recvbuf: Any, root: int = 0) -> PreparedCall:
    root = _check_root(root, "Scatter", comm._size)
    call = PreparedCall(lib.PMC_COLL_SCATTER)
    a = call.args
    a.root = root
    is_root = comm._rank == root
    if is_root:
        send = _msg(comm, sendbuf, "sendbuf", writable=False, blocks=comm._size)
        _keep_send(call, send)
        a.sendbuf = send.ptr
        if send.unpack_to is None and send.capacity < send.nbytes * comm._size:
            raise ValueError(f"sendbuf: Scatter needs {send.nbytes * comm._size} bytes at the root, "
                             f"the buffer holds {send.capacity}")
    if is_root and _no_data(recvbuf):
        a.in_place, a.count = 1, send.nbytes
    elif recvbuf is _IN_PLACE:
        raise ValueError("recvbuf: only the root of Scatter may pass MPI.IN_PLACE")
    else:
        recv = _msg(comm, recvbuf, "recvbuf", writable=True)
        _keep_recv(call, recv)
        a.recvbuf, a.count = recv.ptr, recv.nbytes
        if is_root:
            _same_size(send.nbytes, recv.nbytes, "Scatter")
    return call


@_device_aware(lib.PMC_COLL_SCATTERV, "Scatterv")
def prepare_scatterv(comm: Any, sendbuf: Any, recvbuf: Any, root: int = 0) -> PreparedCall:
    root = _check_root(root, "Scatterv", comm._size)
    call = PreparedCall(lib.PMC_COLL_SCATTERV)
    a = call.args
    a.root = root
    is_root = comm._rank == root
    if is_root:
        send = _vmsg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
        a.sendbuf = send.ptr
        a.sendcounts = _u64(call, send.counts)
        a.sdispls = _u64(call, send.displs)
    if is_root and _no_data(recvbuf):
        a.in_place, a.count = 1, send.counts[root]
    elif recvbuf is _IN_PLACE:
        raise ValueError("recvbuf: only the root of Scatterv may pass MPI.IN_PLACE")
    else:
        recv = _msg(comm, recvbuf, "recvbuf", writable=True)
        _keep_recv(call, recv)
        a.recvbuf, a.count = recv.ptr, recv.nbytes
        if is_root and recv.nbytes != send.counts[root]:
            raise ValueError(f"recvbuf: holds {recv.nbytes} bytes but the root's block of sendbuf has "
                             f"{send.counts[root]}; the send and receive type signatures must match")
    return call


@_device_aware(lib.PMC_COLL_ALLGATHER, "Allgather")
def prepare_allgather(comm: Any, sendbuf: Any, recvbuf: Any) -> PreparedCall:
    call = PreparedCall(lib.PMC_COLL_ALLGATHER)
    a = call.args
    size = comm._size
    recv = _msg(comm, recvbuf, "recvbuf", writable=True, blocks=size)
    _keep_recv(call, recv)
    a.recvbuf = recv.ptr
    if _no_data(sendbuf):
        if recv.unpack_to is not None:
            raise ValueError("sendbuf: MPI.IN_PLACE needs a contiguous datatype in recvbuf")
        a.in_place, a.count = 1, recv.nbytes
    else:
        send = _msg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
        if send.nbytes != recv.nbytes:
            raise ValueError(f"recvbuf: holds {recv.nbytes} bytes per rank but sendbuf sends {send.nbytes}; "
                             f"size recvbuf as {size} x the send message ({size * send.nbytes} bytes)")
        a.sendbuf, a.count = send.ptr, send.nbytes
    if recv.unpack_to is None and recv.capacity < a.count * size:
        raise ValueError(f"recvbuf: needs {a.count * size} bytes, holds {recv.capacity}")
    return call


@_device_aware(lib.PMC_COLL_ALLGATHERV, "Allgatherv")
def prepare_allgatherv(comm: Any, sendbuf: Any, recvbuf: Any) -> PreparedCall:
    call = PreparedCall(lib.PMC_COLL_ALLGATHERV)
    a = call.args
    recv = _vmsg(comm, recvbuf, "recvbuf", writable=True)
    _keep_recv(call, recv)
    a.recvbuf = recv.ptr
    a.recvcounts = _u64(call, recv.counts)
    a.rdispls = _u64(call, recv.displs)
    me = comm._rank
    if _no_data(sendbuf):
        a.in_place, a.count = 1, recv.counts[me]
    else:
        send = _msg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
        if send.nbytes != recv.counts[me]:
            raise ValueError(f"recvbuf: this rank's block holds {recv.counts[me]} bytes but sendbuf sends "
                             f"{send.nbytes}; the send and receive type signatures must match")
        a.sendbuf, a.count = send.ptr, send.nbytes
    return call


@_device_aware(lib.PMC_COLL_ALLTOALL, "Alltoall")
def prepare_alltoall(comm: Any, sendbuf: Any, recvbuf: Any) -> PreparedCall:
    call = PreparedCall(lib.PMC_COLL_ALLTOALL)
    a = call.args
    size = comm._size
    recv = _msg(comm, recvbuf, "recvbuf", writable=True, blocks=size)
    _keep_recv(call, recv)
    a.recvbuf = recv.ptr
    if _no_data(sendbuf):
        if recv.unpack_to is not None:
            raise ValueError("sendbuf: MPI.IN_PLACE needs a contiguous datatype in recvbuf")
        a.in_place, a.count = 1, recv.nbytes
    else:
        send = _msg(comm, sendbuf, "sendbuf", writable=False, blocks=size)
        _keep_send(call, send)
        _same_size(send.nbytes, recv.nbytes, "Alltoall")
        if send.unpack_to is None and send.capacity < send.nbytes * size:
            raise ValueError(f"sendbuf: needs {send.nbytes * size} bytes, holds {send.capacity}")
        a.sendbuf, a.count = send.ptr, send.nbytes
    if recv.unpack_to is None and recv.capacity < a.count * size:
        raise ValueError(f"recvbuf: needs {a.count * size} bytes, holds {recv.capacity}")
    return call


@_device_aware(lib.PMC_COLL_ALLTOALLV, "Alltoallv")
def prepare_alltoallv(comm: Any, sendbuf: Any, recvbuf: Any) -> PreparedCall:
    call = PreparedCall(lib.PMC_COLL_ALLTOALLV)
    a = call.args
    recv = _vmsg(comm, recvbuf, "recvbuf", writable=True)
    _keep_recv(call, recv)
    a.recvbuf = recv.ptr
    a.recvcounts = _u64(call, recv.counts)
    a.rdispls = _u64(call, recv.displs)
    me = comm._rank
    if _no_data(sendbuf):
        if recv.unpack_to is not None:
            raise ValueError("sendbuf: MPI.IN_PLACE needs a contiguous datatype in recvbuf")
        a.in_place = 1
    else:
        send = _vmsg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
        if send.counts[me] != recv.counts[me]:
            raise ValueError(f"recvbuf: this rank's own block is {recv.counts[me]} bytes on the receive side "
                             f"but {send.counts[me]} on the send side; the type signatures must match")
        a.sendbuf = send.ptr
        a.sendcounts = _u64(call, send.counts)
        a.sdispls = _u64(call, send.displs)
    return call


# -- reductions --------------------------------------------------------------
_REDUCTION_METHODS = {
    lib.PMC_COLL_ALLREDUCE: "Allreduce", lib.PMC_COLL_REDUCE: "Reduce", lib.PMC_COLL_SCAN: "Scan",
    lib.PMC_COLL_EXSCAN: "Exscan", lib.PMC_COLL_REDUCE_SCATTER_BLOCK: "Reduce_scatter_block",
    lib.PMC_COLL_REDUCE_SCATTER: "Reduce_scatter",
}


def _reduction(comm: Any, coll: int, sendbuf: Any, recvbuf: Any, op: Any, root: Optional[int],
               receives: bool, in_blocks: int, recvcounts: Optional[list] = None) -> PreparedCall:
    """Reductions: `in_blocks` input blocks per output block (size for the
    reduce-scatters, 1 otherwise); recvcounts for Reduce_scatter."""
    what = _REDUCTION_METHODS[coll]
    opc = elements.code_of_op(op)
    if opc is None:
        if not isinstance(op, MPI.Op):
            raise TypeError(f"op: expected an MPI.Op such as MPI.SUM, got {type(op).__name__}")
        # A user-defined op: every rank passes the same one (MPI requires it),
        # so every rank takes the wrapped communicator's path together.
        raise buffers.RunInWrapped("op")
    call = PreparedCall(coll)
    a = call.args
    a.op = opc
    if root is not None:
        a.root = root
    recv = None
    if receives and recvbuf is not None:
        recv = _msg(comm, recvbuf, "recvbuf", writable=True)
    elif receives:
        raise TypeError(f"recvbuf: {what} needs a receive buffer on this rank, got None")
    if sendbuf is _IN_PLACE or (receives and sendbuf is None):
        if root is not None and not receives:
            raise ValueError(f"sendbuf: only the root of {what} may pass MPI.IN_PLACE")
        if recv is None:
            raise ValueError("sendbuf: MPI.IN_PLACE takes the input from recvbuf, which is missing")
        if recv.unpack_to is not None:
            raise ValueError("sendbuf: MPI.IN_PLACE needs a contiguous datatype in recvbuf")
        send = None
        a.in_place = 1
    else:
        send = _msg(comm, sendbuf, "sendbuf", writable=False)
        _keep_send(call, send)
    if recv is not None:
        _keep_recv(call, recv)
    elem = None
    for m in (send, recv):
        if m is not None and m.elem is not None:
            if elem is not None and m.elem != elem:
                raise ValueError("recvbuf: its element type differs from sendbuf's; "
                                 "reductions need the same type on both sides")
            elem = m.elem
    if elem is None:
        raise TypeError(f"{'sendbuf' if send is not None else 'recvbuf'}: cannot tell the element type; "
                        f"pass a numpy array, a torch tensor or a spec such as [buf, MPI.DOUBLE]")
    if not lib.pmc_op_valid(elem, opc):
        raise MPI.Exception(MPI.ERR_OP)
    esize = lib.pmc_dtype_size(elem)
    a.dtype = elem
    ref = send if send is not None else recv
    if ref.nbytes % esize:
        raise ValueError(f"sendbuf: {ref.nbytes} bytes are not a whole number of {esize}-byte elements")
    in_count = ref.nbytes // esize
    if coll == lib.PMC_COLL_REDUCE_SCATTER:
        counts = _reduce_scatter_counts(comm, recvcounts, send, recv, esize)
        if sum(counts) != in_count:
            raise ValueError(f"recvcounts: they add up to {sum(counts)} elements but the input holds {in_count}")
        a.recvcounts = _u64(call, counts)
        out_count = counts[comm._rank]
    elif in_blocks > 1:
        if in_count % in_blocks:
            raise ValueError(f"sendbuf: {in_count} elements do not split into {in_blocks} equal blocks "
                             f"(one per rank)")
        out_count = in_count // in_blocks
        a.count = out_count
    else:
        out_count = a.count = in_count
    if send is not None and recv is not None and recv.nbytes < out_count * esize:
        raise ValueError(f"recvbuf: holds {recv.nbytes} bytes but {what} delivers {out_count * esize} "
                         f"({out_count} elements) here; pass a larger buffer")
    if send is not None and recv is not None and in_blocks == 1 and coll != lib.PMC_COLL_REDUCE_SCATTER \
            and recv.nbytes != send.nbytes:
        raise ValueError(f"recvbuf: holds {recv.nbytes} bytes but sendbuf holds {send.nbytes}; "
                         f"both must hold the same number of elements of the same type")
    a.sendbuf = send.ptr if send is not None else _NULL
    a.recvbuf = recv.ptr if recv is not None else _NULL
    return call


def _reduce_scatter_counts(comm: Any, recvcounts: Any, send: Any, recv: Any, esize: int) -> list:
    """Reduce_scatter's counts: as given, or (None, as mpi4py does) every
    rank's receive buffer length, gathered from all ranks."""
    size = comm._size
    if recvcounts is None:
        if send is None:
            raise TypeError("recvcounts: required with MPI.IN_PLACE (the receive buffer then holds the "
                            "whole input); pass one count per rank")
        mine = np.array([recv.nbytes // esize], dtype=np.int64)
        every = np.empty(size, dtype=np.int64)
        comm.Allgather(mine, every)
        return every.tolist()
    if not hasattr(recvcounts, "__len__"):
        raise TypeError(f"recvcounts: expected a sequence of {size} counts (one per rank) or None, "
                        f"got {type(recvcounts).__name__}")
    counts = buffers.int_list(recvcounts, "recvcounts", "recvcounts", size)
    bad = [v for v in counts if v < 0]
    if bad:
        raise ValueError(f"recvcounts: recvcounts must be >= 0, got {bad[0]}")
    return counts


@_device_aware(lib.PMC_COLL_ALLREDUCE, "Allreduce")
def prepare_allreduce(comm: Any, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> PreparedCall:
    return _reduction(comm, lib.PMC_COLL_ALLREDUCE, sendbuf, recvbuf, op, None, True, 1)


@_device_aware(lib.PMC_COLL_REDUCE, "Reduce")
def prepare_reduce(comm: Any, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, root: int = 0) -> PreparedCall:
    root = _check_root(root, "Reduce", comm._size)
    return _reduction(comm, lib.PMC_COLL_REDUCE, sendbuf, recvbuf, op, root, comm._rank == root, 1)


@_device_aware(lib.PMC_COLL_REDUCE_SCATTER_BLOCK, "Reduce_scatter_block")
def prepare_reduce_scatter_block(comm: Any, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> PreparedCall:
    return _reduction(comm, lib.PMC_COLL_REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op, None, True, comm._size)


@_device_aware(lib.PMC_COLL_REDUCE_SCATTER, "Reduce_scatter")
def prepare_reduce_scatter(comm: Any, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                           op: Any = MPI.SUM) -> PreparedCall:
    return _reduction(comm, lib.PMC_COLL_REDUCE_SCATTER, sendbuf, recvbuf, op, None, True, comm._size,
                      recvcounts=recvcounts)


@_device_aware(lib.PMC_COLL_SCAN, "Scan")
def prepare_scan(comm: Any, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> PreparedCall:
    return _reduction(comm, lib.PMC_COLL_SCAN, sendbuf, recvbuf, op, None, True, 1)


@_device_aware(lib.PMC_COLL_EXSCAN, "Exscan")
def prepare_exscan(comm: Any, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> PreparedCall:
    return _reduction(comm, lib.PMC_COLL_EXSCAN, sendbuf, recvbuf, op, None, True, 1)
