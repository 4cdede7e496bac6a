"""Bad input to the embedding exchange on one rank stops every rank with an
error (the bad rank's names the problem), promptly, and the collection keeps
working afterwards.

Usage: python -m mpi_programs.dlrm_bad_input
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
from pymcoll.algorithms.dlrm.exchange import ExchangeInputError

from .common import agree, main

TABLES = [40, 200, 9]
DIM = 4


def good_input(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = np.random.default_rng(rank)
    lengths = torch.from_numpy(g.integers(0, 3, (len(TABLES), 5)))
    ids = torch.cat([torch.from_numpy(g.integers(0, TABLES[f], int(lengths[f].sum()))) for f in range(len(TABLES))])
    return lengths, ids


def still_works(emb: ShardedEmbeddingBagCollection, rank: int) -> None:
    out = emb(good_input(rank))
    out.sum().backward()
    emb.apply_gradients()
    assert out.shape == (5, len(TABLES), DIM)


def expect_everywhere(emb: ShardedEmbeddingBagCollection, rank: int, bad_rank: int, words: str,
                      call: Callable[[], Any]) -> None:
    t0 = time.monotonic()
    try:
        call()
    except ExchangeInputError as e:
        msg = str(e)
        want = words if rank == bad_rank else f"rank(s) {bad_rank} "
        assert want.lower() in msg.lower(), f"rank {rank}: message {msg!r} does not mention {want!r}"
        if rank == bad_rank:
            print(f"rank {rank}: {msg}", flush=True)
    else:
        raise AssertionError(f"rank {rank}: expected ExchangeInputError ({words})")
    assert time.monotonic() - t0 < 10, "the error took the time of a timeout"
    still_works(emb, rank)


def body() -> None:
    world = MPI.COMM_WORLD
    verdict = world.Dup()
    rank, size = world.rank, world.size
    bad = size - 1
    emb = ShardedEmbeddingBagCollection(TABLES, DIM, world, kinds=["row", "table", "column"])
    lengths, ids = good_input(rank)

    def with_bad(make: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: emb(make() if rank == bad else (lengths, ids))

    out_of_table = ids.clone()
    out_of_table[-1] = TABLES[-1]  # the last feature's table has TABLES[-1] rows: one past its end
    expect_everywhere(emb, rank, bad, f"feature 2: id {TABLES[-1]} lies outside its table of {TABLES[-1]} rows",
                      with_bad(lambda: (lengths, out_of_table)))
    negative = ids.clone()
    negative[0] = -3
    expect_everywhere(emb, rank, bad, "id -3 lies outside", with_bad(lambda: (lengths, negative)))
    expect_everywhere(emb, rank, bad, f"lengths sum to {int(lengths.sum())} but {ids.numel() - 1} ids were given",
                      with_bad(lambda: (lengths, ids[:-1])))
    expect_everywhere(emb, rank, bad, f"2 features given; the collection has {len(TABLES)} tables",
                      with_bad(lambda: (lengths[:2], ids[:int(lengths[:2].sum())])))
    expect_everywhere(emb, rank, bad, "ids: dtype torch.float64; use an integer dtype",
                      with_bad(lambda: (lengths, ids.to(torch.float64))))
    expect_everywhere(emb, rank, bad, "expected (num_features, batch)", with_bad(lambda: (lengths[0], ids)))
    short_w = torch.ones(ids.numel() - 1)
    expect_everywhere(emb, rank, bad, "per_sample_weights has shape",
                      lambda: emb((lengths, ids), short_w if rank == bad else None))
    if size > 1:
        # Weights on some ranks only: every rank names the ranks that gave them.
        try:
            emb((lengths, ids), torch.ones(ids.numel()) if rank == bad else None)
            raise AssertionError("weights on one rank only were accepted")
        except ExchangeInputError as e:
            assert f"given on rank(s) {bad} only" in str(e), str(e)
        still_works(emb, rank)
        # A rank that built another collection (a different dimension).
        other = ShardedEmbeddingBagCollection(TABLES, DIM + (1 if rank == bad else 0), world)
        try:
            other((lengths, ids))
            raise AssertionError("collections that differ across ranks were accepted")
        except ExchangeInputError as e:
            assert "different embedding collection" in str(e), str(e)
        still_works(emb, rank)
    assert agree(True, verdict)
    if rank == 0:
        print(f"bad input rejected on every rank at {size} ranks", flush=True)


if __name__ == "__main__":
    main(body)
