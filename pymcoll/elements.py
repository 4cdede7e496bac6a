"""Element types and reduction ops as the C core numbers them.

Reductions need to know what the bytes are: the element type comes from the
buffer (numpy dtype, torch dtype, memoryview format) or from the MPI
datatype of a buffer spec; the op from mpi4py's predefined ops.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ._native import lib

_BY_KIND = {
    ("i", 1): lib.PMC_DT_INT8, ("i", 2): lib.PMC_DT_INT16, ("i", 4): lib.PMC_DT_INT32, ("i", 8): lib.PMC_DT_INT64,
    ("u", 1): lib.PMC_DT_UINT8, ("u", 2): lib.PMC_DT_UINT16, ("u", 4): lib.PMC_DT_UINT32,
    ("u", 8): lib.PMC_DT_UINT64, ("f", 2): lib.PMC_DT_FLOAT16, ("f", 4): lib.PMC_DT_FLOAT32,
    ("f", 8): lib.PMC_DT_FLOAT64, ("c", 8): lib.PMC_DT_COMPLEX64, ("c", 16): lib.PMC_DT_COMPLEX128,
    ("b", 1): lib.PMC_DT_BOOL,
}

OPS: list[tuple[MPI.Op, int, str]] = [
    (MPI.SUM, lib.PMC_OP_SUM, "SUM"), (MPI.PROD, lib.PMC_OP_PROD, "PROD"), (MPI.MIN, lib.PMC_OP_MIN, "MIN"),
    (MPI.MAX, lib.PMC_OP_MAX, "MAX"), (MPI.LAND, lib.PMC_OP_LAND, "LAND"), (MPI.LOR, lib.PMC_OP_LOR, "LOR"),
    (MPI.LXOR, lib.PMC_OP_LXOR, "LXOR"), (MPI.BAND, lib.PMC_OP_BAND, "BAND"),
    (MPI.BOR, lib.PMC_OP_BOR, "BOR"), (MPI.BXOR, lib.PMC_OP_BXOR, "BXOR"),
]


_by_dtype: dict[Any, Optional[int]] = {}


def code_of_numpy(dtype: np.dtype) -> Optional[int]:
    """Core code of a numpy dtype, or None (structured, object, non-native byte order)."""
    code = _by_dtype.get(dtype, -1)
    if code == -1:
        code = _by_dtype[dtype] = _code_of_numpy(dtype)
    return code


def _code_of_numpy(dtype: np.dtype) -> Optional[int]:
    if not dtype.isnative or dtype.fields is not None or dtype.subdtype is not None:
        return None
    if dtype == np.dtype(np.longdouble) and dtype.itemsize > 8:
        return lib.PMC_DT_LONGDOUBLE
    if dtype == np.dtype(np.clongdouble) and dtype.itemsize > 16:
        return lib.PMC_DT_CLONGDOUBLE
    return _BY_KIND.get((dtype.kind, dtype.itemsize))


def _torch_codes() -> dict[Any, int]:
    import torch

    table = {
        torch.int8: lib.PMC_DT_INT8, torch.int16: lib.PMC_DT_INT16, torch.int32: lib.PMC_DT_INT32,
        torch.int64: lib.PMC_DT_INT64, torch.uint8: lib.PMC_DT_UINT8, torch.float16: lib.PMC_DT_FLOAT16,
        torch.bfloat16: lib.PMC_DT_BFLOAT16, torch.float32: lib.PMC_DT_FLOAT32,
        torch.float64: lib.PMC_DT_FLOAT64, torch.complex64: lib.PMC_DT_COMPLEX64,
        torch.complex128: lib.PMC_DT_COMPLEX128, torch.bool: lib.PMC_DT_BOOL,
    }
    # Unsigned wide types exist only in newer torch releases.
    for name, code in (("uint16", lib.PMC_DT_UINT16), ("uint32", lib.PMC_DT_UINT32), ("uint64", lib.PMC_DT_UINT64)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    return table


_torch_table: Optional[dict[Any, int]] = None


def code_of_torch_dtype(dtype: Any) -> Optional[int]:
    """Core code of a torch dtype, or None if the core has no such element type."""
    global _torch_table
    if _torch_table is None:
        _torch_table = _torch_codes()
    return _torch_table.get(dtype)


def code_of_object(obj: Any) -> Optional[int]:
    """Core code of the elements of a buffer object, or None if unknown."""
    global _torch_table
    if isinstance(obj, np.ndarray):
        return code_of_numpy(obj.dtype)
    mod = type(obj).__module__ or ""
    if mod.startswith("torch") and hasattr(obj, "dtype"):
        if _torch_table is None:
            _torch_table = _torch_codes()
        return _torch_table.get(obj.dtype)
    try:
        fmt = memoryview(obj).format
        return code_of_numpy(np.dtype(fmt))
    except (TypeError, ValueError):
        return None


_by_datatype: Optional[dict[int, int]] = None


def code_of_datatype(datatype: MPI.Datatype) -> Optional[int]:
    """Core code of a predefined MPI datatype, or None."""
    global _by_datatype
    if _by_datatype is None:
        table: dict[int, int] = {}
        for char, dt in getattr(MPI, "_typedict", {}).items():
            try:
                code = code_of_numpy(np.dtype(char))
            except TypeError:
                continue
            if code is not None and dt != MPI.DATATYPE_NULL:
                table.setdefault(dt.handle, code)
        _by_datatype = table
    return _by_datatype.get(datatype.handle)


def code_of_op(op: Any) -> Optional[int]:
    """Core code of a predefined MPI op, or None for any other op."""
    for mpi_op, code, _ in OPS:
        if op == mpi_op:
            return code
    return None


def op_name(code: int) -> str:
    """'SUM', 'PROD', ... for a core op code."""
    return next(name for _, c, name in OPS if c == code)
