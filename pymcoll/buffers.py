"""Turning mpi4py-style buffer specifications into (pointer, bytes) messages.

Accepted, as in mpi4py: any object with the buffer protocol (numpy arrays,
bytearray, memoryview, ...), torch CPU tensors, objects with ``__dlpack__``,
and the list/tuple forms ``[buf, datatype]``, ``[buf, count, datatype]`` and
``[buf, (count, displ), datatype]``. A datatype whose elements are not laid
out contiguously (vector, resized, struct with gaps) is packed into a local
contiguous buffer and unpacked after the call, so every rank moves the same
bytes whatever layout it describes them with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from mpi4py import MPI

from ._native import ffi, lib
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


def _raw(obj: Any, arg: str, writable: bool) -> tuple[Any, int, int, list]:
    """(pointer, nbytes, itemsize, keepalive) of a plain buffer object."""
    mod = type(obj).__module__ or ""
    if mod.startswith("torch") and hasattr(obj, "data_ptr"):
        if obj.device.type != "cpu":
            raise BufferError(f"{arg}: tensor is on {obj.device}; pymcoll takes CPU tensors (call .cpu())")
        if not obj.is_contiguous():
            raise BufferError(f"{arg}: tensor is not contiguous; call .contiguous() first")
        nbytes = obj.numel() * obj.element_size()
        return ffi.cast("void *", obj.data_ptr()), nbytes, obj.element_size(), [obj]
    try:
        mv = memoryview(obj)
    except TypeError:
        if hasattr(obj, "__dlpack__"):
            import numpy as np

            return _raw(np.from_dlpack(obj), arg, writable)
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
    if mv.nbytes == 0:
        return ffi.NULL, 0, mv.itemsize, [mv]
    ptr = ffi.from_buffer(mv, require_writable=False)
    return ptr, mv.nbytes, mv.itemsize, [mv, ptr]


def _is_contiguous_type(dt: MPI.Datatype) -> bool:
    lb, extent = dt.Get_extent()
    tlb, textent = dt.Get_true_extent()
    size = dt.Get_size()
    return lb == 0 and tlb == 0 and extent == size and textent == size


def message(spec: Any, arg: str, *, writable: bool, comm: MPI.Comm,
            blocks: Optional[int] = None) -> Message:
    """Resolve a buffer spec.

    `blocks` is the number of equal blocks a plain buffer must split into (the
    communicator size for a receive buffer of Allgather); the returned nbytes
    is then the size of one block.
    """
    per_rank = blocks is not None
    blocks = blocks or 1
    if isinstance(spec, (list, tuple)) and spec and not _looks_like_data(spec):
        raise TypeError(f"{arg}: a buffer spec list must start with the buffer, got {spec!r}")
    if not isinstance(spec, (list, tuple)):
        ptr, nbytes, itemsize, keep = _raw(spec, arg, writable)
        msg = Message(ptr, nbytes, nbytes, itemsize, keep, elem=code_of_object(spec))
        return _split(msg, arg, blocks, nbytes // max(itemsize, 1), itemsize)

    if not 1 <= len(spec) <= 3:
        raise TypeError(f"{arg}: expected [buf], [buf, datatype] or [buf, count, datatype], got {len(spec)} items")
    buf = spec[0]
    datatype = spec[-1] if len(spec) >= 2 and isinstance(spec[-1], MPI.Datatype) else None
    countspec = spec[1] if len(spec) == 3 else (spec[1] if len(spec) == 2 and datatype is None else None)
    ptr, capacity, itemsize, keep = _raw(buf, arg, writable)
    if datatype is None:
        extent, size = itemsize, itemsize
    else:
        if datatype == MPI.DATATYPE_NULL:
            raise ValueError(f"{arg}: datatype is MPI.DATATYPE_NULL")
        size = datatype.Get_size()
        extent = datatype.Get_extent()[1]
    displ = 0
    if countspec is None:
        if extent <= 0 or capacity % extent != 0:
            raise ValueError(f"{arg}: buffer of {capacity} bytes is not a whole number of "
                             f"{extent}-byte elements; give an explicit count")
        count = capacity // extent
        explicit = False
    else:
        if isinstance(countspec, (list, tuple)):
            if len(countspec) != 2:
                raise ValueError(f"{arg}: expected (count, displacement), got {countspec!r}")
            count, displ = countspec
        else:
            count = countspec
        count, displ = int(count), int(displ)
        if count < 0 or displ < 0:
            raise ValueError(f"{arg}: count and displacement must be >= 0, got {count}, {displ}")
        explicit = True
    start = displ * extent
    if explicit:
        need = start + count * extent * blocks
        if need > capacity:
            raise ValueError(f"{arg}: count={count}{' per rank' if per_rank else ''} needs {need} bytes "
                             f"but the buffer holds {capacity}; pass a larger buffer or a smaller count")
    if ptr != ffi.NULL and start:
        ptr = ffi.cast("char *", ptr) + start
    elem = code_of_object(buf) if datatype is None else code_of_datatype(datatype)
    if datatype is None or _is_contiguous_type(datatype):
        msg = Message(ptr, count * size, capacity - start, size, keep, elem=elem)
        if explicit:
            msg.nbytes = count * size
            return msg
        return _split(msg, arg, blocks, count, size)
    # Non-contiguous datatype: pack locally into a contiguous bytearray.
    if blocks > 1 and not explicit:
        if count % blocks:
            raise ValueError(f"{arg}: cannot infer count, {count} elements are not a multiple of {blocks} ranks")
        count //= blocks
    total = count * blocks
    lb, extent = datatype.Get_extent()
    tlb, textent = datatype.Get_true_extent()
    if total and (start + tlb + (total - 1) * extent + textent > capacity or start + tlb < 0):
        raise ValueError(f"{arg}: {total} elements of this datatype reach past the buffer's "
                         f"{capacity} bytes; pass a larger buffer or a smaller count")
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


def _looks_like_data(spec: Any) -> bool:
    first = spec[0]
    return not isinstance(first, (int, float, MPI.Datatype))


def _split(msg: Message, arg: str, blocks: int, count: int, size: int) -> Message:
    if blocks <= 1:
        return msg
    if count % blocks:
        raise ValueError(f"{arg}: cannot infer count, {count} elements are not a multiple of "
                         f"the {blocks} ranks; size the buffer as ranks x block or give [buf, count, datatype]")
    msg.nbytes = (count // blocks) * size
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


def _int_list(values: Any, arg: str, what: str, size: int) -> list:
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values] * size
    try:
        out = [int(v) for v in values]
    except TypeError:
        raise TypeError(f"{arg}: {what} must be a sequence of {size} integers, got {values!r}") from None
    if len(out) != size:
        raise ValueError(f"{arg}: {what} has {len(out)} entries; the communicator has {size} ranks")
    bad = [v for v in out if v < 0]
    if bad:
        raise ValueError(f"{arg}: {what} must be >= 0, got {bad[0]}")
    return out


def _vparts(spec: Any, arg: str) -> tuple[Any, Any, Any, Any]:
    """(buf, counts, displs, datatype) of a v-form spec; None where absent."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    if not spec or not _looks_like_data(spec):
        raise TypeError(f"{arg}: a buffer spec list must start with the buffer, got {spec!r}")
    buf = spec[0]
    datatype = spec[-1] if len(spec) >= 2 and isinstance(spec[-1], MPI.Datatype) else None
    middle = list(spec[1:-1] if datatype is not None else spec[1:])
    counts = displs = None
    if len(middle) == 1:
        m = middle[0]
        # (counts, displs) as one item, or the counts alone.
        if (isinstance(m, tuple) and len(m) == 2
                and (m[0] is None or isinstance(m[0], (list, tuple)) or hasattr(m[0], "__len__"))):
            counts, displs = m
        else:
            counts = m
    elif len(middle) == 2:
        counts, displs = middle
    elif len(middle) > 2:
        raise TypeError(f"{arg}: expected [buf, counts, displs, datatype], [buf, (counts, displs), "
                        f"datatype] or [buf, counts, datatype], got {len(spec)} items")
    return buf, counts, displs, datatype


