"""An owner's embedding rows: initial values independent of the sharding,
pooled lookups and sparse updates equal to torch's EmbeddingBag with SGD and
to a row-wise Adagrad written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pymcoll.algorithms.dlrm.planner import plan_tables
from pymcoll.algorithms.dlrm.tables import initial_rows, local_tables


def full_table(seed: int, table: int, rows: int, dim: int) -> torch.Tensor:
    return torch.from_numpy(initial_rows(seed, table, rows, dim, 0, rows, 0, dim))


def batch(rows: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = np.random.default_rng(seed)
    lengths = torch.from_numpy(g.integers(0, 4, n))
    ids = torch.from_numpy(g.integers(0, rows, int(lengths.sum())))
    weights = torch.from_numpy(g.uniform(0.5, 2, int(lengths.sum())).astype(np.float32))
    return lengths, ids, weights


@pytest.mark.parametrize("kind,world", [("table", 3), ("row", 3), ("column", 2), ("row", 4)])
def test_shards_reassemble_the_table_and_its_pooling(kind: str, world: int) -> None:
    rows, dim, seed = 9000, 6, 5  # 9000 rows: three init blocks, split unevenly
    plan = plan_tables([rows], dim, world, kinds=kind)
    full = full_table(seed, 0, rows, dim)
    lengths, ids, weights = batch(rows, 50, 1)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    want = torch.nn.functional.embedding_bag(ids, full, offsets, mode="sum", per_sample_weights=weights)
    got = torch.zeros_like(want)
    for r in range(world):
        for t in local_tables(plan.shards_on(r), [rows], dim, seed):
            s = t.shard
            assert torch.equal(t.weight, full[s.row_start:s.row_end, s.col_start:s.col_end])
            got[:, s.col_start:s.col_end] += t.pool(lengths, ids, weights)
    torch.testing.assert_close(got, want)


def test_sgd_update_matches_embedding_bag_autograd() -> None:
    rows, dim, seed, lr = 300, 4, 2, 0.1
    plan = plan_tables([rows], dim, 2, kinds="row")
    full = full_table(seed, 0, rows, dim).requires_grad_()
    lengths, ids, weights = batch(rows, 40, 3)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    grad_out = torch.randn(40, dim)
    (torch.nn.functional.embedding_bag(ids, full, offsets, mode="sum", per_sample_weights=weights) * grad_out).sum() \
        .backward()
    want = full.detach() - lr * full.grad
    for r in range(2):
        for t in local_tables(plan.shards_on(r), [rows], dim, seed):
            idx, g = t.row_gradients(lengths, ids, grad_out, weights)
            t.apply(idx, g, optimizer="sgd", lr=lr)
            s = t.shard
            torch.testing.assert_close(t.weight, want[s.row_start:s.row_end])


def test_rowwise_adagrad_touches_only_the_rows_looked_up() -> None:
    rows, dim, seed, lr, eps = 50, 3, 4, 0.5, 1e-8
    (t,) = local_tables(plan_tables([rows], dim, 1).shards_on(0), [rows], dim, seed)
    before = t.weight.clone()
    lengths, ids = torch.tensor([2, 1]), torch.tensor([7, 7, 9])
    grad_out = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    for _ in range(2):
        idx, g = t.row_gradients(lengths, ids, grad_out)
        t.apply(idx, g, optimizer="rowwise_adagrad", lr=lr, eps=eps)
    g7, g9 = 2 * grad_out[0], grad_out[1]
    acc7, acc9 = g7.pow(2).mean(), g9.pow(2).mean()
    want7 = before[7] - lr * g7 / (acc7.sqrt() + eps) - lr * g7 / ((2 * acc7).sqrt() + eps)
    want9 = before[9] - lr * g9 / (acc9.sqrt() + eps) - lr * g9 / ((2 * acc9).sqrt() + eps)
    torch.testing.assert_close(t.weight[7], want7)
    torch.testing.assert_close(t.weight[9], want9)
    untouched = [r for r in range(rows) if r not in (7, 9)]
    assert torch.equal(t.weight[untouched], before[untouched])
    with pytest.raises(ValueError, match="optimizer='adam'"):
        t.apply(idx, g, optimizer="adam")
