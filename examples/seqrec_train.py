"""Train a sequence recommendation model with its global batches balanced over the ranks.

    mpiexec -n 2 python examples/seqrec_train.py [--split balanced|contiguous] [--steps N] ...

Every step draws a global batch of user histories (--global-batch samples, lengths from the
MovieLens-100K distribution or a synthetic one), splits it over the ranks, and trains: item
embeddings sharded over the ranks (the embedding exchange), a transformer layer with attention
pooling and an MLP data-parallel (gradients summed by one Allreduce). A rank's compute grows
like the sum of its samples' L^2, so a contiguous split leaves ranks waiting at every
synchronization; --split balanced partitions each batch by a per-sample cost model (fitted from
the first --warmup steps' measured compute and refitted every --refit-every steps from all
measured steps, or given) so that ranks finish together. With --speeds measured the split also
follows each rank's speed: every step the ranks agree on their compute times (an allgather the
timeline counts) and each rank's share moves towards equal finishing times, by the factor
(mean time / its time) ** --speed-gain; a rank on a CPU that runs slower for a while (another
tenant, the hypervisor) gets a lighter part. (A speed measured as modeled cost over time would
not do: a rank's fixed costs make a lighter part look slower, which makes it lighter still.)

It prints a progress bar, then per rank the seconds spent computing, waiting at the
synchronizations (the bubble) and communicating, the held-out AUC and steps per second;
--trace writes the timeline as a Chrome trace, --json the numbers.

--chunks K cuts each rank's samples into K chunks (shortest histories first; equal item counts,
small first and last chunks) whose exchanges run in order of need; --overlap runs them on a
progress thread that owns the communication while the main thread computes (pinned apart where
the host has the CPUs), so a step over a slow link (--link-gbps) takes about max(compute,
communication). With and without --overlap the same chunks train to identical weights
(--print-digest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.balance import CostModel, load_lengths, partition, sample_batch, synthetic_lengths
from pymcoll.algorithms.balance.overlap import OverlappedStep, PipelineTimes, ProgressThread, plan_cpus
from pymcoll.algorithms.balance.sequence_model import SequenceRecModel
from pymcoll.algorithms.balance.sequences import SequenceBatch, SyntheticSequences
from pymcoll.algorithms.balance.timeline import Timeline, analyze, write_chrome_trace
from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
from pymcoll.algorithms.dlrm.metrics import roc_auc
from pymcoll.algorithms.dlrm.model import DenseGradientAllreduce
from pymcoll.algorithms.dlrm.transport import PymcollTransport
from pymcoll.algorithms.progress import Progress

EVAL_BASE = 1 << 40  # held-out sample ids: no training step uses them
FIT_WINDOW = 400  # the cost model is fitted on at most this many recent (rank, step) measurements
# Next to the checkout, as the project keeps its shared data (PYMCOLL_SHARED_DATA points elsewhere).
CHECKOUT_LENGTHS = Path(__file__).resolve().parents[2] / "shared" / "data" / "sequences" / \
    "ml100k_user_history_lengths.txt"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="training steps after the warm-up")
    ap.add_argument("--warmup", type=int, default=5,
                    help="first steps (contiguous split, not counted) whose compute fits the cost model")
    ap.add_argument("--global-batch", type=int, default=256, help="samples per step, over all ranks")
    ap.add_argument("--split", default="balanced", choices=["balanced", "contiguous"])
    ap.add_argument("--equal-count", action="store_true", help="balanced parts of equal sample counts (+-1)")
    ap.add_argument("--cost", default="fit",
                    help="'fit' (from the warm-up, refitted as steps are measured) or 'a,b,c' for a*L + b*L^2 + c")
    ap.add_argument("--refit-every", type=int, default=10,
                    help="refit the cost model from every measured step so far, every N steps (0: never)")
    ap.add_argument("--speeds", default="off", choices=["off", "measured"],
                    help="balanced split: 'measured' loads each rank in proportion to its measured speed")
    ap.add_argument("--speed-gain", type=float, default=0.5,
                    help="how far one step moves a rank's share towards equal compute times (0 < g <= 1)")
    ap.add_argument("--lengths", default="ml100k", choices=["ml100k", "lognormal", "powerlaw"],
                    help="history lengths: MovieLens-100K users' or synthetic")
    ap.add_argument("--lengths-file", type=Path, default=None,
                    help="real lengths, one per line (default: the shared MovieLens-100K file)")
    ap.add_argument("--max-length", type=int, default=0, help="cut histories to this many items (0: no cut)")
    ap.add_argument("--items", type=int, default=50_000, help="rows of the item table")
    ap.add_argument("--dim", type=int, default=64, help="embedding dimension")
    ap.add_argument("--layers", type=int, default=2, help="transformer encoder layers")
    ap.add_argument("--heads", type=int, default=2, help="attention heads")
    ap.add_argument("--ff", type=int, default=128, help="the encoder's feed-forward width")
    ap.add_argument("--lr", type=float, default=0.003, help="Adam's learning rate for the dense part")
    ap.add_argument("--emb-lr", type=float, default=0.05, help="row-wise Adagrad's for the item table")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--link-gbps", type=float, default=None, help="emulated link of the embedding exchange")
    ap.add_argument("--chunks", type=int, default=1, help="exchange chunks per step, in order of need")
    ap.add_argument("--lookahead", type=int, default=2, help="chunks fetched ahead of compute")
    ap.add_argument("--overlap", action="store_true", help="a progress thread runs the chunked exchange")
    ap.add_argument("--no-pin", action="store_true", help="leave compute and progress threads unpinned")
    ap.add_argument("--print-digest", action="store_true", help="print a digest of every weight at the end")
    ap.add_argument("--eval-samples", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", type=Path, default=None, help="write the timeline as a Chrome trace here")
    ap.add_argument("--json", type=Path, default=None, help="write the results here (rank 0)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args()
    for name in ("steps", "global_batch", "items", "dim", "threads", "eval_samples", "chunks", "layers", "heads",
                 "ff"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.warmup < 0 or a.lookahead < 0 or a.refit_every < 0:
        ap.error("--warmup, --lookahead and --refit-every must be 0 or more")
    if not 0 < a.speed_gain <= 1:
        ap.error("--speed-gain must be in (0, 1]")
    if a.speeds == "measured" and a.split != "balanced":
        ap.error("--speeds measured needs --split balanced")
    if a.split == "balanced" and a.cost == "fit" and a.warmup < 3:
        ap.error("--cost fit needs --warmup 3 or more (three coefficients), or give --cost a,b,c")
    return a


def length_source(a: argparse.Namespace) -> np.ndarray:
    if a.lengths == "ml100k":
        path = a.lengths_file
        if path is None and not os.environ.get("PYMCOLL_SHARED_DATA") and CHECKOUT_LENGTHS.is_file():
            path = CHECKOUT_LENGTHS
        lengths = load_lengths(path)
    else:
        lengths = synthetic_lengths(100_000, a.lengths, seed=a.seed)
    return np.minimum(lengths, a.max_length) if a.max_length > 0 else lengths


def given_cost(text: str) -> CostModel:
    try:
        a, b, c = (float(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--cost {text!r}: 'fit' or three numbers a,b,c for a*L + b*L^2 + c") from None
    return CostModel(a, b, c)


def evaluate(model: SequenceRecModel, data: SyntheticSequences, source: np.ndarray, a: argparse.Namespace,
             comm: MPI.Comm) -> float:
    """Held-out AUC: the same samples at any number of ranks (each takes a contiguous part)."""
    lengths = sample_batch(source, a.eval_samples, seed=EVAL_BASE + a.seed)
    ids = EVAL_BASE + np.arange(a.eval_samples)
    mine = np.array_split(np.arange(a.eval_samples), comm.size)[comm.rank]
    batch = data.batch(ids[mine], lengths[mine])
    with torch.no_grad():
        p = torch.sigmoid(model(batch)).numpy()
    preds = np.concatenate(comm.allgather(p))
    labels = np.concatenate(comm.allgather(batch.labels))
    return float(roc_auc(labels, preds))


def chunk_shares(k: int) -> np.ndarray:
    """Item shares of k chunks: equal in the middle, ramping up (1/4, 1/2) at the start and down at
    the end, so that the first fetch, which compute waits for, and the last gradient exchange,
    which the step waits for, are short."""
    w = np.ones(k)
    if k >= 4:
        w[0] = w[-1] = 0.25
    if k >= 6:
        w[1] = w[-2] = 0.5
    return w / w.sum()


def chunked(batch: SequenceBatch, k: int) -> list[SequenceBatch]:
    """k chunks of the items given by chunk_shares, shortest histories first. Empty chunks where
    a rank has fewer samples than k."""
    order = np.argsort(batch.lengths, kind="stable")
    items = np.cumsum(batch.lengths[order])
    total = int(items[-1]) if items.size else 0
    cuts = np.searchsorted(items, total * np.cumsum(chunk_shares(k))[:-1], side="right")
    return [batch.take(ix) for ix in np.split(order, cuts)]


def digest(model: SequenceRecModel, emb: ShardedEmbeddingBagCollection, comm: MPI.Comm) -> str:
    """SHA-256 of the dense weights and the whole item table (gathered: a collective)."""
    h = hashlib.sha256()
    for p in model.dense_parameters():
        h.update(p.detach().numpy().tobytes())
    h.update(emb.table_weight(0).numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    a = parse()
    comm = MPI.COMM_WORLD
    rank, world = comm.rank, comm.size
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    compute_cpus, progress_cpus, separate = plan_cpus(node.rank, node.size, a.threads)
    node.Free()
    if not a.no_pin:
        os.sched_setaffinity(0, compute_cpus)  # before torch starts its intra-op threads: they inherit it
    torch.set_num_threads(a.threads)
    comm_thread = ProgressThread(None if a.no_pin else progress_cpus) if a.overlap else None
    source = length_source(a)
    data = SyntheticSequences(a.items, seed=a.seed)
    # A progress thread on its rank's compute CPU must not spin there while it waits for the others.
    transport = PymcollTransport(comm, wait="sleep" if a.overlap and (a.no_pin or not separate) else None)
    emb = ShardedEmbeddingBagCollection([a.items], a.dim, transport, optimizer="rowwise_adagrad",
                                        lr=a.emb_lr, seed=a.seed, link_gbps=a.link_gbps)
    model = SequenceRecModel(emb, layers=a.layers, heads=a.heads, ff=a.ff, seed=a.seed)
    dense = model.dense_parameters()
    allreduce = DenseGradientAllreduce(dense, emb.transport)
    opt = torch.optim.Adam(dense, lr=a.lr)
    stepper = OverlappedStep(model.embed, comm_thread, a.lookahead)
    pipeline = PipelineTimes()
    tl = Timeline(rank)
    emb.exchange.observer = tl.observe
    tl.align(comm)
    cost = None if a.cost == "fit" else given_cost(a.cost)
    refit = a.split == "balanced" and a.cost == "fit"
    fresh: list[tuple[np.ndarray, float]] = []    # this rank's (lengths, compute seconds) since the last fit
    history: list[tuple[np.ndarray, float]] = []  # every rank's, the same on all ranks

    def fit() -> Optional[CostModel]:
        nonlocal fresh, history
        history = (history + [o for part in comm.allgather(fresh) for o in part])[-FIT_WINDOW:]
        fresh = []
        try:
            return CostModel.fit([x for x, _ in history], [s for _, s in history])
        except ValueError:  # too uniform to tell the terms apart: keep the model we have
            return cost

    # Each rank's relative speed (mean 1), the same on every rank: measured from step `warmup` on.
    speeds = np.ones(world)
    track_speeds = a.speeds == "measured"
    total = a.warmup + a.steps
    bar = Progress(total, 0, rank == 0 and not a.quiet)
    ema, started = None, 0.0
    for step in range(total):
        if step == a.warmup:
            if refit:
                cost = fit()
            tl.clear()
            pipeline = PipelineTimes()
            comm.Barrier()
            started = time.perf_counter()
        lengths = sample_batch(source, a.global_batch, seed=a.seed * 1_000_003 + step)
        ids = step * a.global_batch + np.arange(a.global_batch)
        if a.split == "contiguous" or step < a.warmup:
            parts = np.array_split(np.arange(a.global_batch), world)
        else:
            assert cost is not None
            parts = partition(cost.costs(lengths), world, equal_count=a.equal_count,
                              speeds=speeds if track_speeds else None)
        mine = parts[rank]
        batch = data.batch(ids[mine], lengths[mine])
        syncs_before = len(tl.syncs)
        with tl.step():
            t0 = time.perf_counter()
            if a.chunks > 1 or a.overlap:
                parts_loss: list[float] = []

                def consume(k: int, chunk: SequenceBatch, rows: torch.Tensor, out: list = parts_loss) -> None:
                    part = torch.nn.functional.binary_cross_entropy_with_logits(
                        model.head(chunk, rows), torch.from_numpy(chunk.labels), reduction="sum") / a.global_batch
                    part.backward()
                    out.append(float(part.detach()))

                got = stepper.run(chunked(batch, a.chunks), consume)
                pipeline.compute += got.compute
                pipeline.stall += got.stall
                pipeline.comm += got.comm
                pipeline.comm_cpu += got.comm_cpu
                loss = torch.tensor(sum(parts_loss))
            else:
                logits = model(batch)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.from_numpy(batch.labels), reduction="sum") / a.global_batch
                loss.backward()
            with tl.sync("allreduce"):
                allreduce()
            opt.step()
            emb.apply_gradients()
            opt.zero_grad(set_to_none=True)
            emb.zero_grad()
            step_s = time.perf_counter() - t0
            # This rank's own work: the step less its main thread's collectives and stalls.
            in_syncs = sum(s.left - s.arrived for s in tl.syncs[syncs_before:] if s.thread == 0)
            stalled = got.stall if a.chunks > 1 or a.overlap else 0.0
            own_s = step_s - in_syncs - stalled
            used_speed = float(speeds[rank])
            if track_speeds and step >= a.warmup:
                with tl.sync("speeds"):
                    own = np.array(comm.allgather(own_s))
                if own.min() > 0:
                    speeds = speeds * (own.mean() / own) ** a.speed_gain
                    speeds /= speeds.mean()
        if refit:
            # Seconds of an average-speed rank: the cost model stays the same whatever CPU ran the part.
            fresh.append((lengths[mine], own_s * used_speed))
            if step >= a.warmup and a.refit_every and (step + 1 - a.warmup) % a.refit_every == 0:
                cost = fit()
        value = float(loss.detach()) * a.global_batch / max(len(mine), 1)
        ema = value if ema is None else 0.95 * ema + 0.05 * value
        bar.update(step + 1, ema)
    elapsed = time.perf_counter() - started
    if comm_thread is not None:
        comm_thread.close()
    times = analyze(comm.allgather(tl.to_dict()))
    pipes = comm.allgather(pipeline)
    weights = digest(model, emb, comm) if a.print_digest else ""
    auc = evaluate(model, data, source, a, comm)
    if a.trace is not None:
        docs = comm.allgather(tl.to_dict())
        if rank == 0:
            write_chrome_trace(docs, a.trace)
    if rank == 0:
        bubble = sum(t.wait for t in times)
        print(f"# {a.split} split of {a.global_batch} samples over {world} ranks, {a.steps} steps "
              f"({a.lengths} lengths, cost {'fit' if a.cost == 'fit' else a.cost})")
        if cost is not None:
            print(f"# cost model: {cost}")
        if track_speeds:
            print("# rank speeds at the end (mean 1): " + " ".join(f"{v:.3f}" for v in speeds))
        syncs = list(times[0].waits_by_sync) if times else []
        print(f"# {'rank':>4} {'compute s':>10} {'wait s':>10} {'comm s':>10}   wait per sync: "
              + " ".join(f"{n:>11}" for n in syncs))
        for r, t in enumerate(times):
            print(f"  {r:>4} {t.compute:>10.3f} {t.wait:>10.3f} {t.comm:>10.3f}                  "
                  + " ".join(f"{t.waits_by_sync[n]:>11.3f}" for n in syncs))
        if a.chunks > 1 or a.overlap:
            print(f"# pipeline: {a.chunks} chunks, lookahead {a.lookahead}, "
                  f"{'progress thread' if a.overlap else 'inline'}"
                  + (f", pinned {'apart' if separate else 'together (too few CPUs)'}" if a.overlap and not a.no_pin
                     else ""))
            print(f"# {'rank':>4} {'compute s':>10} {'stall s':>10} {'exchange s':>11} {'of it CPU s':>12}")
            for r, p in enumerate(pipes):
                print(f"  {r:>4} {p.compute:>10.3f} {p.stall:>10.3f} {p.comm:>11.3f} {p.comm_cpu:>12.3f}")
        print(f"step {elapsed / a.steps * 1e3:.1f} ms")
        print(f"bubble {bubble:.3f} s ({bubble / a.steps * 1e3:.1f} ms per step), "
              f"{a.steps / elapsed:.2f} steps/s, held-out AUC {auc:.4f}")
        if a.json is not None:
            a.json.write_text(json.dumps({
                "split": a.split, "ranks": world, "global_batch": a.global_batch, "steps": a.steps,
                "lengths": a.lengths, "cost": str(cost) if cost is not None else None, "threads": a.threads,
                "bubble_s": bubble, "steps_per_s": a.steps / elapsed, "step_ms": elapsed / a.steps * 1e3,
                "auc": auc, "chunks": a.chunks, "overlap": a.overlap, "link_gbps": a.link_gbps,
                "pinned_apart": separate and not a.no_pin, "speeds": a.speeds,
                "final_speeds": speeds.tolist() if track_speeds else None,
                "per_rank": [t.to_dict() for t in times],
                "pipeline": [{"compute_s": p.compute, "stall_s": p.stall, "exchange_s": p.comm,
                              "exchange_cpu_s": p.comm_cpu} for p in pipes]},
                indent=1))
        if a.print_digest:
            print(f"digest {weights}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
