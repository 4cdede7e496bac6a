"""Turning mpi4py-style buffer specifications into (pointer, bytes) messages.

The rules are mpi4py's (the table in docs/collectives.md lists them): a buffer is any
object with the buffer protocol (numpy arrays, bytearray, memoryview, ...), a
torch CPU tensor, or a DLPack producer in host memory (consumed here, see
dlpack.py); a spec is the buffer alone or a list/tuple of 2 to 4 items,
``[buf, datatype]``, ``[buf, count]``, ``[buf, count, datatype]``, ``[buf,
(count, displ), datatype]``, ``[buf, count, displ, datatype]``, where the
datatype may be an MPI.Datatype or a typecode string. In the vector form an
integer count is every rank's count and an integer displacement a stride. A
datatype whose elements are not laid out contiguously (vector, resized,
struct with gaps) is packed into a local contiguous buffer and unpacked after
the call, so every rank moves the same bytes whatever layout it describes
them with. Device memory (CUDA array interface, DLPack on a device) raises
:class:`DeviceBuffer`: such calls run in the wrapped MPI communicator.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Optional

from mpi4py import MPI

from ._native import ffi, lib
from . import dlpack
from .elements import code_of_datatype, code_of_object


class _Packing:
    """Packing and unpacking of a message whose datatype is not contiguous:
    keep[0] is the packed bytearray, pack_from / unpack_to the user's side."""

    keep: list
    pack_from: Optional[tuple]
    unpack_to: Optional[tuple]

    def repack(self) -> None:
        """Pack the user's data again (before each start of a persistent call)."""
        _pack(self.pack_from, self.keep[0])

    def finish(self) -> None:
        """Copy a packed receive message back into the user's layout."""
        if self.unpack_to is None:
            return
        target, count, datatype = self.unpack_to
        packed = self.keep[0]
        rc = lib.pmc_unpack(datatype.handle, ffi.from_buffer(packed), len(packed), target, count)
        if rc != lib.PMC_OK:
            raise ValueError(f"unpacking {count} elements of a derived datatype failed (status {rc})")


@dataclass
class Message(_Packing):
    """A contiguous byte range for the core, plus what keeps it alive."""

    ptr: Any  # cffi pointer (or NULL)
    nbytes: int  # bytes the collective moves for this message
    capacity: int  # bytes available at ptr
    itemsize: int
    keep: list = field(default_factory=list)
    # Set when a non-contiguous datatype was packed: unpack after receiving.
    unpack_to: Optional[tuple] = None  # (user pointer, count, datatype)
    elem: Optional[int] = None  # element type code (pymcoll.elements), None if unknown
    # Set when a non-contiguous datatype was packed for sending: (user pointer, count, datatype).
    pack_from: Optional[tuple] = None


def _pack(source: Optional[tuple], packed: bytearray) -> None:
    if source is None or not packed:
        return
    ptr, count, datatype = source
    rc = lib.pmc_pack(datatype.handle, ptr, count, ffi.from_buffer(packed), len(packed))
    if rc != lib.PMC_OK:
        raise ValueError(f"packing {count} elements of a derived datatype failed (status {rc})")


class MPIArgumentError(MPI.Exception):
    """An argument error mpi4py leaves to MPI (so it raises MPI.Exception with
    this error class), raised before any data moves with a message that
    names the argument."""

    def __init__(self, error_class: int, text: str) -> None:
        super().__init__(error_class)
        self._text = text

    def __str__(self) -> str:
        return self._text


class RunInWrapped(Exception):
    """Raised while preparing a call that the core does not run: it runs in
    the wrapped MPI communicator instead, with its arguments as given
    (arguments.py catches it)."""


class DeviceBuffer(RunInWrapped):
    """A spec whose buffer is device memory."""


