"""Data-parallel training with torch DDP over the "pymcoll" backend (or "gloo").

A small MLP learns a fixed random nonlinear function of 16 inputs. Every
rank draws its own batches (seeded by rank), DDP averages the gradients, and
rank 0 prints the mean loss over the ranks each step, one line per step::

    step 1 loss 0.3761835992336273

Run it under MPI; ``import pymcoll.torch`` registers the backend and sets
torch's rendezvous variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
from MPI, so gloo runs under mpiexec the same way::

    mpiexec -n 2 python examples/ddp_train.py --backend pymcoll
    mpiexec -n 2 python examples/ddp_train.py --backend gloo

Both print the same losses (to rounding): the model, the data and the
order of operations do not depend on the backend.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn

import pymcoll.torch  # noqa: F401 - registers "pymcoll"; RANK, WORLD_SIZE, MASTER_* from MPI

IN, HIDDEN = 16, 64


def target(x: torch.Tensor) -> torch.Tensor:
    """The function to learn: fixed (seeded) weights, the same on every rank."""
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(IN, 8, generator=g)
    w2 = torch.randn(8, 1, generator=g)
    return torch.tanh(x @ w1 / 4) @ w2 / 2


def batch(step: int, rank: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch of `size` samples at `step` (deterministic)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(size, IN, generator=g)
    return x, target(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["pymcoll", "gloo"], default="pymcoll")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(1)  # one rank per core; also keeps the float sums in one order
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 1))
    # Small buckets: the gradients travel in several all_reduces that overlap the backward pass.
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.MSELoss()

    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = batch(step, rank, args.batch, args.seed)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP averages the gradients over the ranks here
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {mean.item():.16f}", flush=True)
    if rank == 0:
        print(f"done: backend {args.backend}, {world} ranks, {args.steps} steps in "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
    # Tear down together: with gloo, a rank leaving while a peer's process group (or rank 0's
    # rendezvous store) is still shutting down can abort that peer at exit.
    dist.barrier()
    dist.destroy_process_group()
    MPI.COMM_WORLD.Barrier()


if __name__ == "__main__":
    main()
