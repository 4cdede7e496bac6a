"""A collection of embedding bags sharded over ranks, for torch.

One table per sparse feature. Each rank keeps the shards the plan gives it
(:mod:`.tables`) and, per forward pass, receives every rank's ids for them,
pools, and returns the pooled rows through the exchange
(:mod:`.exchange`); it gets back, for its own samples, a
``(batch, features, dim)`` tensor that autograd differentiates like any
other. The backward pass sends the gradients to the owners, which keep them
until :meth:`ShardedEmbeddingBagCollection.apply_gradients` updates their
rows (SGD or row-wise Adagrad, touching only the rows looked up).

Sharded or not, the collection computes the same values: shard rows start
from the same initial values whatever the placement, row-wise partial sums
are added, column blocks concatenated, and mean pooling divides by each
sample's full id count on its own rank.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from .block_codec import BlockCodec
from .data import SparseFeatures
from .exchange import (Exchange, PooledAllToAll, RoutedInput, check_local_input, plan_signature, pooled_layout,
                       route_sparse)
from .link import LinkLimiter
from .planner import ShardingPlan, plan_tables
from .tables import ShardTable, local_tables
from .transport import PymcollTransport, Transport

POOLINGS = ("sum", "mean")
OPTIMIZERS = ("sgd", "rowwise_adagrad")


class _Lookup(torch.autograd.Function):
    """This rank's shards pool the ids routed to them; backward keeps the
    gradients of the rows looked up for apply_gradients()."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, owner: "ShardedEmbeddingBagCollection",
                routed: RoutedInput) -> tuple[torch.Tensor, ...]:
        ctx.owner, ctx.routed = owner, routed
        weights = routed.weights or [None] * len(owner.shards)
        return tuple(t.pool(ln, ix, w) for t, ln, ix, w in
                     zip(owner.shards, routed.lengths, routed.ids, weights, strict=True))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[None, None, None]:
        owner, routed = ctx.owner, ctx.routed
        weights = routed.weights or [None] * len(owner.shards)
        for k, (t, ln, ix, w, g) in enumerate(zip(owner.shards, routed.lengths, routed.ids, weights, grads,
                                                  strict=True)):
            owner._pending[k].append(t.row_gradients(ln, ix, g, w))
        return None, None, None


