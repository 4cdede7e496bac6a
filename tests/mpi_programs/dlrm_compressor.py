"""The DLRM exchange with the exchange compressor (the error-bounded codec)
against the same exchange without it: every pooled embedding within the
bound of its block (the bound relative to the block's value range), the
gradients' exchange unchanged; and with a fast emulated link, blocks bypass
the compressor.

Usage: python -m mpi_programs.dlrm_compressor
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.compression import AdaptiveBound, IterationSchedule, TableBounds
from pymcoll.algorithms.compression.exchange_compressor import ExchangeCompressor
from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection

from .common import agree, main

TABLES = [50, 3000, 7, 200_000, 20]
DIM = 8


def body() -> None:
    world = MPI.COMM_WORLD
    verdict = world.Dup()
    rank, size = world.rank, world.size
    bound = AdaptiveBound(TableBounds(), IterationSchedule(phase=4, kind="linear"))
    codec = ExchangeCompressor(bound, bypass=False)
    kinds = ["table", "row", "column", "row", "table"]
    lossy = ShardedEmbeddingBagCollection(TABLES, DIM, world, kinds=kinds, seed=5, codec=codec)
    exact = ShardedEmbeddingBagCollection(TABLES, DIM, world, kinds=kinds, seed=5)
    g = np.random.default_rng([7, rank])
    for step in range(6):
        batch = 64 + 8 * rank
        lengths = torch.from_numpy(g.integers(0, 3, (len(TABLES), batch)))
        ids = torch.cat([torch.from_numpy(np.minimum(g.zipf(1.2, int(lengths[f].sum())) - 1, TABLES[f] - 1))
                         for f in range(len(TABLES))])
        a = lossy((lengths, ids))
        b = exact((lengths, ids))
        # Per table: within the sum of the bounds of the blocks this rank received for it (row-wise
        # shards' partial sums add up), and each block's bound is the adaptive relative bound of its range.
        for tp in lossy.plan.tables:
            limit = codec.received_bounds.get((step, tp.table), 0.0)
            err = float((a[:, tp.table].double() - b[:, tp.table].double()).abs().max()) if batch else 0.0
            assert err <= limit, (step, tp.table, err, limit)
            full = b[:, tp.table]
            if tp.kind == "table" and tp.shards[0].rank == rank:
                assert err == 0.0, (step, tp.table, err)  # a rank's own blocks skip the codec
            elif tp.kind == "table" and full.numel():
                want = bound(TABLES[tp.table], step) * float(full.max() - full.min())
                assert abs(limit - want) <= 1e-6 * want, (limit, want)
        a.sum().backward()
        b.sum().backward()
    # Gradients travel uncompressed: both owners hold the same row gradients.
    for p, q in zip(lossy._pending, exact._pending, strict=True):
        for (r1, g1), (r2, g2) in zip(p, q, strict=True):
            assert torch.equal(r1, r2) and torch.equal(g1, g2)
    assert codec.stats.blocks > 0 and codec.stats.bypassed == 0
    assert "pooled_sizes" in lossy.exchange.timer.calls and "pooled_grad_sizes" not in lossy.exchange.timer.calls
    # A link far faster than the codec: after the first measuring block per table, blocks go raw.
    fast = ExchangeCompressor(bound, link_gbps=None, probe_every=100)
    quick = ShardedEmbeddingBagCollection(TABLES, DIM, world, kinds=kinds, seed=5, codec=fast, link_gbps=10_000)
    for _ in range(2):
        out = quick((lengths, ids))
    assert torch.equal(out, exact((lengths, ids)))
    # Only the first exchange (measuring each table's ratio) went through the codec; then plain floats
    # (until the next measurement, 2 exchanges after the first).
    calls = quick.exchange.timer.calls
    assert fast.link_gbps == 10_000 and calls.get("pooled_sizes") == 1 and calls["pooled"] == 2, calls
    assert agree(True, verdict)
    if rank == 0:
        print(f"within the bound at {size} ranks: ratio {codec.stats.ratio:.1f}; on a fast link the codec "
              f"measured once, then was bypassed", flush=True)


if __name__ == "__main__":
    main(body)
