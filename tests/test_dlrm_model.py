"""The DLRM model's pieces on one process: the dot interaction against the
products written out, the MLPs' seeded initialization, and the identity codec
and the row-wise split of the exchange's routing."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pymcoll.algorithms.dlrm.block_codec import FORWARD, BlockCodec, BlockInfo  # noqa: E402
from pymcoll.algorithms.dlrm.exchange import _split_for_shards, check_local_input  # noqa: E402
from pymcoll.algorithms.dlrm.model import DLRM, dot_interaction, mlp  # noqa: E402
from pymcoll.algorithms.dlrm.planner import plan_tables  # noqa: E402


def test_dot_interaction_is_every_pair_once() -> None:
    g = torch.Generator().manual_seed(0)
    bottom, emb = torch.randn(3, 4, generator=g), torch.randn(3, 5, 4, generator=g)
    out = dot_interaction(bottom, emb)
    z = [bottom] + [emb[:, f] for f in range(5)]
    pairs = [(z[i] * z[j]).sum(dim=1) for i in range(6) for j in range(i)]
    torch.testing.assert_close(out, torch.cat([bottom, torch.stack(pairs, dim=1)], dim=1))


def test_mlps_start_the_same_from_the_same_seed() -> None:
    a = mlp([13, 8, 4], torch.Generator().manual_seed(5))
    b = mlp([13, 8, 4], torch.Generator().manual_seed(5))
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


class Bags(torch.nn.Module):
    dim, num_features = 4, 3

    def forward(self, sparse):
        return torch.ones(sparse[0].shape[1], 3, 4)


def test_dlrm_shapes() -> None:
    model = DLRM(Bags(), bottom=(8,), top=(16,), seed=1)
    logits = model(torch.randn(6, 13), (torch.ones(3, 6, dtype=torch.int64), torch.zeros(18, dtype=torch.int64)))
    assert logits.shape == (6,)
    assert len(model.dense_parameters()) == 8


def test_identity_codec_round_trip() -> None:
    block = torch.randn(5, 3)
    info = BlockInfo(FORWARD, 0, 10, 0, 1, (5, 3), 0)
    data = BlockCodec().encode(block, info)
    assert data.dtype == np.uint8 and data.size == 60
    assert torch.equal(BlockCodec().decode(data, info), block)
    with pytest.raises(ValueError, match="expected 60"):
        BlockCodec().decode(data[:-4], info)


def test_row_wise_routing_sends_each_id_to_the_shard_holding_it() -> None:
    plan = plan_tables([10], 2, 3, kinds="row")  # rows 0-3, 4-6, 7-9
    shards = plan.tables[0].shards
    lengths = torch.tensor([3, 0, 2])
    ids = torch.tensor([9, 0, 5, 4, 7])
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    parts = _split_for_shards(shards, "row", lengths, ids, w)
    assert [p[0].tolist() for p in parts] == [[1, 0, 0], [1, 0, 1], [1, 0, 1]]
    assert [p[1].tolist() for p in parts] == [[0], [5, 4], [9, 7]]
    assert [p[2].tolist() for p in parts] == [[2.0], [3.0, 4.0], [1.0, 5.0]]


def test_local_checks_name_the_problem() -> None:
    lengths = torch.tensor([[1, 2], [0, 1]])
    ids = torch.tensor([0, 1, 2, 3])
    assert check_local_input(lengths, ids, None, [5, 5]) is None
    assert "id 5 lies outside" in check_local_input(lengths, torch.tensor([0, 1, 2, 5]), None, [5, 5])
    assert "lengths sum to 4 but 3" in check_local_input(lengths, ids[:3], None, [5, 5])
    assert "negative" in check_local_input(torch.tensor([[-1, 5], [0, 0]]), ids, None, [5, 5])