class ShardedEmbeddingBagCollection(torch.nn.Module):
    """Embedding bags of `table_sizes` rows x `dim` columns, one per sparse
    feature, sharded over the ranks of `transport` by `plan`.

    The arguments are the same on every rank.

    Args:
        table_sizes: rows per table.
        dim: embedding dimension.
        transport: a :class:`~.transport.Transport`, or a pymcoll/mpi4py
            communicator (wrapped in :class:`~.transport.PymcollTransport`);
            None: MPI.COMM_WORLD.
        plan: a :class:`~.planner.ShardingPlan`; default
            ``plan_tables(table_sizes, dim, world, kinds=kinds)``.
        kinds: "auto", "table", "row", "column" or one per table (when no plan).
        pooling: "sum" or "mean".
        optimizer: "sgd" or "rowwise_adagrad".
        lr: the optimizer's learning rate.
        eps: the optimizer's epsilon.
        seed: the seed of the initial rows (see :func:`~.tables.initial_rows`).
        codec: the pooled exchange's block codec, a :class:`~.block_codec.BlockCodec`
            (None: floats as they are).
        link_gbps: emulated link bandwidth per rank (None: no limit).
        link_latency_us: emulated link latency per rank (None: none).
        link: an emulated link as a :class:`~.link.LinkLimiter` (e.g. ``LinkLimiter.tcp(1.0)``),
            instead of link_gbps and link_latency_us.
    """

    def __init__(self, table_sizes: Sequence[int], dim: int, transport: Any = None, *,
                 plan: Optional[ShardingPlan] = None, kinds: Union[str, Sequence[str]] = "auto",
                 pooling: str = "sum", optimizer: str = "sgd", lr: float = 0.01, eps: float = 1e-8,
                 seed: int = 0, codec: Optional[BlockCodec] = None, link_gbps: Optional[float] = None,
                 link_latency_us: float = 0.0, link: Optional[LinkLimiter] = None) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}: use 'sum' or 'mean'")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={optimizer!r}: use 'sgd' or 'rowwise_adagrad'")
        if lr <= 0:
            raise ValueError(f"lr={lr}: the embedding learning rate must be > 0")
        self.transport: Transport = transport if hasattr(transport, "alltoallv") else PymcollTransport(transport)
        world = self.transport.size
        self.table_sizes = [int(s) for s in table_sizes]
        self.dim = int(dim)
        self.plan = plan if plan is not None else plan_tables(self.table_sizes, self.dim, world, kinds=kinds)
        if self.plan.world_size != world:
            raise ValueError(f"plan: made for {self.plan.world_size} ranks, the transport has {world}")
        if self.plan.dim != self.dim or len(self.plan.tables) != len(self.table_sizes):
            raise ValueError("plan: made for other tables or another dimension than table_sizes and dim")
        self.pooling, self.optimizer, self.lr, self.eps, self.seed = pooling, optimizer, float(lr), eps, seed
        self.exchange = Exchange(self.transport, link_gbps=link_gbps, link_latency_us=link_latency_us, codec=codec,
                                 link=link)
        self.rank = self.transport.rank
        self.kinds = [t.kind for t in self.plan.tables]
        self.signature = plan_signature(self.plan, self.table_sizes, pooling)
        self.shards: list[ShardTable] = local_tables(self.plan.shards_on(self.rank), self.table_sizes, self.dim,
                                                     seed)
        self._pending: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.shards]
        # A zero-sized tensor that requires grad: what connects the exchange to autograd.
        self._anchor = torch.zeros(0, requires_grad=True)
        self.last_batch_sizes: list[int] = []

    @property
    def num_features(self) -> int:
        return len(self.table_sizes)

    def forward(self, features: Union[SparseFeatures, tuple[Any, Any]],
                per_sample_weights: Optional[Any] = None) -> torch.Tensor:
        """Pooled embeddings (batch, features, dim) of this rank's samples.

        `features`: a SparseFeatures, or (lengths, ids) with lengths (features,
        batch) and ids feature after feature (numpy or torch, integer).
        A collective: every rank calls it, whatever its batch size (0 allowed).
        """
        lengths, ids, weights, problem = _as_tensors(features, per_sample_weights)
        if problem is None:
            problem = check_local_input(lengths, ids, weights, self.table_sizes)
        ex = self.exchange
        routed = route_sparse(ex, self.plan, self.kinds, self.signature, lengths, ids, weights, problem)
        self.last_batch_sizes = routed.batch_sizes
        layout = pooled_layout(self.plan, self.table_sizes, routed.batch_sizes, self.rank, ex.step)
        layout.encoded = routed.encoded
        ex.step += 1
        world = ex.size
        if self.shards:
            pooled = _Lookup.apply(self._anchor, self, routed)
        else:
            pooled = ()
        # Per destination, this rank's shards' rows of the destination's samples.
        offsets = np.concatenate([[0], np.cumsum(routed.batch_sizes)]).tolist()
        pieces = [p[offsets[d]:offsets[d + 1]].reshape(-1) for d in range(world) for p in pooled]
        send = torch.cat(pieces + [self._anchor])
        received = PooledAllToAll.apply(ex, layout, send)
        return self._assemble(received, layout, lengths)

    def _assemble(self, received: torch.Tensor, layout: Any, lengths: torch.Tensor) -> torch.Tensor:
        batch = lengths.shape[1]
        parts: list[list[tuple[int, int, torch.Tensor]]] = [[] for _ in self.table_sizes]
        at = 0
        for b in layout.recv_blocks:
            n = b.shape[0] * b.shape[1]
            shard_cols = received[at:at + n].view(b.shape)
            at += n
            parts[b.table].append((b.source, b.shape[1], shard_cols))
        tables = []
        for t, got in enumerate(parts):
            kind = self.kinds[t]
            if kind == "row":
                tables.append(torch.stack([x for _, _, x in got]).sum(dim=0))
            elif kind == "column":
                # Column blocks arrive in source order, which is column order (planner: rank k holds block k).
                tables.append(torch.cat([x for _, _, x in got], dim=1))
            else:
                tables.append(got[0][2])
        out = torch.stack(tables, dim=1) if tables else torch.zeros(batch, 0, self.dim)
        if self.pooling == "mean":
            out = out / lengths.t().clamp(min=1).unsqueeze(2).to(out.dtype)
        return out

    def apply_gradients(self) -> int:
        """Updates the rows that received gradients since the last call; returns how many rows changed."""
        changed = 0
        for t, pending in zip(self.shards, self._pending, strict=True):
            if not pending:
                continue
            if len(pending) == 1:
                rows, grads = pending[0]
            else:
                all_rows = torch.cat([r for r, _ in pending])
                rows, inverse = torch.unique(all_rows, return_inverse=True)
                grads = torch.zeros(rows.numel(), t.shard.cols).index_add_(0, inverse,
                                                                           torch.cat([g for _, g in pending]))
            t.apply(rows, grads, optimizer=self.optimizer, lr=self.lr, eps=self.eps)
            changed += rows.numel()
            pending.clear()
        return changed

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops the gradients kept for apply_gradients (and the module's own, if any)."""
        for pending in self._pending:
            pending.clear()
        super().zero_grad(set_to_none=set_to_none)

    def table_weight(self, table: int) -> torch.Tensor:
        """The full table, gathered on every rank (for tests and small tables: it is a collective)."""
        rows, dim = self.table_sizes[table], self.dim
        full = np.zeros(rows * dim, np.float32)
        mine = np.zeros((rows, dim), np.float32)
        for t in self.shards:
            s = t.shard
            if s.table == table:
                mine[s.row_start:s.row_end, s.col_start:s.col_end] = t.weight.numpy()
        full[:] = mine.reshape(-1)
        self.transport.allreduce_sum(full)
        return torch.from_numpy(full.reshape(rows, dim))


def _as_tensors(features: Any, weights: Any) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor],
                                                      Optional[str]]:
    """(lengths, ids, weights, problem): a problem is reported to every rank, not raised here alone."""
    empty = torch.zeros(0, 0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), None
    if isinstance(features, SparseFeatures):
        lengths, ids = features.lengths, features.values
    elif isinstance(features, (tuple, list)) and len(features) == 2:
        lengths, ids = features
    else:
        return (*empty, f"features: got {type(features).__name__}; give a SparseFeatures or a (lengths, ids) pair")
    out = []
    for name, x, kind in (("lengths", lengths, "int"), ("ids", ids, "int"), ("per_sample_weights", weights, "float")):
        if x is None:
            out.append(None)
            continue
        try:
            t = x if torch.is_tensor(x) else torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError, RuntimeError) as exc:
            return (*empty, f"{name}: not a numeric array ({exc})")
        if kind == "int" and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
            return (*empty, f"{name}: dtype {t.dtype}; use an integer dtype")
        if kind == "float" and not t.is_floating_point():
            t = t.to(torch.float32)
        out.append(t.to(torch.int64 if kind == "int" else torch.float32).contiguous())
    return out[0], out[1], out[2], None
