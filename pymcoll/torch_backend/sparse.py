"""Sparse all_reduce of the torch.distributed backend: torch's sparse COO tensors, summed.

Every rank's nonzero entries travel to every rank (two Allgatherv: indices and values), where
torch sums entries at the same index (``coalesce``). The cost grows with the ranks' nonzeros
together, not with the tensor's dense size: what embedding gradients with few touched rows need.
As torch's gloo backend, only SUM (and AVG, SUM divided by the group size on floating values).
"""

from __future__ import annotations

from typing import Any

import torch

import pymcoll

from .tensors import SUPPORTED_DTYPES, byte_view, fail

RedOpType = torch.distributed.ReduceOp.RedOpType


def _check(op: str, t: torch.Tensor, kind: Any) -> None:
    kind = getattr(kind, "op", kind)
    if kind not in (RedOpType.SUM, RedOpType.AVG):
        raise fail(op, f"a sparse tensor is reduced with SUM or AVG only, got {kind}; call .to_dense() for "
                       f"other ops")
    if kind == RedOpType.AVG and not (t.dtype.is_floating_point or t.dtype.is_complex):
        raise fail(op, f"AVG of a sparse {t.dtype} tensor: AVG needs floating or complex values")
    if t.device.type != "cpu":
        raise fail(op, f"tensor is on {t.device}; the pymcoll backend moves CPU tensors (call .cpu() first)")
    if t.dtype not in SUPPORTED_DTYPES or t.dtype == torch.bool:
        raise fail(op, f"a sparse tensor of dtype {t.dtype} cannot be summed here", TypeError)


def all_reduce(comm: pymcoll.Comm, op: str, t: torch.Tensor, kind: Any) -> None:
    """Sums the sparse COO tensor `t` over the ranks of `comm`, in place (blocking).

    Every rank first learns every rank's shape, dtype and number of entries, so a mismatch raises
    the same error on every rank before any entry moves and the group stays usable."""
    _check(op, t, kind)
    local = t.detach().coalesce()
    indices = local.indices().t().contiguous()  # one row of sparse_dim indices per entry
    values = local.values().contiguous()  # one row of the dense dimensions per entry
    me = (tuple(t.shape), t.sparse_dim(), str(t.dtype), int(values.shape[0]))
    everyone = comm.allgather(me)
    differ = [r for r, other in enumerate(everyone) if other[:3] != me[:3]]
    if differ:
        r = differ[0]
        raise fail(op, f"rank {r} passed a sparse tensor of shape {list(everyone[r][0])}, {everyone[r][1]} sparse "
                       f"dimensions and {everyone[r][2]}, this rank shape {list(me[0])}, {me[1]} sparse dimensions "
                       f"and {me[2]}; every rank must pass the same kind of tensor")
    nnz = [other[3] for other in everyone]
    total = sum(nnz)
    all_indices = torch.empty((total, indices.shape[1]), dtype=indices.dtype)
    all_values = torch.empty((total, *values.shape[1:]), dtype=values.dtype)
    for mine, out in ((indices, all_indices), (values, all_values)):
        row = out[0].numel() * out.element_size() if total else 0
        comm.Allgatherv(byte_view(mine.reshape(-1)), [byte_view(out.reshape(-1)), [n * row for n in nnz]])
    summed = torch.sparse_coo_tensor(all_indices.t(), all_values, t.shape, dtype=t.dtype).coalesce()
    if getattr(kind, "op", kind) == RedOpType.AVG:
        summed = summed / comm.size
    with torch.no_grad():
        t.copy_(summed)