def _raw(obj: Any, arg: str, writable: bool) -> tuple[Any, int, int, list, Optional[int]]:
    """(pointer, nbytes, itemsize, keepalive, element code or None) of a plain buffer object."""
    mod = type(obj).__module__ or ""
    if mod.startswith("torch") and hasattr(obj, "data_ptr"):
        if obj.device.type != "cpu":
            raise DeviceBuffer(arg)
        if not obj.is_contiguous():
            raise BufferError(f"{arg}: tensor is not contiguous; call .contiguous() first")
        nbytes = obj.numel() * obj.element_size()
        return ffi.cast("void *", obj.data_ptr()), nbytes, obj.element_size(), [obj], code_of_object(obj)
    try:
        mv = memoryview(obj)
    except TypeError:
        if dlpack.on_device(obj):
            raise DeviceBuffer(arg) from None
        if dlpack.has_dlpack(obj):
            view = dlpack.View(obj, arg)
            if writable and view.readonly:
                raise BufferError(f"{arg}: DLPack tensor is read-only; pass a writable buffer to receive into")
            ptr = ffi.cast("void *", view.address) if view.nbytes else ffi.NULL
            return ptr, view.nbytes, view.itemsize, [view], view.elem
        raise TypeError(
            f"{arg}: expected a buffer (numpy array, bytearray, torch CPU tensor, ...) or a "
            f"buffer spec such as [array, MPI.INT], got {type(obj).__name__}"
        ) from None
    if "O" in mv.format:
        raise TypeError(f"{arg}: buffer holds Python objects; collectives move plain data "
                        "(use the lowercase pickle-based methods for objects)")
    if not mv.c_contiguous:
        raise BufferError(f"{arg}: buffer is not contiguous; pass numpy.ascontiguousarray(...) or a copy")
    if writable and mv.readonly:
        raise BufferError(f"{arg}: buffer is read-only; pass a writable buffer to receive into")
    nbytes, itemsize = mv.nbytes, mv.itemsize
    # The pointer comes from the object, not from the memoryview: a memoryview
    # with a live export crashes the garbage collector when an argument error's
    # traceback keeps both in a reference cycle.
    mv.release()
    if nbytes == 0:
        return ffi.NULL, 0, itemsize, [obj], code_of_object(obj)
    ptr = ffi.from_buffer(obj, require_writable=False)
    return ptr, nbytes, itemsize, [obj, ptr], code_of_object(obj)


def _is_contiguous_type(dt: MPI.Datatype) -> bool:
    lb, extent = dt.Get_extent()
    tlb, textent = dt.Get_true_extent()
    size = dt.Get_size()
    return lb == 0 and tlb == 0 and extent == size and textent == size


def _datatype(obj: Any, arg: str) -> Optional[MPI.Datatype]:
    """A spec's datatype item: an MPI.Datatype, a typecode string ('i', 'd',
    ...) or None (taken from the buffer's format)."""
    if obj is None or isinstance(obj, MPI.Datatype):
        if obj is not None and obj == MPI.DATATYPE_NULL:
            raise ValueError(f"{arg}: datatype is MPI.DATATYPE_NULL; pass a datatype such as MPI.INT")
        return obj
    if isinstance(obj, str):
        try:
            return MPI.Datatype.fromcode(obj)
        except ValueError:
            raise KeyError(f"{arg}: cannot map typecode {obj!r} to an MPI datatype") from None
    raise TypeError(f"{arg}: expected an MPI.Datatype or a typecode string as the datatype, "
                    f"got {type(obj).__name__}")


def _is_type(obj: Any) -> bool:
    return isinstance(obj, (MPI.Datatype, str))


