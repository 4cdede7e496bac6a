"""Train DLRM on synthetic Criteo-schema data, embedding tables sharded over the ranks.

    mpiexec -n 2 python examples/dlrm_train.py [--steps N] [--cap ROWS] ...

Every step takes a global batch (--batch-size samples, split over the ranks),
sends each sample's ids to the ranks owning their tables, gets the pooled
embeddings back, and trains: the MLPs data-parallel (gradients summed by one
Allreduce), the tables model-parallel (sparse row-wise Adagrad on the rows
looked up). The data follow the Criteo Kaggle schema (13 dense, 26 sparse
features; table sizes from its cardinalities, capped by --cap) with
power-law ids and labels drawn from a hidden model of the features.

It prints a progress bar, then the held-out loss and AUC, steps per second
and the time spent in each exchange per step. --checkpoint-dir saves the
sharded model (every --checkpoint-every steps and at the end); --resume
continues from the newest checkpoint there, at any number of ranks.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from pymcoll.algorithms.dlrm import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo, cap_table_sizes
from pymcoll.algorithms.dlrm.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
from pymcoll.algorithms.dlrm.metrics import log_loss, roc_auc
from pymcoll.algorithms.dlrm.model import DLRM, DenseGradientAllreduce
from pymcoll.algorithms.dlrm.transport import TorchDistributedTransport, PymcollTransport
from pymcoll.algorithms.progress import Progress

EVAL_BASE = 1 << 40  # held-out batches: indices no training step uses


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000, help="training steps (global batches)")
    ap.add_argument("--batch-size", type=int, default=2048, help="global batch, split over the ranks")
    ap.add_argument("--cap", type=int, default=100_000, help="rows per table at most (Criteo's largest has 10M)")
    ap.add_argument("--dim", type=int, default=16, help="embedding dimension")
    ap.add_argument("--ids-per-feature", type=int, default=1, help="ids per sample and feature (1: Criteo)")
    ap.add_argument("--sharding", default="auto", choices=["auto", "table", "row", "column"])
    ap.add_argument("--pooling", default="sum", choices=["sum", "mean"])
    ap.add_argument("--emb-optimizer", default="rowwise_adagrad", choices=["rowwise_adagrad", "sgd"])
    ap.add_argument("--emb-lr", type=float, default=0.05)
    ap.add_argument("--dense-lr", type=float, default=0.002, help="Adam's learning rate for the MLPs")
    ap.add_argument("--eval-samples", type=int, default=65536, help="held-out samples for loss and AUC")
    ap.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps (0: at the end only)")
    ap.add_argument("--transport", default="pymcoll", choices=["pymcoll", "gloo", "torch-pymcoll"],
                    help="the exchange on a pymcoll.Comm, or on torch.distributed with gloo or the pymcoll backend")
    ap.add_argument("--link-gbps", type=float, default=None, help="emulate a link of this bandwidth per rank")
    ap.add_argument("--compress", action="store_true",
                    help="compress the pooled embeddings with the error-bounded codec (adaptive bound)")
    ap.add_argument("--compress-phase", type=int, default=1000,
                    help="iterations over which the bound's multiplier decays from 2x to 1x")
    ap.add_argument("--compress-backward", action="store_true", help="compress the gradients too")
    ap.add_argument("--no-bypass", action="store_true", help="compress even where the link is fast enough not to")
    ap.add_argument("--checkpoint-dir", type=Path, default=None)
    ap.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: at the end)")
    ap.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --checkpoint-dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--print-losses", action="store_true", help="print every step's global loss")
    ap.add_argument("--print-digest", action="store_true", help="print a digest of all weights at the end")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here (rank 0)")
    ap.add_argument("--record-trace", type=Path, default=None,
                    help="write the ids the largest table is looked up with, step by step, as a tiered-cache "
                         "trace (.npz, rank 0; load with pymcoll.algorithms.tiered_cache.Trace.load)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args()
    for name in ("steps", "batch_size", "dim", "eval_samples"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.resume and a.checkpoint_dir is None:
        ap.error("--resume needs --checkpoint-dir")
    return a


def evaluate(model: DLRM, data: SyntheticCriteo, samples: int, rank: int, size: int, comm: MPI.Comm) -> tuple:
    """Held-out (loss, AUC) over `samples` samples, every rank scoring its share."""
    scores, labels = [], []
    per_batch = 8192
    with torch.no_grad():
        for k in range((samples + per_batch - 1) // per_batch):
            n = min(per_batch, samples - k * per_batch)
            b = data.batch(EVAL_BASE + k, n)
            lo, hi = rank * n // size, (rank + 1) * n // size
            mine = b.samples(lo, hi)
            logits = model(torch.from_numpy(mine.dense), mine.sparse)
            scores.append(logits.numpy())
            labels.append(mine.labels)
    gathered = comm.gather((np.concatenate(scores), np.concatenate(labels)), root=0)
    if rank != 0:
        return float("nan"), float("nan")
    s = np.concatenate([g[0] for g in gathered])
    y = np.concatenate([g[1] for g in gathered])
    return log_loss(y, s), roc_auc(y, s)


def digest(emb: ShardedEmbeddingBagCollection, model: DLRM) -> str:
    """A digest of every weight, the same whatever the number of ranks."""
    h = hashlib.sha256()
    for t in range(emb.num_features):
        h.update(emb.table_weight(t).numpy().tobytes())
    for p in model.dense_parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    a = parse()
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    torch.set_num_threads(1)
    if a.transport == "pymcoll":
        transport: Any = PymcollTransport(comm)
    else:
        import torch.distributed as dist

        importlib.import_module("pymcoll.torch")  # registers "pymcoll", sets the rendezvous variables from MPI
        dist.init_process_group("gloo" if a.transport == "gloo" else "pymcoll")
        transport = TorchDistributedTransport()
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, a.cap)
    data = SyntheticCriteo(sizes, seed=a.seed, ids_per_feature=a.ids_per_feature)
    codec = None
    if a.compress:
        from pymcoll.algorithms.compression import AdaptiveBound, IterationSchedule, TableBounds
        from pymcoll.algorithms.compression.exchange_compressor import ExchangeCompressor
        codec = ExchangeCompressor(AdaptiveBound(TableBounds(), IterationSchedule(phase=a.compress_phase)),
                                  backward=a.compress_backward, bypass=not a.no_bypass)
    emb = ShardedEmbeddingBagCollection(sizes, a.dim, transport, kinds=a.sharding, pooling=a.pooling,
                                        optimizer=a.emb_optimizer, lr=a.emb_lr, seed=a.seed, link_gbps=a.link_gbps,
                                        codec=codec)
    model = DLRM(emb, bottom=(64,), top=(128, 64), seed=a.seed)
    dense_opt = torch.optim.Adam(model.dense_parameters(), lr=a.dense_lr)
    sync = DenseGradientAllreduce(model.dense_parameters(), transport)
    start = 0
    if a.resume:
        found = latest_checkpoint(a.checkpoint_dir)
        if found is None:
            if rank == 0:
                print(f"no checkpoint in {a.checkpoint_dir}: starting from step 0", flush=True)
        else:
            start = int(load_checkpoint(found, model, emb, dense_opt)["step"])
            if rank == 0:
                print(f"resumed from {found} at step {start}", flush=True)
    if rank == 0:
        rows = sum(sizes)
        print(f"DLRM: {size} rank(s), {len(sizes)} tables, {rows} rows x {a.dim} "
              f"({rows * a.dim * 4 / 2**20:.0f} MiB), global batch {a.batch_size}, transport {transport.name}"
              + (f", link {a.link_gbps} Gb/s" if a.link_gbps else ""), flush=True)
        print(emb.plan.describe(), flush=True)
    bce = torch.nn.BCEWithLogitsLoss(reduction="sum")
    progress = Progress(a.steps, start, rank == 0 and not a.quiet)
    emb.exchange.timer.reset()
    dense_time = compute_time = 0.0
    lo, hi = rank * a.batch_size // size, (rank + 1) * a.batch_size // size
    t_start = time.perf_counter()
    loss_sum = np.zeros(1)
    ema = None
    history = []
    traced = int(np.argmax(sizes))
    recorded: list[np.ndarray] = []
    for step in range(start, a.steps):
        full = data.batch(step, a.batch_size)
        if a.record_trace is not None and rank == 0:
            recorded.append(np.asarray(full.sparse.feature(traced)[1], dtype=np.int64))
        batch = full.samples(lo, hi)
        t0 = time.perf_counter()
        logits = model(torch.from_numpy(batch.dense), batch.sparse)
        loss = bce(logits, torch.from_numpy(batch.labels)) / a.batch_size
        loss.backward()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        dense_opt.step()
        dense_opt.zero_grad()
        emb.apply_gradients()
        compute_time += (t1 - t0) + (time.perf_counter() - t2)
        dense_time += t2 - t1
        loss_sum[0] = loss.item()
        comm.Allreduce(MPI.IN_PLACE, loss_sum)
        ema = loss_sum[0] if ema is None else 0.98 * ema + 0.02 * loss_sum[0]
        if a.print_losses and rank == 0:
            print(f"step {step + 1} loss {loss_sum[0]:.9f}", flush=True)
        progress.update(step + 1, ema)
        if a.eval_every and (step + 1) % a.eval_every == 0 and step + 1 < a.steps:
            kept = copy.deepcopy(emb.exchange.timer)  # evaluation's exchanges are not training's
            ev_loss, ev_auc = evaluate(model, data, a.eval_samples, rank, size, comm)
            emb.exchange.timer = kept
            history.append({"step": step + 1, "loss": ev_loss, "auc": ev_auc})
            if rank == 0:
                print(f"\nstep {step + 1}: held-out loss {ev_loss:.4f} AUC {ev_auc:.4f}", file=sys.stderr, flush=True)
        if a.checkpoint_dir and a.checkpoint_every and (step + 1) % a.checkpoint_every == 0:
            save_checkpoint(a.checkpoint_dir, model, emb, step + 1, dense_opt)
    elapsed = time.perf_counter() - t_start
    steps_run = a.steps - start
    timer = emb.exchange.timer
    if a.checkpoint_dir and (not a.checkpoint_every or a.steps % a.checkpoint_every):
        save_checkpoint(a.checkpoint_dir, model, emb, a.steps, dense_opt)
    if a.record_trace is not None and rank == 0 and recorded:
        from pymcoll.algorithms.tiered_cache import Trace

        Trace(np.concatenate(recorded), n_rows=sizes[traced], batch_size=a.batch_size,
              meta={"kind": "dlrm_train", "table": traced, "steps": [start, a.steps], "seed": a.seed}
              ).save(a.record_trace)
        print(f"recorded the ids of table {traced} ({sizes[traced]} rows) over {len(recorded)} steps in "
              f"{a.record_trace}", flush=True)
    ev_loss, ev_auc = evaluate(model, data, a.eval_samples, rank, size, comm)
    weights_digest = digest(emb, model) if a.print_digest else None
    if rank == 0:
        per = max(steps_run, 1)
        print(f"held-out ({a.eval_samples} samples): loss {ev_loss:.4f}  AUC {ev_auc:.4f}")
        print(f"{steps_run} steps in {elapsed:.1f} s: {steps_run / max(elapsed, 1e-9):.2f} steps/s, "
              f"{a.batch_size * steps_run / max(elapsed, 1e-9):.0f} samples/s")
        print("# time per step (rank 0), ms")
        print(f"# {'part':<14}{'ms/step':>10}{'calls/step':>12}{'KiB sent/step':>15}")
        for name in timer.seconds:
            print(f"  {name:<14}{timer.seconds[name] / per * 1e3:>10.3f}{timer.calls[name] / per:>12.1f}"
                  f"{timer.sent_bytes[name] / per / 1024:>15.1f}")
        print(f"  {'dense_allred':<14}{dense_time / per * 1e3:>10.3f}{1:>12.1f}"
              f"{sync._flat.nbytes / 1024:>15.1f}")
        print(f"  {'compute':<14}{(compute_time - timer.total()) / per * 1e3:>10.3f}")
        if codec is not None:
            st = codec.stats
            print(f"codec: {st.blocks} blocks, {st.bypassed} bypassed, ratio {st.ratio:.1f} "
                  f"({st.raw_bytes / 2**20:.1f} MiB -> {st.sent_bytes / 2**20:.2f} MiB), "
                  f"encode {st.encode_s / per * 1e3:.2f} ms/step, decode {st.decode_s / per * 1e3:.2f} ms/step")
        if weights_digest is not None:
            print(f"weights digest {weights_digest}")
        if a.json:
            a.json.write_text(json.dumps({
                "ranks": size, "steps": steps_run, "batch_size": a.batch_size, "transport": transport.name,
                "link_gbps": a.link_gbps, "seconds": elapsed, "steps_per_s": steps_run / max(elapsed, 1e-9),
                "heldout_loss": ev_loss, "heldout_auc": ev_auc, "history": history,
                "exchange_ms_per_step": {k: v / per * 1e3 for k, v in timer.seconds.items()},
                "dense_allreduce_ms_per_step": dense_time / per * 1e3,
                "codec": None if codec is None else {"blocks": codec.stats.blocks, "bypassed": codec.stats.bypassed,
                                                     "ratio": codec.stats.ratio}}, indent=1))
    if a.transport != "pymcoll":
        import torch.distributed as dist

        dist.destroy_process_group()  # before interpreter exit, so that no backend thread outlives it


if __name__ == "__main__":
    main()