def vmessage(spec: Any, arg: str, *, writable: bool, comm: MPI.Comm, size: int,
             counts_hint: Optional[list] = None) -> VMessage:
    """Resolve a v-form buffer spec: counts and displacements in elements of
    the datatype (counts None: equal blocks; displs None: blocks back to
    back), returned as bytes. `counts_hint` supplies counts given elsewhere
    (Reduce_scatter's recvcounts)."""
    buf, counts, displs, datatype = _vparts(spec, arg)
    ptr, capacity, itemsize, keep = _raw(buf, arg, writable)
    if datatype is None:
        extent = size_ = itemsize
    else:
        if datatype == MPI.DATATYPE_NULL:
            raise ValueError(f"{arg}: datatype is MPI.DATATYPE_NULL")
        size_ = datatype.Get_size()
        extent = datatype.Get_extent()[1]
    if counts is None:
        counts = counts_hint
    if counts is None:
        if extent <= 0 or capacity % extent or (capacity // extent) % size:
            raise ValueError(f"{arg}: cannot split {capacity} bytes into {size} equal blocks of "
                             f"{extent}-byte elements; give the counts: [buf, counts, displs, datatype]")
        counts = [capacity // extent // size] * size
    counts = _int_list(counts, arg, "counts", size)
    if displs is None:
        displs, acc = [], 0
        for n in counts:
            displs.append(acc)
            acc += n
    else:
        displs = _int_list(displs, arg, "displacements", size)
    end = max((d + n for n, d in zip(counts, displs) if n > 0), default=0)
    elem = code_of_object(buf) if datatype is None else code_of_datatype(datatype)
    if datatype is None or _is_contiguous_type(datatype):
        if end * extent > capacity:
            raise ValueError(f"{arg}: the blocks reach element {end} ({end * extent} bytes) but the buffer "
                             f"holds {capacity} bytes; pass a larger buffer or smaller counts/displacements")
        return VMessage(ptr, [n * size_ for n in counts], [d * extent for d in displs], keep, elem=elem)
    # Non-contiguous datatype: pack elements [0, end) so blocks keep their places.
    lb, extent = datatype.Get_extent()
    tlb, textent = datatype.Get_true_extent()
    if end and tlb + (end - 1) * extent + textent > capacity:
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
