"""The sharded DLRM against a single-process torch DLRM (nn.EmbeddingBag +
the same MLPs) over training steps: same logits, losses and updated weights.

Usage: python -m mpi_programs.dlrm_equivalence KINDS POOLING OPTIMIZER [--weights] [--ragged] [--codec]
       [--link-gbps G] [--steps N]
  KINDS: table, row, column or mix (one of each, and auto, over the tables).
  --codec: both directions through the identity codec (sizes, then bytes).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.dlrm.codec import Codec
from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
from pymcoll.algorithms.dlrm.model import DLRM, DenseGradientAllreduce
from pymcoll.algorithms.dlrm.tables import initial_rows

from .common import agree, main

TABLES = [50, 300, 7, 1000, 20]
DIM, SEED, LR_DENSE, LR_EMB = 8, 3, 0.05, 0.2
MIX = ["table", "row", "column", "auto", "row"]


class ReferenceBags(torch.nn.Module):
    """The unsharded model's embeddings: one nn.EmbeddingBag per table."""

    def __init__(self, pooling: str) -> None:
        super().__init__()
        self.dim, self.num_features = DIM, len(TABLES)
        self.bags = torch.nn.ModuleList()
        for t, rows in enumerate(TABLES):
            bag = torch.nn.EmbeddingBag(rows, DIM, mode="sum")
            with torch.no_grad():
                bag.weight.copy_(torch.from_numpy(initial_rows(SEED, t, rows, DIM, 0, rows, 0, DIM)))
            self.bags.append(bag)
        self.pooling = pooling

    def forward(self, sparse: tuple, weights: torch.Tensor | None = None) -> torch.Tensor:
        lengths, ids = sparse
        per = lengths.sum(dim=1).tolist()
        out = []
        id_parts = torch.split(ids, per)
        w_parts = torch.split(weights, per) if weights is not None else [None] * len(per)
        for f, bag in enumerate(self.bags):
            offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths[f].cumsum(0)[:-1]])
            pooled = bag(id_parts[f], offsets, per_sample_weights=w_parts[f])
            if self.pooling == "mean":
                pooled = pooled / lengths[f].clamp(min=1).unsqueeze(1)
            out.append(pooled)
        return torch.stack(out, dim=1)


def batch_sizes(size: int, ragged: bool) -> list[int]:
    return [[6, 0, 9, 4][r % 4] + r // 4 for r in range(size)] if ragged else [8] * size


def global_batch(step: int, sizes: list[int], with_weights: bool) -> tuple:
    g = np.random.default_rng([11, step])
    n = sum(sizes)
    dense = torch.from_numpy(g.standard_normal((n, 13)).astype(np.float32))
    lengths = torch.from_numpy(g.integers(0, 4, (len(TABLES), n)))
    ids = torch.cat([torch.from_numpy(np.minimum(g.zipf(1.3, int(lengths[f].sum())) - 1, TABLES[f] - 1))
                     for f in range(len(TABLES))])
    labels = torch.from_numpy(g.integers(0, 2, n).astype(np.float32))
    weights = torch.from_numpy(g.uniform(0.5, 1.5, ids.numel()).astype(np.float32)) if with_weights else None
    return dense, lengths, ids, labels, weights


def local_slice(rank: int, sizes: list[int], dense, lengths, ids, labels, weights) -> tuple:
    """Rank `rank`'s samples of the global batch."""
    b0, b1 = sum(sizes[:rank]), sum(sizes[:rank + 1])
    per_sample_start = torch.cat([torch.zeros(len(TABLES), 1, dtype=torch.int64), lengths.cumsum(1)], dim=1)
    feature_start = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.sum(1).cumsum(0)])
    keep = torch.cat([torch.arange(feature_start[f] + per_sample_start[f, b0],
                                   feature_start[f] + per_sample_start[f, b1]) for f in range(len(TABLES))])
    return (dense[b0:b1], lengths[:, b0:b1].contiguous(), ids[keep], labels[b0:b1],
            weights[keep] if weights is not None else None)


def rowwise_adagrad(weight: torch.Tensor, grad: torch.Tensor, state: torch.Tensor, col_blocks: list) -> None:
    """The reference's row-wise Adagrad: one accumulator per row and column block
    (a column-wise shard keeps its own, as the sharded tables do)."""
    with torch.no_grad():
        for k, (c0, c1) in enumerate(col_blocks):
            g = grad[:, c0:c1]
            touched = (g != 0).any(dim=1)
            state[k] += torch.where(touched, g.pow(2).mean(dim=1), torch.zeros(()))
            scale = LR_EMB / (state[k].sqrt() + 1e-8)
            weight[:, c0:c1] -= torch.where(touched.unsqueeze(1), g * scale.unsqueeze(1), torch.zeros(()))


