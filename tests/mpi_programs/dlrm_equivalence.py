"""The sharded DLRM against a single-process torch DLRM (nn.EmbeddingBag +
the same MLPs) over training steps: same logits, losses and updated weights.

Usage: python -m mpi_programs.dlrm_equivalence CASE [CASE ...] [--codec] [--link-gbps G] [--steps N]
  CASE: KINDS:POOLING:OPTIMIZER[:FLAG,FLAG], run one after another in one launch;
  KINDS: table, row, column or mix (one of each, and auto, over the tables);
  FLAGS: weights (per-sample weights), ragged (batch sizes differ by rank, one rank has none).
  --codec: both directions through the identity codec (sizes, then bytes).
Prints "equivalent over N steps at R ranks (KINDS, POOLING, OPTIMIZER, ...)" per case.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.dlrm.block_codec import BlockCodec
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


def parse_case(text: str) -> tuple[str, str, str, bool, bool]:
    """KINDS:POOLING:OPTIMIZER[:FLAG,FLAG] -> (kinds, pooling, optimizer, weights, ragged)."""
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise SystemExit(f"case {text!r}: expected KINDS:POOLING:OPTIMIZER[:FLAG,FLAG]")
    flags = set(parts[3].split(",")) if len(parts) == 4 and parts[3] else set()
    unknown = flags - {"weights", "ragged"}
    if unknown:
        raise SystemExit(f"case {text!r}: unknown flags {sorted(unknown)} (weights, ragged)")
    return parts[0], parts[1], parts[2], "weights" in flags, "ragged" in flags


def body() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("cases", nargs="+")
    p.add_argument("--codec", action="store_true")
    p.add_argument("--link-gbps", type=float, default=None)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    for text in a.cases:
        run_case(*parse_case(text), codec=a.codec, link_gbps=a.link_gbps, steps=a.steps)


def run_case(kinds_name: str, pooling: str, optimizer: str, with_weights: bool, ragged: bool, *, codec: bool,
             link_gbps: float | None, steps: int) -> None:
    """Train the sharded and the single-process model side by side; assert they agree at every step."""
    world = MPI.COMM_WORLD
    verdict = world.Dup()
    rank, size = world.rank, world.size
    kinds = MIX if kinds_name == "mix" else kinds_name
    emb = ShardedEmbeddingBagCollection(TABLES, DIM, world, kinds=kinds, pooling=pooling, optimizer=optimizer,
                                        lr=LR_EMB, seed=SEED, codec=BlockCodec() if codec else None,
                                        link_gbps=link_gbps)
    model = DLRM(emb, bottom=(16,), top=(32, 16), seed=7)
    ref = DLRM(ReferenceBags(pooling), bottom=(16,), top=(32, 16), seed=7)
    sync = DenseGradientAllreduce(model.dense_parameters(), emb.transport)
    dense_opt = torch.optim.SGD(model.dense_parameters(), lr=LR_DENSE)
    ref_opt = torch.optim.SGD(ref.dense_parameters(), lr=LR_DENSE)
    emb_opt = torch.optim.SGD(ref.embeddings.parameters(), lr=LR_EMB)
    blocks = [[(s.col_start, s.col_end) for s in tp.shards] if tp.kind == "column" else [(0, DIM)]
              for tp in emb.plan.tables]
    states = [torch.zeros(len(b), rows) for b, rows in zip(blocks, TABLES, strict=True)]
    bce = torch.nn.BCEWithLogitsLoss(reduction="sum")
    sizes = batch_sizes(size, ragged)
    worst = 0.0
    for step in range(steps):
        dense, lengths, ids, labels, weights = global_batch(step, sizes, with_weights)
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
        if optimizer == "sgd":
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
    if codec:
        assert emb.exchange.timer.calls.get("pooled_sizes") == steps, emb.exchange.timer.calls
        assert emb.exchange.timer.calls.get("pooled_grad_sizes") == steps, emb.exchange.timer.calls
    assert agree(True, verdict)
    verdict.Free()
    if rank == 0:
        print(f"equivalent over {steps} steps at {size} ranks ({kinds_name}, {pooling}, {optimizer}, "
              f"weights={with_weights}, ragged={ragged}); max |logit diff| {worst:.2e}", flush=True)
        print(emb.plan.describe(), flush=True)


if __name__ == "__main__":
    main(body)
