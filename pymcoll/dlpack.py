"""Consuming DLPack producers without a third library in between.

A DLPack capsule owns its tensor only as long as the capsule lives; some
producers free the memory in the deleter. pymcoll takes the capsule itself
(``__dlpack__``), marks it used so the capsule's destructor leaves the tensor
alone, keeps it for as long as the collective uses the memory, and calls the
tensor's deleter exactly once when the last reference to the view goes.

Memory on a device that is not host memory (CUDA, ROCm, managed memory, ...)
is not read here: :func:`on_device` tells the caller so, and such calls run
in the wrapped MPI communicator, which hands the pointer to the MPI library as
mpi4py does.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any, Optional

import numpy as np

from .elements import code_of_numpy

_DECLARATIONS = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx; void (*deleter)(struct DLManagedTensorVersioned *);
    uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
"""


@functools.cache
def _ffi() -> Any:
    """The FFI that reads DLPack's structs, made on first use: parsing the
    declarations costs about 50 ms, which a process that never sees a
    DLPack producer should not pay at import."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_DECLARATIONS)
    return ffi

# Device types whose memory the CPU reads directly: CPU, CUDA and ROCm pinned host memory.
HOST_DEVICES = frozenset({1, 3, 11})
_FLAG_READ_ONLY = 1
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}  # DLPack type code -> numpy kind
_BFLOAT = 4

# Private prototypes: setting argtypes on ctypes.pythonapi's shared function
# objects would change them for every other library in the process.
_capsule_get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
# Names a consumer gives a capsule it took (the DLPack protocol's): kept
# alive here because the capsule keeps the pointer, not a copy.
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"


def has_dlpack(obj: Any) -> bool:
    """Whether obj exports DLPack (the protocol's two methods)."""
    return hasattr(obj, "__dlpack__")


def device_of(obj: Any) -> Optional[tuple[int, int]]:
    """(device type, device id) a DLPack producer reports, or None if it reports none."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None:
        return None
    dev = query()
    return int(dev[0]), int(dev[1])


def on_device(obj: Any) -> bool:
    """Whether obj is device memory the CPU must not touch: it has the CUDA
    array interface (mpi4py hands those pointers to MPI as device memory), or
    it exports DLPack from a device that is not host memory."""
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    if has_dlpack(obj):
        dev = device_of(obj)
        return dev is not None and dev[0] not in HOST_DEVICES
    return False


def _release(managed: Any) -> None:
    if managed.deleter != _ffi().NULL:
        managed.deleter(managed)


class View:
    """A consumed DLPack tensor in host memory.

    Attributes: ``address`` (first byte, byte_offset applied), ``nbytes``,
    ``itemsize``, ``readonly``, ``elem`` (the core's element code, None if the
    type has none). The tensor's deleter runs once, when the view is
    garbage-collected or :meth:`release` is called.
    """

    def __init__(self, obj: Any, arg: str) -> None:
        try:
            capsule = obj.__dlpack__(stream=None, max_version=(1, 0))
        except TypeError:  # producers older than DLPack 1.0 take no max_version
            capsule = obj.__dlpack__(stream=None)
        ffi = _ffi()
        if _capsule_valid(capsule, b"dltensor_versioned"):
            managed = ffi.cast("DLManagedTensorVersioned *", _capsule_get(capsule, b"dltensor_versioned"))
            _capsule_rename(capsule, _USED_VERSIONED)
            readonly = bool(managed.flags & _FLAG_READ_ONLY)
        elif _capsule_valid(capsule, b"dltensor"):
            managed = ffi.cast("DLManagedTensor *", _capsule_get(capsule, b"dltensor"))
            _capsule_rename(capsule, _USED)
            readonly = False
        else:
            raise TypeError(f"{arg}: __dlpack__() returned {type(capsule).__name__}, not an unused "
                            f"DLPack capsule")
        # From here the tensor is ours: the finalizer calls its deleter exactly once.
        self._finalizer = weakref.finalize(self, _release, managed)
        t = managed.dl_tensor
        if t.device.device_type not in HOST_DEVICES:
            raise BufferError(f"{arg}: DLPack tensor on device type {t.device.device_type}, "
                              f"not host memory")
        lanes = t.dtype.lanes
        if t.dtype.bits % 8 or lanes < 1:
            raise BufferError(f"{arg}: DLPack elements of {t.dtype.bits} bits x {lanes} lanes are not whole bytes")
        self.itemsize = t.dtype.bits // 8 * lanes
        shape = [int(t.shape[i]) for i in range(t.ndim)]
        count = 1
        for n in shape:
            count *= n
        if t.strides != ffi.NULL and count > 1:
            expect = 1
            for i in reversed(range(t.ndim)):
                if shape[i] != 1 and int(t.strides[i]) != expect:
                    raise BufferError(f"{arg}: DLPack tensor is not C-contiguous; pass a contiguous copy")
                expect *= shape[i]
        self.nbytes = count * self.itemsize
        self.address = int(ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)
        self.readonly = readonly
        self.elem = self._elem(t.dtype.code, t.dtype.bits, lanes)
        self._capsule = capsule

    @staticmethod
    def _elem(code: int, bits: int, lanes: int) -> Optional[int]:
        if lanes != 1:
            return None
        if code == _BFLOAT and bits == 16:
            from ._native import lib

            return lib.PMC_DT_BFLOAT16
        kind = _KINDS.get(code)
        if kind is None:
            return None
        if kind == "b":
            return code_of_numpy(np.dtype(np.bool_)) if bits == 8 else None
        try:
            return code_of_numpy(np.dtype(f"{kind}{bits // 8}"))
        except TypeError:
            # 128-bit floats: long double where the platform's has that size.
            for dt in (np.longdouble, np.clongdouble):
                if np.dtype(dt).kind == kind and np.dtype(dt).itemsize == bits // 8:
                    return code_of_numpy(np.dtype(dt))
            return None

    def release(self) -> None:
        """Give the tensor back to its producer now (idempotent)."""
        self._finalizer()
