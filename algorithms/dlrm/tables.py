"""The embedding rows a rank owns, their lookup with pooling and their sparse updates.

Each :class:`~pymcoll.algorithms.dlrm.planner.Shard` of the plan that lives
on this rank becomes a block of rows x columns. Its initial values depend
only on (seed, table, row, column) — blocks of 4096 rows are drawn from a
generator seeded by (seed, table, block) — so that any sharding of a table,
and a single-process model, start from the same weights.

Lookup pools the ids of each sample that fall in the shard's rows (a
row-wise shard skips the others: their rows live elsewhere) as a weighted
sum; the caller adds the partial sums of row-wise shards, concatenates the
blocks of column-wise ones, and divides by the sample's id count for mean
pooling. Updates touch only the rows looked up: SGD, or row-wise Adagrad
(one accumulator per row: the mean square of its gradient).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch

from .planner import Shard

INIT_BLOCK_ROWS = 4096


def initial_rows(seed: int, table: int, rows: int, dim: int, row_start: int, row_end: int, col_start: int,
                 col_end: int) -> np.ndarray:
    """Rows [row_start, row_end) x columns [col_start, col_end) of a table's
    initial weights: uniform in +-1/sqrt(rows), the same whatever the sharding."""
    bound = 1.0 / math.sqrt(rows)
    out = np.empty((row_end - row_start, col_end - col_start), np.float32)
    first, last = row_start // INIT_BLOCK_ROWS, (row_end - 1) // INIT_BLOCK_ROWS if row_end > row_start else -1
    for block in range(first, last + 1):
        b0 = block * INIT_BLOCK_ROWS
        b1 = min(b0 + INIT_BLOCK_ROWS, rows)
        values = np.random.default_rng([seed, table, block]).uniform(-bound, bound, (b1 - b0, dim))
        lo, hi = max(b0, row_start), min(b1, row_end)
        out[lo - row_start:hi - row_start] = values[lo - b0:hi - b0, col_start:col_end]
    return out


class ShardTable:
    """One shard's rows with its optimizer state."""

    def __init__(self, shard: Shard, rows: int, dim: int, seed: int) -> None:
        self.shard = shard
        self.weight = torch.from_numpy(initial_rows(seed, shard.table, rows, dim, shard.row_start, shard.row_end,
                                                    shard.col_start, shard.col_end))
        self.adagrad: Optional[torch.Tensor] = None

    def pool(self, lengths: torch.Tensor, ids: torch.Tensor,
             weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Weighted sum per sample of the rows of `ids` that this shard holds: (batch, cols)."""
        s = self.shard
        keep = (ids >= s.row_start) & (ids < s.row_end)
        sample = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        out = torch.zeros(lengths.numel(), s.cols, dtype=self.weight.dtype)
        local = ids[keep] - s.row_start
        rows = self.weight.index_select(0, local)
        if weights is not None:
            rows = rows * weights[keep].unsqueeze(1)
        return out.index_add_(0, sample[keep], rows)

    def row_gradients(self, lengths: torch.Tensor, ids: torch.Tensor, grad_pooled: torch.Tensor,
                      weights: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(unique local rows, their gradients) from the gradient of the pooled sums."""
        s = self.shard
        keep = (ids >= s.row_start) & (ids < s.row_end)
        sample = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)[keep]
        g = grad_pooled.index_select(0, sample)
        if weights is not None:
            g = g * weights[keep].unsqueeze(1)
        rows, inverse = torch.unique(ids[keep] - s.row_start, return_inverse=True)
        summed = torch.zeros(rows.numel(), s.cols, dtype=g.dtype).index_add_(0, inverse, g)
        return rows, summed

    def apply(self, rows: torch.Tensor, grads: torch.Tensor, *, optimizer: str = "sgd", lr: float = 0.01,
              eps: float = 1e-8) -> None:
        """Updates `rows` (local indices, unique) with their gradients."""
        if optimizer == "sgd":
            self.weight.index_add_(0, rows, grads, alpha=-lr)
        elif optimizer == "rowwise_adagrad":
            if self.adagrad is None:
                self.adagrad = torch.zeros(self.weight.shape[0], dtype=self.weight.dtype)
            self.adagrad.index_add_(0, rows, grads.pow(2).mean(dim=1))
            scale = lr / (self.adagrad.index_select(0, rows).sqrt() + eps)
            self.weight.index_add_(0, rows, -grads * scale.unsqueeze(1))
        else:
            raise ValueError(f"optimizer={optimizer!r}: use 'sgd' or 'rowwise_adagrad'")


def local_tables(shards: Sequence[Shard], table_sizes: Sequence[int], dim: int, seed: int) -> list[ShardTable]:
    """The ShardTables of the given shards (this rank's, from ShardingPlan.shards_on)."""
    return [ShardTable(s, table_sizes[s.table], dim, seed) for s in shards]
