"""Arrays in the node's shared heap: the direct (zero-bounce) data path.

Every local rank maps the heap, so when a collective's buffer lies in it the
peers copy straight from it with a plain memcpy: no system call and no copy
through the segment's cells. Allocation is local (no other rank takes part).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import config
from ._native import ffi, lib


def alloc(shape: Any, dtype: Any, comm: Any) -> np.ndarray:
    """A new (uninitialised) numpy array of `shape` and `dtype` in the shared
    heap of `comm`'s node.

    A local call: no other rank takes part. ``torch.from_numpy`` works on the
    result. Its memory returns to the heap when the array and every view of
    it are gone (the heap outlives ``comm.Free()`` until then). The heap's
    size per node is ``PYMCOLL_HEAP_SIZE``; each local rank owns an equal
    share, and exhausting it raises MemoryError. On a node where this rank
    has no local peer, or without a node segment, the array is ordinary
    memory (nobody could read it directly anyway).
    """
    from .comm import Comm, forget_remembered_calls

    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a pymcoll.Comm, got {type(comm).__name__}")
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype: {dt} holds Python objects; the heap holds plain data")
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    try:
        dims = tuple(int(d) for d in dims)
    except (TypeError, ValueError):
        raise TypeError(f"shape: expected an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape: dimensions must be >= 0, got {dims}")
    nbytes = math.prod(dims) * dt.itemsize
    heap = lib.pmc_comm_heap(comm._live_handle("pymcoll.alloc"))
    if heap == ffi.NULL or nbytes == 0:
        return np.empty(dims, dt)
    out = ffi.new("void **")
    rc = lib.pmc_heap_alloc(heap, nbytes, out)
    if rc == lib.PMC_ERR_NOMEM:
        # The communicators' remembered last calls may be what holds the
        # space (they keep their arrays): let them go and try once more.
        forget_remembered_calls()
        rc = lib.pmc_heap_alloc(heap, nbytes, out)
    if rc == lib.PMC_ERR_NOMEM:
        arena, used, largest = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
        lib.pmc_heap_stats(heap, arena, used, largest)
        raise MemoryError(
            f"pymcoll.alloc: {nbytes} bytes do not fit in this rank's share of the node heap "
            f"({arena[0]} bytes, {used[0]} in use, largest free block {largest[0]}); raise "
            f"PYMCOLL_HEAP_SIZE (now {config.value('PYMCOLL_HEAP_SIZE')} bytes per node) or drop arrays "
            f"allocated earlier")
    if rc == lib.PMC_ERR_SHM:
        raise MemoryError(
            f"pymcoll.alloc: {config.value('PYMCOLL_SHM_DIR')} has no room left for the pages of {nbytes} bytes "
            f"(the heap takes them from there as arrays are allocated); free space there, enlarge it (a "
            f"container's --shm-size), or use ordinary numpy arrays")
    if rc != lib.PMC_OK:
        raise MemoryError(f"pymcoll.alloc: the heap refused {nbytes} bytes (status {rc})")
    # The block is freed when the last reference to this pointer goes: the
    # buffer holds it, the array holds the buffer, views hold the array.
    ptr = ffi.gc(ffi.cast("char *", out[0]), lambda p, h=heap: lib.pmc_heap_free(h, p), size=nbytes)
    return np.frombuffer(ffi.buffer(ptr, nbytes), dtype=dt).reshape(dims)


def heap_usage(comm: Any) -> tuple[int, int, int]:
    """(this rank's share, bytes in use, largest free block) of `comm`'s node
    heap; (0, 0, 0) when it has none."""
    heap = lib.pmc_comm_heap(comm._live_handle("heap_usage"))
    if heap == ffi.NULL:
        return (0, 0, 0)
    arena, used, largest = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
    lib.pmc_heap_stats(heap, arena, used, largest)
    return (int(arena[0]), int(used[0]), int(largest[0]))
