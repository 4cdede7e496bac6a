"""A replica of a tiny torch training run on FaultTolerantTrainer.

Every replica builds the same MLP (seeded) and optimizer, draws its own
regression batches (seeded by seed, step, replica id and attempt) and runs
``trainer.train_step`` until the trainer's step reaches --steps. Events (one
JSON object per line on stdout, see common.emit):

* ready: the member is connected and the model built;
* commit: a committed step (step, epoch, n_contrib, healing, retries,
  stall_s, loss, and ``hash``: the trainer's state_hash() after the step, or
  None while this replica catches up and its state is not the group's);
* nocommit: a train_step call that did not commit (status, retries, skipped);
* healed: the trainer caught up (the trainer's "caught_up" event); ``step``
  is the last step its state holds and ``hash`` that state's hash;
* every other trainer event under its own name (abort, fenced, adopt_step,
  published, fetch_started, fetch_failed, no_quorum, ...);
* done: the final step, state hash, committed and skipped counts.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Optional

import torch
from torch import nn

from pymcoll.ftar import Member, Status
from pymcoll.ftar.training import FaultTolerantTrainer

from .common import emit, parser, ready_and_wait

IN = 8
NO_QUORUM = (Status.TOO_FEW, Status.COORDINATOR_LOST, Status.TIMEOUT)


def build(seed: int, hidden: int, optim: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model and optimizer, identical on every replica that passes the same seed."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, hidden), nn.Tanh(), nn.Linear(hidden, 1))
    if optim == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def batch(seed: int, step: int, who: int, attempt: int, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Replica `who`'s batch at `step` (a new one for each attempt of the step)."""
    g = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 65_537 + who) * 131 + attempt)
    x = torch.randn(size, IN, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--policy", choices=["retry", "skip"], default="retry")
    p.add_argument("--max-retries", type=int, default=5)
    p.add_argument("--sleep", type=float, default=0.02, help="seconds of extra 'compute' per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--optim", choices=["adam", "sgd"], default="adam")
    args = p.parse_args()

    torch.set_num_threads(1)
    model, opt = build(args.seed, args.hidden, args.optim)
    who = zlib.crc32(args.id.encode())
    attempts: dict[int, int] = {}
    last_loss: list[Optional[float]] = [None]
    trainer_ref: list[Optional[FaultTolerantTrainer]] = [None]

    def on_event(ev: dict[str, Any]) -> None:
        fields = {k: v for k, v in ev.items() if k != "event"}
        name = ev["event"]
        if name == "caught_up":
            trainer = trainer_ref[0]
            assert trainer is not None
            # Called right after the load and the replay: the state holds every step before ev["step"].
            fields["next_step"] = fields["step"]
            fields["step"] = fields["step"] - 1
            fields["hash"] = trainer.state_hash()
            name = "healed"
        emit(name, **fields)

    def compute_grads(step: int) -> None:
        attempt = attempts.get(step, 0)
        attempts[step] = attempt + 1
        x, y = batch(args.seed, step, who, attempt)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        last_loss[0] = float(loss.detach())
        if args.sleep > 0:
            time.sleep(args.sleep)

    member = Member(args.coordinator, args.id, timeout=args.timeout, streams=args.streams,
                    integrity=args.integrity, chunk_bytes=args.chunk_bytes, log=True, committed_step=-1)
    trainer = FaultTolerantTrainer(member, model, opt, policy=args.policy, max_retries=args.max_retries,
                                   on_event=on_event)
    trainer_ref[0] = trainer
    ready_and_wait(args.start_file)
    while trainer.step < args.steps:
        last_loss[0] = None
        rep = trainer.train_step(compute_grads)
        if rep.committed:
            emit("commit", step=rep.step, epoch=rep.epoch, n_contrib=rep.n_contrib, healing=rep.healing,
                 retries=rep.retries, stall_s=rep.stall_s, loss=None if rep.healing else last_loss[0],
                 hash=trainer.state_hash() if trainer.up_to_date else None)
        else:
            emit("nocommit", step=rep.step, status=rep.status.value, epoch=rep.epoch, retries=rep.retries,
                 skipped=rep.skipped)
            if rep.status in NO_QUORUM:
                time.sleep(0.02)
    emit("done", step=trainer.step, hash=trainer.state_hash(), up_to_date=trainer.up_to_date,
         committed=trainer.committed_steps, skipped=trainer.skipped)
    member.close()


if __name__ == "__main__":
    main()