def _index(value: Any, arg: str, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{arg}: {what} must be an integer, got {type(value).__name__}") from None


def _pair(value: tuple, arg: str, what: str) -> tuple[Any, Any]:
    if len(value) != 2:
        raise ValueError(f"{arg}: expected ({what}) as a 2-tuple, got {len(value)} items")
    return value[0], value[1]


def _items(spec: Any, arg: str, vector: bool) -> tuple[Any, Any, Any, Any]:
    """(buf, counts, displs, datatype) of a spec, None where not given.

    Forms: ``buf``; ``[buf, datatype]``; ``[buf, count]``; ``[buf, (count,
    displ)]``; ``[buf, count, datatype]``; ``[buf, (count, displ), datatype]``;
    ``[buf, count, displ, datatype]``. A tuple in the count's place is always
    the pair; in the vector form a list there is the counts.
    """
    if not isinstance(spec, (list, tuple)):
        if spec is None:
            raise TypeError(f"{arg}: expected a buffer or a buffer spec such as [array, MPI.INT], got None")
        return spec, None, None, None
    n = len(spec)
    what = "counts, displacements" if vector else "count, displacement"
    # In the block form a list there is the pair too (a block has one count).
    pair = tuple if vector else (tuple, list)
    if n == 2:
        buf, x = spec
        if x is None or _is_type(x):
            return buf, None, None, x
        if isinstance(x, pair):
            return (buf, *_pair(x, arg, what), None)
        return buf, x, None, None
    if n == 3:
        buf, x, dt = spec
        if isinstance(x, pair):
            return (buf, *_pair(x, arg, what), dt)
        return buf, x, None, dt
    if n == 4:
        return spec[0], spec[1], spec[2], spec[3]
    form = "[buf, counts, displs, datatype]" if vector else "[buf, count, displ, datatype]"
    raise ValueError(f"{arg}: a buffer spec has 2 to 4 items ([buf, datatype], [buf, count, datatype], "
                     f"{form}), got {n}")


def _resolve(buf: Any, datatype: Any, arg: str, writable: bool) -> tuple[Any, Optional[int], list, Any, int, int,
                                                                          Optional[int]]:
    """(pointer, capacity or None for MPI.BOTTOM, keepalive, datatype, size, extent, element code)."""
    datatype = _datatype(datatype, arg)
    if buf is None or buf is MPI.BOTTOM:
        ptr, capacity, itemsize, keep, elem = ffi.NULL, 0 if buf is None else None, 1, [], None
    else:
        ptr, capacity, itemsize, keep, elem = _raw(buf, arg, writable)
    if datatype is None:
        if buf is MPI.BOTTOM:
            raise ValueError(f"{arg}: MPI.BOTTOM needs a datatype built from absolute addresses")
        return ptr, capacity, keep, None, itemsize, itemsize, elem
    return ptr, capacity, keep, datatype, datatype.Get_size(), datatype.Get_extent()[1], code_of_datatype(datatype)


def message(spec: Any, arg: str, *, writable: bool, comm: MPI.Comm,
            blocks: Optional[int] = None) -> Message:
    """Resolve a block buffer spec (mpi4py's rules).

    `blocks` is the number of equal blocks the buffer holds (the communicator
    size for Allgather's receive buffer); the returned nbytes is one block's.
    An explicit count is per block; a displacement moves the start by that
    many elements; an inferred count is what lies after the displacement,
    split into the blocks.
    """
    per_rank = blocks is not None
    blocks = blocks or 1
    buf, count, displ, datatype = _items(spec, arg, vector=False)
    ptr, capacity, keep, datatype, size, extent, elem = _resolve(buf, datatype, arg, writable)
    displ = 0 if displ is None else _index(displ, arg, "displacement")
    if displ < 0:
        raise ValueError(f"{arg}: negative displacement {displ}")
    start = displ * extent
    if count is None:
        if capacity is None:
            raise ValueError(f"{arg}: MPI.BOTTOM needs an explicit count")
        avail = capacity - start
        if avail < 0 or extent <= 0 or avail % extent:
            raise ValueError(f"{arg}: buffer of {capacity} bytes after a displacement of {start} is not a "
                             f"whole number of {extent}-byte elements; give an explicit count")
        count = avail // extent
        if count % blocks:
            raise ValueError(f"{arg}: cannot infer count, {count} elements are not a multiple of the "
                             f"{blocks} ranks; size the buffer as ranks x block or give [buf, count, datatype]")
        count //= blocks
    else:
        count = _index(count, arg, "count")
        if count < 0:
            raise ValueError(f"{arg}: negative count {count}")
    total = count * blocks
    contiguous = datatype is None or _is_contiguous_type(datatype)
    if capacity is not None and total:
        if contiguous:
            reach = start + total * extent
        else:
            _, ext = datatype.Get_extent()
            tlb, textent = datatype.Get_true_extent()
            reach = start + tlb + (total - 1) * ext + textent
        if reach > capacity or (not contiguous and start + tlb < 0):
            raise ValueError(f"{arg}: count={count}{' per rank' if per_rank else ''} needs {reach} bytes "
                             f"but the buffer holds {capacity}; pass a larger buffer or a smaller count")
    if contiguous:
        if capacity is None and total:
            raise ValueError(f"{arg}: MPI.BOTTOM needs a datatype built from absolute addresses")
        if ptr != ffi.NULL and start:
            ptr = ffi.cast("char *", ptr) + start
        cap = 0 if capacity is None else capacity - start
        return Message(ptr, count * size, cap, size, keep, elem=elem)
    # Non-contiguous datatype: pack locally into a contiguous bytearray.
    if ptr != ffi.NULL and start:
        ptr = ffi.cast("char *", ptr) + start
    packed = bytearray(total * size)
    pptr = ffi.from_buffer(packed) if packed else ffi.NULL
    if not writable and total:
        rc = lib.pmc_pack(datatype.handle, ptr, total, pptr, len(packed))
        if rc != lib.PMC_OK:
            raise ValueError(f"{arg}: packing {total} elements of the datatype failed (status {rc})")
    msg = Message(pptr, count * size, len(packed), size, [packed, pptr, keep], elem=elem)
    if writable and total:
        msg.unpack_to = (ptr, total, datatype)
    elif total:
        msg.pack_from = (ptr, total, datatype)
    return msg


@dataclass
class VMessage(_Packing):
    """A vector message (the v-collectives): one buffer, per-rank byte blocks."""

    ptr: Any
    counts: list  # bytes of each rank's block
    displs: list  # byte offset of each rank's block from ptr
    keep: list = field(default_factory=list)
    unpack_to: Optional[tuple] = None  # (user pointer, count, datatype) after receiving
    elem: Optional[int] = None
    pack_from: Optional[tuple] = None


def _is_integer(value: Any) -> bool:
    return hasattr(type(value), "__index__") and not hasattr(value, "__len__")


def int_list(values: Any, arg: str, what: str, size: int) -> list:
    """A sequence of `size` integers (counts or displacements) as a list."""
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{arg}: {what} must be a sequence of {size} integers, got "
                        f"{type(values).__name__}") from None
    if len(items) != size:
        raise ValueError(f"{arg}: {what} has {len(items)} entries; the communicator has {size} ranks")
    return [_index(v, arg, what) for v in items]


