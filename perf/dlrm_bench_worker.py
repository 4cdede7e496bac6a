"""One launch of the DLRM exchange benchmark (started by perf/bench_dlrm.py under mpiexec).

Builds the same DLRM twice, one with its embedding exchange and dense
Allreduce on pymcoll, one on torch.distributed gloo (all_to_all_single,
all_reduce), and trains both on the same batches, alternating blocks of
steps (A B B A ...). Per step and rank it records the step time and each
exchange's time; the step's cost is the slowest rank's. Prints one JSON
document on rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

from pymcoll.algorithms.dlrm import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo, cap_table_sizes
from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
from pymcoll.algorithms.dlrm.model import DLRM, DenseGradientAllreduce
from pymcoll.algorithms.dlrm.transport import TorchDistributedTransport, PymcollTransport

PARTS = ("splits", "lengths", "ids", "pooled", "pooled_grad")


class Trainer:
    """One DLRM with its transport, stepping through the shared batch sequence."""

    def __init__(self, transport: Any, sizes: list[int], a: argparse.Namespace, data: SyntheticCriteo,
                 rank: int, size: int) -> None:
        self.emb = ShardedEmbeddingBagCollection(sizes, a.dim, transport, optimizer="rowwise_adagrad", lr=0.05)
        self.model = DLRM(self.emb, bottom=(64,), top=(128, 64))
        self.opt = torch.optim.Adam(self.model.dense_parameters(), lr=0.002)
        self.sync = DenseGradientAllreduce(self.model.dense_parameters(), transport)
        self.data, self.batch = data, a.batch_size
        self.lo, self.hi = rank * a.batch_size // size, (rank + 1) * a.batch_size // size
        self.bce = torch.nn.BCEWithLogitsLoss(reduction="sum")
        self.next = 0
        self.losses: list[float] = []

    def step(self) -> dict[str, float]:
        """One training step; its time, its exchanges' times and the dense Allreduce's."""
        b = self.data.batch(self.next, self.batch).samples(self.lo, self.hi)
        self.next += 1
        timer = self.emb.exchange.timer
        before = dict(timer.seconds)
        t0 = time.perf_counter()
        logits = self.model(torch.from_numpy(b.dense), b.sparse)
        loss = self.bce(logits, torch.from_numpy(b.labels)) / self.batch
        loss.backward()
        t1 = time.perf_counter()
        self.sync()
        t2 = time.perf_counter()
        self.opt.step()
        self.opt.zero_grad()
        self.emb.apply_gradients()
        t3 = time.perf_counter()
        self.losses.append(loss.item())
        out = {p: timer.seconds.get(p, 0.0) - before.get(p, 0.0) for p in PARTS}
        out["exchange"] = sum(out[p] for p in PARTS)
        out["dense_allreduce"] = t2 - t1
        out["step"] = t3 - t0
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default="16:2048,64:8192", help="dim:global_batch pairs")
    p.add_argument("--cap", type=int, default=100_000)
    p.add_argument("--blocks", type=int, default=6, help="blocks per implementation")
    p.add_argument("--block-steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    torch.set_num_threads(1)
    port = comm.bcast(free_port() if rank == 0 else None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, a.cap)
    records = []
    for config in a.configs.split(","):
        dim, batch = (int(x) for x in config.split(":"))
        a.dim, a.batch_size = dim, batch
        data = SyntheticCriteo(sizes, seed=0)
        impls = {"pymcoll": Trainer(PymcollTransport(comm), sizes, a, data, rank, size),
                 "gloo": Trainer(TorchDistributedTransport(), sizes, a, data, rank, size)}
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in impls}
        for t in impls.values():
            for _ in range(a.warmup):
                t.step()
        for block in range(a.blocks):
            order = ("pymcoll", "gloo") if block % 2 == 0 else ("gloo", "pymcoll")
            for name in order:
                comm.Barrier()
                for _ in range(a.block_steps):
                    samples[name].append(impls[name].step())
        # Same batches, same initial weights: the first step's loss is the same to rounding; later
        # ones drift only by the summation order of the dense Allreduce (which differs between the two).
        lp, lg = np.array(impls["pymcoll"].losses), np.array(impls["gloo"].losses)
        drift = float(np.max(np.abs(lp - lg) / np.abs(lg)))
        agree = bool(abs(lp[0] - lg[0]) <= 1e-6 * abs(lg[0]) and drift <= 1e-2)
        for name, rows in samples.items():
            keys = list(rows[0])
            local = np.array([[r[k] for k in keys] for r in rows])
            slowest = np.empty_like(local)
            comm.Allreduce(local, slowest, op=MPI.MAX)
            if rank == 0:
                rec = {"impl": name, "ranks": size, "dim": dim, "global_batch": batch, "steps": len(rows),
                       "losses_agree": agree, "loss_max_rel_diff": drift,
                       "median_ms": {k: float(np.median(slowest[:, i])) * 1e3 for i, k in enumerate(keys)},
                       "min_ms": {k: float(np.min(slowest[:, i])) * 1e3 for i, k in enumerate(keys)},
                       "sent_bytes_per_step": {k: v / max(impls[name].emb.exchange.timer.calls.get(k, 1), 1)
                                               for k, v in impls[name].emb.exchange.timer.sent_bytes.items()}}
                records.append(rec)
    if rank == 0:
        print("RESULT " + json.dumps({"ranks": size, "cpus": len(os.sched_getaffinity(0)),
                                      "mpi": MPI.Get_library_version().splitlines()[0].strip(),
                                      "torch": torch.__version__, "records": records}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
