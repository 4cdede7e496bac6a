"""A fault-tolerant data-parallel training loop on FTAR, for torch models.

A training script keeps its model, optimizer and gradient computation and
hands them to :class:`FaultTolerantTrainer`::

    member = pymcoll.ftar.Member("127.0.0.1:29400", f"replica-{i}")
    trainer = FaultTolerantTrainer(member, model, optimizer)

    def compute_grads(step):          # fill p.grad (the trainer cleared them)
        x, y = batch(step)
        loss_fn(model(x), y).backward()

    while trainer.step < total_steps:
        report = trainer.train_step(compute_grads)

One :meth:`~FaultTolerantTrainer.train_step` call runs one step of the loop:

1. ``begin_step``: the quorum of the step. Without one (TOO_FEW,
   COORDINATOR_LOST, TIMEOUT) the call reports it and returns; the caller
   loops. A replica whose step differs from the group's adopts the group's
   step and catches up (below).
2. When the step info asks for it (``serve_state``) and this replica is up
   to date, it publishes its state (the state after ``step - 1``) once per
   step, for replicas that catch up.
3. An up-to-date replica clears the gradients, calls ``compute_grads(step)``,
   flattens every trainable parameter's gradient into one contiguous buffer
   (float32, or float64 when a parameter is float64; a parameter without a
   gradient counts as zeros) and allreduces it out-of-place. A replica that
   catches up contributes zeros (it is not counted in ``n_contrib``) and does
   not call ``compute_grads``.
4. When the allreduce and the vote succeed (COMMIT), the sum divided by
   ``n_contrib`` is the update: an up-to-date replica writes it into every
   trainable parameter's ``.grad`` and calls ``optimizer.step()``; a replica
   that catches up keeps a copy to replay. Nothing is applied when
   ``n_contrib`` is 0 or without a COMMIT. :attr:`~FaultTolerantTrainer.step`
   then moves on.
5. A failed allreduce or vote (ABORTED, TIMEOUT, FENCED, COORDINATOR_LOST, a
   refused COMMIT) applies nothing, and the step is attempted again:

   * ``policy="retry"``: the same gradients are reduced again in the next
     epoch (they are kept; ``compute_grads`` is not called again), at most
     ``max_retries`` times within one call; after that the call returns
     (``committed=False``) and the next call goes on retrying with the same
     gradients.
   * ``policy="skip"``: the gradients of the failed attempt are dropped and
     the call returns at once (``committed=False, skipped=True``). The next
     call runs the *same step number* again and calls ``compute_grads(step)``
     again: the step number counts committed updates, so it stays equal on
     every replica; a data loader that yields a new batch on each call
     thereby skips the batch of the failed attempt. :attr:`skipped` counts
     the dropped attempts.

   FENCED (this replica was evicted) keeps the state, which is still that of
   the last committed step; the next ``begin_step`` tells whether the group
   moved on, and if it did this replica catches up.

Catching up (healing): a (re)joining replica starts a background thread that
fetches a snapshot from a donor (:meth:`pymcoll.ftar.Member.fetch_state`,
which runs without the GIL) while it keeps taking part in the steps with
zeros and storing each committed update. When the snapshot (the state after
step ``t``) has arrived, it is loaded and the stored updates of the steps
after ``t`` are replayed in order (``.grad`` set, ``optimizer.step()``), so
the replica's state equals the others' bit for bit; from the next step on it
computes and contributes. A failed fetch is started again at the next step.

Replicas that start together must start from identical states (the same seed
or checkpoint). The state is the model's and the optimizer's state dicts; a
learning-rate scheduler or other state outside them is not transferred.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from .member import Member, Status
from .state import decode_state, encode_state, load_model_state, model_state, state_hash

if TYPE_CHECKING:
    import torch

__all__ = ["FaultTolerantTrainer", "StepReport"]

Event = dict[str, Any]


@dataclass
class StepReport:
    """What one :meth:`FaultTolerantTrainer.train_step` call did.

    ``step``: the step it worked on; ``committed``: its update was committed
    (and applied, or stored for replay while catching up); ``status``: the
    last status seen (OK when committed); ``n_contrib``: replicas whose
    gradients are in the committed update (0 when not committed);
    ``healing``: this replica contributed zeros because it catches up;
    ``epoch``: the epoch of the last operation; ``retries``: failed attempts
    in this call; ``stall_s``: seconds from the first failure (possibly in an
    earlier call) to this commit, or to the end of this call when not
    committed (0 without failure); ``begin_s``, ``compute_s``,
    ``allreduce_s``, ``commit_s``, ``apply_s``: time spent in each part, summed
    over the attempts; ``skipped``: policy "skip" dropped this attempt's
    gradients; ``caught_up``: the snapshot was loaded and replayed during this
    call.
    """

    step: int
    status: Status
    committed: bool
    n_contrib: int
    healing: bool
    epoch: int
    retries: int
    stall_s: float
    begin_s: float = 0.0
    compute_s: float = 0.0
    allreduce_s: float = 0.0
    commit_s: float = 0.0
    apply_s: float = 0.0
    skipped: bool = False
    caught_up: bool = False


class _Fetch:
    """A background fetch and decode of the state snapshot of a step >= min_step."""

    def __init__(self, member: Member, min_step: int) -> None:
        self.min_step = min_step
        self.result: Optional[tuple[int, Any, int]] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, args=(member,), name=f"ftar-fetch-{min_step}", daemon=True)
        self.thread.start()

    def _run(self, member: Member) -> None:
        try:
            step, data = member.fetch_state(self.min_step)
            self.result = (step, decode_state(data), len(data))
        except BaseException as exc:  # reported by the trainer's thread
            self.error = exc
        finally:
            self.done.set()


class FaultTolerantTrainer:
    """Runs the fault-tolerant training loop of one replica (see the module docstring).

    Parameters:
        member: this replica's :class:`pymcoll.ftar.Member`.
        model: a ``torch.nn.Module``; its trainable parameters are reduced in ``model.parameters()`` order.
        optimizer: a ``torch.optim.Optimizer`` over those parameters.
        policy: "retry" (reduce the same gradients again after a failure) or "skip" (drop them and compute
            new ones); see the module docstring.
        max_retries: failed attempts one call makes before it returns (policy "retry").
        on_event: called with a short dict per event (``{"event": "abort", "step": 7, ...,
            "message": "..."}``) for logging.
        start_step: the first step to run; default ``member.committed_step + 1``.
    """

    def __init__(self, member: Member, model: Any, optimizer: Any, *, policy: str = "retry", max_retries: int = 5,
                 on_event: Optional[Callable[[Event], None]] = None, start_step: Optional[int] = None) -> None:
        import torch

        if policy not in ("retry", "skip"):
            raise ValueError(f"policy={policy!r}: expected 'retry' (reduce the same gradients again) or 'skip' "
                             f"(drop them and compute new ones)")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries={max_retries!r} must be an integer >= 0")
        if on_event is not None and not callable(on_event):
            raise TypeError("on_event must be a callable taking one dict, or None")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        if not hasattr(optimizer, "step") or not hasattr(optimizer, "state_dict"):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        self.member = member
        self.model = model
        self.optimizer = optimizer
        self.policy = policy
        self.max_retries = max_retries
        self.on_event = on_event
        if start_step is None:
            start_step = member.committed_step + 1
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step={start_step!r} must be an integer >= 0")
        self.step: int = start_step
        self.skipped = 0
        self.committed_steps = 0

        self._params: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("model has no trainable parameters (requires_grad=True): nothing to reduce")
        dtype = torch.float64 if any(p.dtype == torch.float64 for p in self._params) else torch.float32
        total = sum(p.numel() for p in self._params)
        self._flat = torch.zeros(total, dtype=dtype)
        self._out = torch.empty_like(self._flat)
        self._pending_step: Optional[int] = None   # the step whose gradients are in _flat
        self._up_to_date = True
        self._heal_from = start_step               # first step stored for replay while catching up
        self._replay: list[tuple[int, Optional[torch.Tensor]]] = []
        self._fetch: Optional[_Fetch] = None
        self._published_step: Optional[int] = None
        self._first_failure: Optional[float] = None
        self._warned_forced_zeros: Optional[int] = None

    # --- public -----------------------------------------------------------

    @property
    def up_to_date(self) -> bool:
        """False while this replica catches up (it contributes zeros and replays later)."""
        return self._up_to_date

    def state_hash(self) -> str:
        """SHA-256 of the model's and optimizer's state (equal on bit-identical replicas)."""
        return state_hash(self.model, self.optimizer)

    def wait_caught_up(self, timeout: Optional[float] = None) -> bool:
        """Wait for a running snapshot fetch (not for the replay, done by the next train_step); True if none is left."""
        fetch = self._fetch
        return fetch is None or fetch.done.wait(timeout)

    def train_step(self, compute_grads: Callable[[int], None]) -> StepReport:
        """Run one step of the loop (see the module docstring) and report it."""
        t_begin = t_compute = t_allreduce = t_commit = t_apply = 0.0
        retries = 0
        caught_up = False
        epoch = 0
        status = Status.OK
        healing = not self._up_to_date

        def report(committed: bool, step: int, n_contrib: int = 0, skipped: bool = False) -> StepReport:
            now = time.monotonic()
            stall = now - self._first_failure if self._first_failure is not None else 0.0
            if committed:
                self._first_failure = None
            return StepReport(step=step, status=status, committed=committed, n_contrib=n_contrib, healing=healing,
                              epoch=epoch, retries=retries, stall_s=stall, begin_s=t_begin, compute_s=t_compute,
                              allreduce_s=t_allreduce, commit_s=t_commit, apply_s=t_apply, skipped=skipped,
                              caught_up=caught_up)

        while True:
            t0 = time.monotonic()
            caught_up |= self._poll_fetch()
            t_apply += time.monotonic() - t0

            t0 = time.monotonic()
            info = self.member.begin_step(self.step)
            t_begin += time.monotonic() - t0
            epoch, status = info.epoch, info.status
            if not info.ok:
                self._failed()
                self._emit("no_quorum", self.step, status=status.value, epoch=epoch,
                           message=f"step {self.step}: no quorum ({status.value})")
                return report(False, self.step)
            if info.step != self.step:
                self._adopt(info.step)
            if info.serve_state and self._up_to_date and self._published_step != info.step:
                self._publish(info.step)
            if not self._up_to_date and self._fetch is None:
                self._start_fetch()
            contribute = self._up_to_date and not info.healing
            healing = not contribute
            if info.healing and self._up_to_date and self._warned_forced_zeros != info.step:
                self._warned_forced_zeros = info.step
                self._emit("zeros_while_current", info.step, epoch=epoch,
                           message=f"step {info.step}: the coordinator counts this replica as catching up although "
                                   f"its state is current; contributing zeros, applying the update")

            if contribute and self._pending_step != self.step:
                t0 = time.monotonic()
                for p in self._params:
                    p.grad = None
                compute_grads(self.step)
                self._flatten()
                self._pending_step = self.step
                t_compute += time.monotonic() - t0

            t0 = time.monotonic()
            res = self.member.allreduce(self._flat, self._out, contribute=contribute)
            t_allreduce += time.monotonic() - t0
            epoch, status = res.epoch, res.status
            committed = False
            if res.ok:
                t0 = time.monotonic()
                committed = self.member.commit(self.step, True)
                t_commit += time.monotonic() - t0
                status = self.member.last_status or (Status.OK if committed else Status.ABORTED)
            if committed:
                t0 = time.monotonic()
                self._committed(res.n_contrib)
                t_apply += time.monotonic() - t0
                done = self.step
                if info.healing and self._up_to_date:  # the member left its committed step behind
                    self.member.committed_step = done
                self.step += 1
                self.committed_steps += 1
                self._pending_step = None
                return report(True, done, res.n_contrib)

            self._failed()
            what = "allreduce" if not res.ok else "commit"
            self._emit("abort", self.step, status=status.value, epoch=epoch, phase=what,
                       message=f"step {self.step}: {what} failed ({status.value}); nothing applied")
            if status is Status.FENCED:
                self._emit("fenced", self.step, epoch=epoch,
                           message=f"step {self.step}: this replica was evicted; it rejoins at the next step")
            if self.policy == "skip":
                self._pending_step = None
                self.skipped += 1
                return report(False, self.step, skipped=True)
            retries += 1
            if retries > self.max_retries:
                return report(False, self.step)

    # --- internals --------------------------------------------------------

    def _emit(self, event: str, step: int, **fields: Any) -> None:
        if self.on_event is not None:
            self.on_event({"event": event, "step": step, **fields})

    def _failed(self) -> None:
        if self._first_failure is None:
            self._first_failure = time.monotonic()

    def _adopt(self, group_step: int) -> None:
        """The group runs another step than this replica: take the group's step and catch up."""
        self._emit("adopt_step", group_step, previous=self.step,
                   message=f"the group is at step {group_step}, this replica at {self.step}: adopting it and "
                           f"catching up")
        self.step = group_step
        self._pending_step = None
        self._up_to_date = False
        self._heal_from = group_step
        self._replay = []

    def _publish(self, step: int) -> None:
        try:
            data = encode_state(model_state(self.model, self.optimizer))
            self.member.publish_state(step - 1, data)
        except Exception as exc:  # serving is best effort: the joiner asks another donor
            self._emit("publish_failed", step, message=f"step {step}: cannot publish the state: {exc}")
            return
        self._published_step = step
        self._emit("published", step, state_step=step - 1, bytes=len(data),
                   message=f"published the state of step {step - 1} ({len(data)} bytes)")

    def _start_fetch(self) -> None:
        self._fetch = _Fetch(self.member, self._heal_from - 1)
        self._emit("fetch_started", self.step, min_step=self._heal_from - 1,
                   message=f"fetching the state of step >= {self._heal_from - 1}")

    def _poll_fetch(self) -> bool:
        """Load a finished fetch and replay; True when this replica caught up."""
        fetch = self._fetch
        if fetch is None or not fetch.done.is_set():
            return False
        self._fetch = None
        if self._up_to_date:
            return False
        if fetch.error is not None or fetch.result is None:
            self._emit("fetch_failed", self.step, message=f"state fetch failed: {fetch.error}; trying again")
            return False
        snap_step, state, nbytes = fetch.result
        if snap_step + 1 < self._heal_from:
            self._emit("fetch_failed", self.step, state_step=snap_step,
                       message=f"the state of step {snap_step} is older than the stored updates "
                               f"(from step {self._heal_from}); fetching again")
            return False
        try:
            load_model_state(self.model, self.optimizer, state)
        except Exception as exc:
            self._emit("fetch_failed", self.step, message=f"cannot load the fetched state: {exc}; fetching again")
            return False
        replayed = 0
        if snap_step >= self.step:  # newer than anything stored: the group moved on
            self.step = snap_step + 1
        else:
            for step, update in self._replay:
                if step > snap_step and update is not None:
                    self._apply(update)
                    replayed += 1
        self._replay = []
        self._up_to_date = True
        self._pending_step = None
        self.member.committed_step = self.step - 1  # the next quorum counts this replica as up to date
        self._emit("caught_up", self.step, state_step=snap_step, replayed=replayed, bytes=nbytes,
                   seconds=round(time.monotonic() - fetch.started, 3),
                   message=f"caught up: loaded the state of step {snap_step} ({nbytes} bytes), replayed "
                           f"{replayed} updates")
        return True

    def _flatten(self) -> None:
        off = 0
        for p in self._params:
            n = p.numel()
            dst = self._flat[off: off + n]
            if p.grad is None:
                dst.zero_()
            else:
                dst.copy_(p.grad.detach().reshape(-1))
            off += n

    def _committed(self, n_contrib: int) -> None:
        update: Optional[torch.Tensor] = None
        if n_contrib > 0:
            update = self._out.div_(n_contrib)
        if self._up_to_date:
            if update is not None:
                self._apply(update)
        else:
            self._replay.append((self.step, None if update is None else update.clone()))

    def _apply(self, update: "torch.Tensor") -> None:
        off = 0
        for p in self._params:
            n = p.numel()
            g = update[off: off + n].view_as(p)
            if p.grad is None:
                p.grad = g.to(dtype=p.dtype, device=p.device, copy=True)
            else:
                p.grad.copy_(g)
            off += n
        self.optimizer.step()
