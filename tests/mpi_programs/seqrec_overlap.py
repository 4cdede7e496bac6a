"""The sequence model's chunked exchange on a progress thread against the same chunks inline:
bit-identical weights after a few training steps, the exchanges in the scheduled order on every
rank, and both within float tolerance of the unchunked step. Ranks hold different numbers of
samples (one may hold fewer than the chunks).

Usage: python -m mpi_programs.seqrec_overlap CHUNKS LOOKAHEAD
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.balance.overlap import OverlappedStep, ProgressThread, schedule
from pymcoll.algorithms.balance.sequence_model import SequenceRecModel
from pymcoll.algorithms.balance.sequences import SequenceBatch, SyntheticSequences
from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
from pymcoll.algorithms.dlrm.model import DenseGradientAllreduce

from .common import agree, main

ITEMS, DIM, STEPS, GLOBAL = 3000, 8, 4, 24


def make(world: MPI.Comm) -> tuple[SequenceRecModel, torch.optim.Optimizer, DenseGradientAllreduce]:
    emb = ShardedEmbeddingBagCollection([ITEMS], DIM, world, optimizer="rowwise_adagrad", lr=0.05, seed=3)
    model = SequenceRecModel(emb, heads=2, ff=16, top=(16,), bucket_tokens=60, seed=3)
    dense = model.dense_parameters()
    return model, torch.optim.SGD(dense, lr=0.1), DenseGradientAllreduce(dense, emb.transport)


def my_batch(data: SyntheticSequences, step: int, rank: int, size: int) -> SequenceBatch:
    g = np.random.default_rng([11, step])
    lengths = g.integers(1, 40, GLOBAL)
    counts = [GLOBAL // size + (1 if r < GLOBAL % size else 0) for r in range(size)]
    if size > 1:  # uneven: the last rank gives 3 samples to the first
        shift = min(3, counts[-1] - 1)
        counts[-1] -= shift
        counts[0] += shift
    start = sum(counts[:rank])
    ids = step * GLOBAL + np.arange(start, start + counts[rank])
    return data.batch(ids, lengths[start:start + counts[rank]])


def split(batch: SequenceBatch, k: int) -> list[SequenceBatch]:
    return [batch.take(ix) for ix in np.array_split(np.argsort(batch.lengths, kind="stable"), k)]


def train(mode: str, chunks: int, lookahead: int, world: MPI.Comm,
          steps: int = STEPS) -> tuple[list[np.ndarray], list]:
    model, opt, allreduce = make(world)
    data = SyntheticSequences(ITEMS, seed=2)
    orders = []
    thread = ProgressThread() if mode == "overlap" else None
    try:
        stepper = OverlappedStep(model.embed, thread, lookahead)
        for step in range(steps):
            batch = my_batch(data, step, world.rank, world.size)
            if mode == "whole":
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    model(batch), torch.from_numpy(batch.labels), reduction="sum") / GLOBAL
                loss.backward()
            else:
                def consume(k: int, chunk: SequenceBatch, rows: torch.Tensor) -> None:
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(
                        model.head(chunk, rows), torch.from_numpy(chunk.labels), reduction="sum") / GLOBAL
                    loss.backward()

                orders.append(stepper.run(split(batch, chunks), consume).order)
            allreduce()
            opt.step()
            model.embeddings.apply_gradients()
            opt.zero_grad(set_to_none=True)
            model.embeddings.zero_grad()
    finally:
        if thread is not None:
            thread.close()
    weights = [p.detach().numpy().copy() for p in model.dense_parameters()]
    weights.append(model.embeddings.table_weight(0).numpy().copy())
    return weights, orders


def body() -> None:
    chunks, lookahead = int(sys.argv[1]), int(sys.argv[2])
    world = MPI.COMM_WORLD
    verdict = world.Dup()
    torch.set_num_threads(1)
    inline, orders_inline = train("inline", chunks, lookahead, world)
    overlap, orders_overlap = train("overlap", chunks, lookahead, world)
    whole, _ = train("whole", chunks, lookahead, world)
    untrained, _ = train("whole", chunks, lookahead, world, steps=0)
    ok_trained = all(a.tobytes() != b.tobytes() for a, b in zip(inline, untrained, strict=True))
    expected = tuple(schedule(chunks, lookahead))
    ok_order = all(o == expected for o in orders_inline + orders_overlap)
    ok_same = all(a.tobytes() == b.tobytes() for a, b in zip(inline, overlap, strict=True))
    ok_close = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(inline, whole, strict=True))
    ok = ok_order and ok_same and ok_close and ok_trained
    if not ok:
        print(f"rank {world.rank}: order {ok_order} identical {ok_same} close to unchunked {ok_close} "
              f"every weight trained {ok_trained}", flush=True)
    if agree(ok, verdict) and world.rank == 0:
        print(f"overlap identical to inline over {STEPS} steps at {world.size} ranks "
              f"({chunks} chunks, lookahead {lookahead})", flush=True)


if __name__ == "__main__":
    main(body)