def _counts(values: Any, arg: str, size: int) -> list:
    """Counts of a vector spec: an integer is every rank's count."""
    if _is_integer(values):
        out = [_index(values, arg, "count")] * size
    else:
        out = int_list(values, arg, "counts", size)
    bad = [v for v in out if v < 0]
    if bad:
        # mpi4py leaves negative counts to MPI, which reports MPI_ERR_COUNT.
        raise MPIArgumentError(MPI.ERR_COUNT, f"{arg}: counts must be >= 0, got {bad[0]}")
    return out


def _displs(values: Any, counts: list, arg: str, size: int) -> list:
    """Displacements of a vector spec: None packs the blocks back to back; an
    integer d places rank i's block at i * d (a stride)."""
    if values is None:
        out, acc = [], 0
        for n in counts:
            out.append(acc)
            acc += n
        return out
    if _is_integer(values):
        stride = _index(values, arg, "displacement")
        return [stride * i for i in range(size)]
    return int_list(values, arg, "displacements", size)


def vmessage(spec: Any, arg: str, *, writable: bool, comm: MPI.Comm, size: int,
             counts_hint: Optional[list] = None) -> VMessage:
    """Resolve a vector buffer spec (mpi4py's rules): counts and displacements
    in elements of the datatype (counts None: equal blocks; an integer count:
    the same for every rank; displs None: blocks back to back; an integer
    displacement: a stride), returned as bytes. `counts_hint` supplies counts
    given elsewhere (Reduce_scatter's recvcounts)."""
    buf, counts, displs, datatype = _items(spec, arg, vector=True)
    ptr, capacity, keep, datatype, size_, extent, elem = _resolve(buf, datatype, arg, writable)
    if counts is None:
        counts = counts_hint
    if counts is None:
        if capacity is None:
            raise ValueError(f"{arg}: MPI.BOTTOM needs explicit counts")
        if extent <= 0 or capacity % extent:
            raise ValueError(f"{arg}: {capacity} bytes are not a whole number of {extent}-byte elements; "
                             f"give the counts: [buf, counts, displs, datatype]")
        # As mpi4py: the first (elements % size) ranks get one element more.
        whole, extra = divmod(capacity // extent, size)
        counts = [whole + (i < extra) for i in range(size)]
    counts = _counts(counts, arg, size)
    displs = _displs(displs, counts, arg, size)
    used = [(n, d) for n, d in zip(counts, displs) if n > 0]
    first = min((d for _, d in used), default=0)
    end = max((d + n for n, d in used), default=0)
    if first < 0:
        raise ValueError(f"{arg}: a block starts at element {first}, before the buffer; displacements "
                         f"must place every non-empty block inside the buffer")
    contiguous = datatype is None or _is_contiguous_type(datatype)
    if contiguous:
        if capacity is None and end:
            raise ValueError(f"{arg}: MPI.BOTTOM needs a datatype built from absolute addresses")
        if capacity is not None and end * extent > capacity:
            raise ValueError(f"{arg}: the blocks reach element {end} ({end * extent} bytes) but the buffer "
                             f"holds {capacity} bytes; pass a larger buffer or smaller counts/displacements")
        return VMessage(ptr, [n * size_ for n in counts], [d * extent for d in displs], keep, elem=elem)
    # Non-contiguous datatype: pack elements [0, end) so blocks keep their places.
    tlb, textent = datatype.Get_true_extent()
    if capacity is not None and end and (tlb + (end - 1) * extent + textent > capacity or tlb < 0):
        raise ValueError(f"{arg}: {end} elements of this datatype reach past the buffer's {capacity} bytes")
    packed = bytearray(end * size_)
    pptr = ffi.from_buffer(packed) if packed else ffi.NULL
    if end:
        # Receive buffers are packed too, so bytes between blocks survive the unpack.
        rc = lib.pmc_pack(datatype.handle, ptr, end, pptr, len(packed))
        if rc != lib.PMC_OK:
            raise ValueError(f"{arg}: packing {end} elements of the datatype failed (status {rc})")
    msg = VMessage(pptr, [n * size_ for n in counts], [d * size_ for d in displs], [packed, pptr, keep],
                   elem=elem)
    if writable and end:
        msg.unpack_to = (ptr, end, datatype)
    elif end:
        msg.pack_from = (ptr, end, datatype)
    return msg