def body() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kinds")
    p.add_argument("pooling")
    p.add_argument("optimizer")
    p.add_argument("--weights", action="store_true")
    p.add_argument("--ragged", action="store_true")
    p.add_argument("--codec", action="store_true")
    p.add_argument("--link-gbps", type=float, default=None)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    world = MPI.COMM_WORLD
    verdict = world.Dup()
    rank, size = world.rank, world.size
    kinds = MIX if a.kinds == "mix" else a.kinds
    emb = ShardedEmbeddingBagCollection(TABLES, DIM, world, kinds=kinds, pooling=a.pooling, optimizer=a.optimizer,
                                        lr=LR_EMB, seed=SEED, codec=Codec() if a.codec else None,
                                        link_gbps=a.link_gbps)
    model = DLRM(emb, bottom=(16,), top=(32, 16), seed=7)
    ref = DLRM(ReferenceBags(a.pooling), bottom=(16,), top=(32, 16), seed=7)
    sync = DenseGradientAllreduce(model.dense_parameters(), emb.transport)
    dense_opt = torch.optim.SGD(model.dense_parameters(), lr=LR_DENSE)
    ref_opt = torch.optim.SGD(ref.dense_parameters(), lr=LR_DENSE)
    emb_opt = torch.optim.SGD(ref.embeddings.parameters(), lr=LR_EMB)
    blocks = [[(s.col_start, s.col_end) for s in tp.shards] if tp.kind == "column" else [(0, DIM)]
              for tp in emb.plan.tables]
    states = [torch.zeros(len(b), rows) for b, rows in zip(blocks, TABLES, strict=True)]
    bce = torch.nn.BCEWithLogitsLoss(reduction="sum")
    sizes = batch_sizes(size, a.ragged)
    worst = 0.0
    for step in range(a.steps):
        dense, lengths, ids, labels, weights = global_batch(step, sizes, a.weights)
        ld, ll, li, lab, lw = local_slice(rank, sizes, dense, lengths, ids, labels, weights)
        logits = model(ld, (ll, li), lw)
        assert emb.last_batch_sizes == sizes, (emb.last_batch_sizes, sizes)
        n = sum(sizes)
        loss = bce(logits, lab) / n
        loss.backward()
        sync()
        dense_opt.step()
        dense_opt.zero_grad()
        emb.apply_gradients()
        total = np.array([loss.item()])
        world.Allreduce(MPI.IN_PLACE, total)

        ref_logits = ref(dense, (lengths, ids), weights)
        ref_loss = bce(ref_logits, labels) / n
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        if a.optimizer == "sgd":
            emb_opt.step()
        else:
            for bag, b, st in zip(ref.embeddings.bags, blocks, states, strict=True):
                rowwise_adagrad(bag.weight, bag.weight.grad, st, b)
        emb_opt.zero_grad()
        b0 = sum(sizes[:rank])
        torch.testing.assert_close(logits, ref_logits[b0:b0 + sizes[rank]], rtol=2e-4, atol=2e-5)
        assert abs(total[0] - ref_loss.item()) <= 2e-4 * max(1.0, abs(ref_loss.item())), (total[0], ref_loss.item())
        if sizes[rank]:
            worst = max(worst, float((logits.detach() - ref_logits.detach()[b0:b0 + sizes[rank]]).abs().max()))
    for p, q in zip(model.dense_parameters(), ref.dense_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=2e-4, atol=2e-5)
    for t in range(len(TABLES)):
        full = emb.table_weight(t)
        torch.testing.assert_close(full, ref.embeddings.bags[t].weight.detach(), rtol=2e-4, atol=2e-5)
        assert not torch.equal(full, torch.from_numpy(initial_rows(SEED, t, TABLES[t], DIM, 0, TABLES[t], 0, DIM))), \
            f"table {t} never changed"
    if a.codec:
        assert emb.exchange.timer.calls.get("pooled_sizes") == a.steps, emb.exchange.timer.calls
        assert emb.exchange.timer.calls.get("pooled_grad_sizes") == a.steps, emb.exchange.timer.calls
    assert agree(True, verdict)
    if rank == 0:
        print(f"equivalent over {a.steps} steps at {size} ranks ({a.kinds}, {a.pooling}, {a.optimizer}, "
              f"weights={a.weights}, ragged={a.ragged}); max |logit diff| {worst:.2e}", flush=True)
        print(emb.plan.describe(), flush=True)


if __name__ == "__main__":
    main(body)
