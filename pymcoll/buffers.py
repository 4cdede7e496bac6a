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


@dataclass
class Message:
    """A contiguous byte range for the core, plus what keeps it alive."""

    ptr: Any  # cffi pointer (or NULL)
    nbytes: int  # bytes the collective moves for this message
    capacity: int  # bytes available at ptr
    itemsize: int
    keep: list = field(default_factory=list)
    # Set when a non-contiguous datatype was packed: unpack after receiving.
    unpack_to: Optional[tuple] = None  # (user pointer, count, datatype)
    elem: Optional[int] = None  # element type code (pymcoll.elements), None if unknown

    def finish(self) -> None:
        """Copy a packed receive message back into the user's layout."""
        if self.unpack_to is None:
            return
        target, count, datatype = self.unpack_to
        packed = self.keep[0]
        rc = lib.pmc_unpack(datatype.handle, ffi.from_buffer(packed), len(packed), target, count)
        if rc != lib.PMC_OK:
            raise ValueError(f"unpacking {count} elements of a derived datatype failed (status {rc})")


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
