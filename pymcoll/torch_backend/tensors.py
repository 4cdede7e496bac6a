"""Tensors, dtypes and reduce ops of the torch.distributed backend.

Everything here is local and raises before any data moves: a bad tensor or
op never enters a collective, so the group stays usable. Data movement goes
through flat uint8 numpy views (any dtype moves as bytes, and numpy arrays
take pymcoll's fast paths); reductions hand pymcoll the typed elements.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from mpi4py import MPI

RedOpType = torch.distributed.ReduceOp.RedOpType

# Every dtype torch and MPI share, plus float16 and bfloat16 (pymcoll reduces
# those itself). Unsigned wide integers exist only in newer torch releases.
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = tuple(
    [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
     torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]
    + [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]
)
_SUPPORTED = frozenset(SUPPORTED_DTYPES)
_FLOATING = frozenset([torch.float16, torch.bfloat16, torch.float32, torch.float64])
_COMPLEX = frozenset([torch.complex64, torch.complex128])

# Bool has no arithmetic in MPI: the ops take their logical meaning (as NCCL
# does for bool: SUM and MAX are "any", PRODUCT and MIN "all").
_BOOL_OPS = {
    RedOpType.SUM: MPI.LOR, RedOpType.MAX: MPI.LOR, RedOpType.BOR: MPI.LOR,
    RedOpType.PRODUCT: MPI.LAND, RedOpType.MIN: MPI.LAND, RedOpType.BAND: MPI.LAND,
    RedOpType.BXOR: MPI.LXOR,
}
_ARITH_OPS = {RedOpType.SUM: MPI.SUM, RedOpType.PRODUCT: MPI.PROD, RedOpType.MIN: MPI.MIN,
              RedOpType.MAX: MPI.MAX, RedOpType.AVG: MPI.SUM}
_BIT_OPS = {RedOpType.BAND: MPI.BAND, RedOpType.BOR: MPI.BOR, RedOpType.BXOR: MPI.BXOR}


def fail(op: str, what: str, error: type[Exception] = ValueError) -> Exception:
    """The exception to raise for a bad call of `op` (message names the backend and the op)."""
    return error(f"pymcoll backend, {op}: {what}")


def check_tensor(t: Any, op: str, arg: str) -> torch.Tensor:
    """`t` if the backend can move it: a strided CPU tensor of a supported dtype."""
    if not isinstance(t, torch.Tensor):
        raise fail(op, f"{arg} must be a torch.Tensor, got {type(t).__name__}", TypeError)
    if t.layout != torch.strided:
        raise fail(op, f"{arg} is a {t.layout} tensor; the pymcoll backend moves dense tensors "
                       f"(call .to_dense() first)")
    if t.device.type != "cpu":
        raise fail(op, f"{arg} is on {t.device}; the pymcoll backend moves CPU tensors "
                       f"(call .cpu() first, or use a GPU backend such as nccl for device tensors)")
    if t.dtype not in _SUPPORTED:
        names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
        raise fail(op, f"{arg} has dtype {t.dtype}, which the pymcoll backend does not move; "
                       f"supported: {names}", TypeError)
    return t


def check_list(ts: Any, op: str, arg: str, length: Optional[int] = None) -> list[torch.Tensor]:
    """A list of checked tensors, of `length` items when given."""
    if not isinstance(ts, (list, tuple)):
        raise fail(op, f"{arg} must be a list of tensors, got {type(ts).__name__}", TypeError)
    if length is not None and len(ts) != length:
        raise fail(op, f"{arg} has {len(ts)} tensors; it needs one per rank of the group ({length})")
    return [check_tensor(t, op, f"{arg}[{i}]") for i, t in enumerate(ts)]


def one(ts: Sequence[Any], op: str, arg: str) -> torch.Tensor:
    """The single tensor of a one-tensor list (torch passes lists; one tensor per process)."""
    if len(ts) != 1:
        raise fail(op, f"{arg} holds {len(ts)} tensors; the pymcoll backend takes one tensor per "
                       f"process (one device per rank)")
    return check_tensor(ts[0], op, arg)


def same_dtype(op: str, ref: torch.Tensor, ts: Sequence[torch.Tensor], arg: str) -> None:
    for i, t in enumerate(ts):
        if t.dtype != ref.dtype:
            raise fail(op, f"{arg}[{i}] has dtype {t.dtype} but the input is {ref.dtype}; "
                           f"use one dtype for every tensor of the call", TypeError)


def reduce_op(op: str, opt: Any, dtype: torch.dtype) -> tuple[MPI.Op, bool]:
    """(the MPI op, whether to divide by the group size afterwards) for torch's ReduceOp on `dtype`."""
    kind = getattr(opt, "op", opt)  # a ReduceOp object carries its RedOpType in .op
    if kind == RedOpType.PREMUL_SUM:
        raise fail(op, "ReduceOp.PREMUL_SUM is not supported by the pymcoll backend; multiply the "
                       "tensor by the factor and use ReduceOp.SUM")
    if dtype == torch.bool:
        if kind in _BOOL_OPS:
            return _BOOL_OPS[kind], False
        raise fail(op, f"ReduceOp.{kind.name} is not defined for bool tensors; use SUM (any), "
                       f"PRODUCT (all) or a bitwise op")
    if kind == RedOpType.AVG and dtype not in _FLOATING and dtype not in _COMPLEX:
        raise fail(op, f"ReduceOp.AVG needs a floating or complex tensor, got {dtype}; reduce with "
                       f"SUM and divide, or convert the tensor to a floating dtype")
    if kind in _BIT_OPS:
        if dtype in _FLOATING or dtype in _COMPLEX:
            raise fail(op, f"ReduceOp.{kind.name} is a bitwise op; it needs an integer or bool "
                           f"tensor, got {dtype}")
        return _BIT_OPS[kind], False
    if kind in (RedOpType.MIN, RedOpType.MAX) and dtype in _COMPLEX:
        raise fail(op, f"ReduceOp.{kind.name} is not defined for complex tensors ({dtype})")
    if kind in _ARITH_OPS:
        return _ARITH_OPS[kind], kind == RedOpType.AVG
    raise fail(op, f"reduce op {opt!r} is not supported by the pymcoll backend")


def byte_view(flat: torch.Tensor) -> np.ndarray:
    """The bytes of a contiguous flat tensor as a numpy array sharing its memory."""
    return flat.view(torch.uint8).numpy()


def typed_view(flat: torch.Tensor) -> Any:
    """What a reduction takes: a numpy view where numpy has the dtype, else the tensor."""
    return flat if flat.dtype == torch.bfloat16 else flat.numpy()


class Staged:
    """A tensor as one contiguous flat buffer.

    A contiguous tensor is used in place (a flat view of it). A
    non-contiguous one, or a lazily conjugated or negated view (whose memory
    does not hold its values), is staged in a contiguous copy;
    ``copy_back()`` writes the copy's contents into the tensor after the
    operation (receivers only).
    """

    __slots__ = ("tensor", "flat", "staged")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t
        d = t.detach()  # the backend writes data, never autograd history
        self.staged = not d.is_contiguous() or d.is_conj() or d.is_neg()
        if self.staged:
            d = d.resolve_conj().resolve_neg().contiguous()
            if d.data_ptr() == t.data_ptr():  # resolving can return the same memory
                d = d.clone()
        self.flat = d.reshape(-1)

    def copy_back(self) -> None:
        if self.staged:
            self.tensor.detach().copy_(self.flat.view(self.tensor.shape))


def concat(ts: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The tensors' elements one after the other in a new flat contiguous tensor."""
    if not ts:
        return torch.empty(0, dtype=dtype)
    return torch.cat([t.detach().reshape(-1) for t in ts])


def scatter_into(flat: torch.Tensor, outs: Sequence[torch.Tensor]) -> Callable[[], None]:
    """A step that copies consecutive pieces of `flat` into `outs` (each its own numel)."""

    def step() -> None:
        at = 0
        for o in outs:
            n = o.numel()
            o.detach().copy_(flat[at:at + n].view(o.shape))
            at += n

    return step


def rows(t: torch.Tensor, op: str, arg: str) -> tuple[int, int]:
    """(rows along dim 0, bytes per row) of a tensor split along its first dimension."""
    if t.dim() == 0:
        raise fail(op, f"{arg} is a 0-dim tensor; it is split along dim 0, so it needs at least one dimension")
    n = t.shape[0]
    per_row = (t.numel() // n if n else int(np.prod(t.shape[1:], dtype=np.int64))) * t.element_size()
    return n, per_row


def split_counts(op: str, arg: str, splits: Sequence[int], nrows: int, row_bytes: int,
                 size: int) -> tuple[list[int], list[int]]:
    """Byte counts and displacements of the blocks of an all_to_all_single operand.

    An empty `splits` means equal blocks (dim 0 must divide by the group size).
    """
    if len(splits) == 0:
        if nrows % size:
            raise fail(op, f"{arg} is empty (equal split) but dim 0 of the tensor ({nrows}) does not "
                           f"divide by the group size ({size}); pass {arg} explicitly")
        splits = [nrows // size] * size
    else:
        splits = [int(s) for s in splits]
        if len(splits) != size:
            raise fail(op, f"{arg} has {len(splits)} entries; it needs one per rank of the group ({size})")
        if any(s < 0 for s in splits):
            raise fail(op, f"{arg} has a negative entry: {splits}")
        if sum(splits) != nrows:
            raise fail(op, f"{arg} sums to {sum(splits)} but dim 0 of the tensor is {nrows}; "
                           f"the splits must add up to dim 0")
    counts = [s * row_bytes for s in splits]
    displs = [0] * size
    for i in range(1, size):
        displs[i] = displs[i - 1] + counts[i - 1]
    return counts, displs
