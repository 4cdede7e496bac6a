"""Fault-tolerant data-parallel training with FTAR while replicas are killed on a schedule.

A small MLP learns a fixed random nonlinear function of 16 inputs. Each of
--replicas replicas (a separate process running this script with
``--replica ID``) draws its own batches, and pymcoll.ftar.training's
FaultTolerantTrainer averages the gradients over the replicas with the
fault-tolerant allreduce (FTAR). This script is also the supervisor: it

* starts the coordinator (``python -m pymcoll ftar-coordinator`` on a free
  loopback port) with a fresh job token that the children get in the
  environment variable PYMCOLL_FTAR_TOKEN (never on a command line), and
  starts the replicas and lets them take their first step together, all
  through :class:`pymcoll.ftar.local_cluster.LocalCluster`, which also stops
  every child when the supervisor ends or dies;
* every --kill-every seconds of training kills one replica with SIGKILL
  (victims in turn: r0, r1, ...; --kills in all) and restarts it
  --restart-delay seconds later; or, with --failure-mtbf, at random: kill
  times with exponential gaps of that mean (a Poisson process, seeded by
  --failure-seed), each victim drawn from the replicas that are training;
  the restarted replica joins the running
  group, contributes zeros while it fetches the state from a donor, replays
  the updates committed meanwhile and then trains on with the others;
* prints, live, the steps, commits, aborts and retries, when a restarted
  replica heals and catches up, and per kill the *stall*: the time in which
  the surviving replicas committed no step around the kill (from their last
  commit before the kill to their first commit after it), also shown as the
  *extra* stall beyond one normal step;
* ends with a summary and exits 0 only if every replica ended with the same
  state hash (model and optimizer state, SHA-256) and no step was ever
  committed with two different states.

Effective training time: the fraction of the training wall time (from the
go of the first step to the last commit) in which the group committed steps
at its normal rate::

    effective = committed steps x median healthy step time / training wall time

where the median healthy step time is the median time between two
consecutive commits of steps to which every replica contributed
(n_contrib = --replicas). 1.0 means the kills cost nothing.

It counts a step committed without a replica as a full one. The
samples-based ETTR (effective training time ratio) counts the samples the
step carries, as the failure simulator (pymcoll.ftar.simulate) does: a
replica out costs 1/replicas of the throughput::

    ETTR = sum over committed steps of n_contrib x median healthy step time
           / (replicas x training wall time)

    python examples/ftar_train.py                      # 4 replicas, 800 steps, 4 kills: about a minute
    python examples/ftar_train.py --replicas 3 --steps 240 --kill-every 1.5 --kills 1 --restart-delay 0.5 \
        --compute-ms 40 --json summary.json         # the short profile of tests/test_ftar_training.py
    python examples/ftar_train.py --steps 2000 --failure-mtbf 30 --failure-seed 1   # random kills, 30 s apart on average

A kill is skipped (and so are the later ones) when too little training is
left for the victim to restart and catch up before the others finish.
Exit status: 0 when all is well, 1 when the final states differ, a step was
committed with two states or a replica failed, 2 after --timeout, 130 when
interrupted (Ctrl-C, SIGTERM); every child process is stopped in all cases.

Output (abridged, 2 cores)::

    [  8.1s] kill 1: SIGKILL r0 (pid 18403) after step 134
    [  8.1s] abort at step 135 (epoch 1): allreduce ABORTED, retried
    [  8.1s] stall around kill 1: the survivors committed no step for 0.08 s (extra 0.02 s over a normal step)
    [ 10.1s] restarted r0 (pid 18432)
    [ 10.1s] step 172/800  commits 172  aborts 1  retries 1  kills 1/4  train loss 0.0169  replicas 3 training, ...
    [ 12.1s] r0 joined the group at step 206 and is catching up (contributing zeros, fetching the state)
    [ 12.2s] r0 caught up: state of step 205 (44495 bytes) + 1 replayed updates, fetched in 0.06 s
    ...
    --- summary
    steps committed   800/800, aborts 4, retries 4
    kills             4 (4 survived: the group went on and the restarted replica caught up)
      kill 1: r0 after step 134: stall 0.075 s (extra 0.020 s), restart to caught up 2.12 s
    ...
    effective training time 0.938 = 800 steps x 0.0552 s (median healthy step) / 47.13 s (training wall time)
    eval loss         0.37523 -> 0.00343
    final state hash  identical on all 4 replicas (86cfd6dbbb536154)

Options of the supervisor: --replicas, --steps, --kill-every, --kills,
--failure-mtbf, --failure-seed, --restart-delay, --seed, --compute-ms
(simulated extra compute per step), --timeout, --json FILE (the summary,
with every kill and every commit's time and n_contrib), --quiet (only the
summary).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import queue
import random
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pymcoll.ftar.local_cluster import LocalCluster, LocalClusterError, LocalProcess

IN, HIDDEN = 16, 64

# ---------------------------------------------------------------------------
# The model and the data (the same in every replica)
# ---------------------------------------------------------------------------


def _target(x: Any) -> Any:
    """The function to learn: fixed (seeded) weights, the same in every replica."""
    import torch

    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(IN, 8, generator=g)
    w2 = torch.randn(8, 1, generator=g)
    return torch.tanh(x @ w1 / 4) @ w2 / 2


def _batch(seed: int, step: int, replica: int, size: int = 64) -> tuple[Any, Any]:
    """Replica `replica`'s batch at `step` (deterministic, different for every replica and step)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + replica)
    x = torch.randn(size, IN, generator=g)
    return x, _target(x)


def _build(seed: int) -> tuple[Any, Any]:
    """The model and optimizer, bit-identical in every replica with the same seed."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


# ---------------------------------------------------------------------------
# Replica mode (--replica ID): one replica, reporting JSON lines on stdout
# ---------------------------------------------------------------------------


def _say(event: str, **fields: Any) -> None:
    """One JSON event per line on stdout, for the supervisor."""
    fields["ev"] = event
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _wait_for_go(path: str, timeout: float = 120.0) -> bool:
    """The supervisor's go for the first step: the file `path` appears (False after `timeout` s)."""
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def run_replica(args: argparse.Namespace) -> int:
    """Train as replica `args.replica` until the group's step reaches --steps."""
    import torch
    from torch import nn

    from pymcoll.ftar import Member, Status
    from pymcoll.ftar.training import FaultTolerantTrainer

    torch.set_num_threads(1)  # replicas share the cores; one thread also fixes the order of the float sums
    model, opt = _build(args.seed)
    g = torch.Generator().manual_seed(args.seed + 777_777)
    x_eval = torch.randn(1024, IN, generator=g)
    y_eval = _target(x_eval)

    def eval_loss() -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(model(x_eval), y_eval))

    loss_now: list[Optional[float]] = [None]

    def compute_grads(step: int) -> None:
        x, y = _batch(args.seed, step, args.replica)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        loss_now[0] = float(loss.detach())
        if args.compute_ms > 0:
            time.sleep(args.compute_ms / 1000)  # stands for the rest of a real model's forward and backward

    def on_event(ev: dict[str, Any]) -> None:
        fields = {k: v for k, v in ev.items() if k not in ("event", "message")}
        _say(ev["event"], **fields)

    rid = f"r{args.replica}"
    member = Member(args.coordinator, rid, timeout=args.op_timeout)
    try:
        trainer = FaultTolerantTrainer(member, model, opt, policy="retry", on_event=on_event)
        _say("ready", pid=os.getpid(), eval_loss=eval_loss())
        if args.start_file and not _wait_for_go(args.start_file):
            _say("error", message="no go from the supervisor within 120 s")
            return 1
        while trainer.step < args.steps:
            loss_now[0] = None
            rep = trainer.train_step(compute_grads)
            if rep.committed:
                _say("commit", step=rep.step, epoch=rep.epoch, n_contrib=rep.n_contrib, healing=rep.healing,
                     retries=rep.retries, stall_s=round(rep.stall_s, 4), loss=None if rep.healing else loss_now[0],
                     hash=trainer.state_hash()[:16] if trainer.up_to_date else None)
            elif rep.status in (Status.TOO_FEW, Status.COORDINATOR_LOST, Status.TIMEOUT):
                time.sleep(0.05)  # no quorum: ask again shortly
        _say("done", step=trainer.step, hash=trainer.state_hash(), up_to_date=trainer.up_to_date,
             eval_loss=eval_loss(), committed=trainer.committed_steps)
    finally:
        member.close()
    return 0


# ---------------------------------------------------------------------------
# The supervisor
# ---------------------------------------------------------------------------


@dataclass
class Kill:
    """One scheduled kill and what followed it (times in seconds since the go)."""

    number: int
    victim: str
    t: float
    step: int
    last_commit_before: Optional[float] = None
    first_commit_after: Optional[float] = None
    restarted: Optional[float] = None
    ready: Optional[float] = None
    joined_step: Optional[int] = None
    caught_up: Optional[float] = None
    join_stall_s: Optional[float] = None

    @property
    def stall_s(self) -> Optional[float]:
        if self.last_commit_before is None or self.first_commit_after is None:
            return None
        return self.first_commit_after - self.last_commit_before


@dataclass
class Child:
    """What the supervisor knows of one replica process (one incarnation of a replica id)."""

    rid: str
    index: int
    proc: LocalProcess
    state: str = "starting"   # starting, training, healing, done, killed, exited
    ready_at: Optional[float] = None
    done: Optional[dict[str, Any]] = None


class Supervisor:
    """The kill schedule and the report; a LocalCluster runs the coordinator and the replicas."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # The replicas' events, from the cluster's reader threads to the main loop: (when, process, event;
        # None at the end of the process's output).
        self.events: "queue.Queue[tuple[float, LocalProcess, Optional[dict[str, Any]]]]" = queue.Queue()
        self.cluster = LocalCluster(token_via="env", env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                    on_event=lambda proc, ev: self.events.put(
                                        (time.monotonic() if ev is None else ev["t"], proc, ev)))
        self.children: dict[str, Child] = {}
        self.t0 = time.monotonic()
        self.t_go: Optional[float] = None
        self.commit_time: dict[int, float] = {}     # step -> when first reported (s since the go)
        self.n_contrib: dict[int, int] = {}
        self.hashes: dict[int, dict[str, str]] = {}  # step -> {replica: hash}
        self.aborts: set[tuple[int, int]] = set()   # (step, epoch)
        self.retries: dict[int, int] = {}
        self.kills: list[Kill] = []
        self.restarts: list[tuple[float, str]] = []  # (when, replica)
        # --failure-mtbf: kill times with exponential gaps (a Poisson process), victims at random.
        self.failure_rng = random.Random(args.failure_seed)
        self.next_due = self._gap()
        self.kills_planned = (args.kills if args.kills is not None
                              else 4 if args.failure_mtbf is None else math.inf)
        self.problems: list[str] = []
        self.initial_loss: Optional[float] = None
        self.losses: list[float] = []
        self.live_len = 0
        self.tty = sys.stdout.isatty()
        self.last_progress = 0.0

    def _gap(self) -> float:
        """Seconds to the next kill: --kill-every, or an exponential gap of mean --failure-mtbf."""
        if self.args.failure_mtbf is None:
            return self.args.kill_every
        return self.failure_rng.expovariate(1.0 / self.args.failure_mtbf)

    def kills_text(self) -> str:
        """Kills so far, out of the planned ones when there is a number."""
        return f"{len(self.kills)}" + ("" if math.isinf(self.kills_planned) else f"/{self.kills_planned}")

    # --- output -----------------------------------------------------------

    def now(self) -> float:
        """Seconds since the go (or since the start, before it)."""
        return time.monotonic() - (self.t_go if self.t_go is not None else self.t0)

    def say(self, text: str) -> None:
        """One event line (unless --quiet), above the live progress line."""
        if self.args.quiet:
            return
        self._clear_live()
        print(f"[{self.now():6.1f}s] {text}", flush=True)

    def _clear_live(self) -> None:
        if self.tty and self.live_len:
            sys.stdout.write("\r" + " " * self.live_len + "\r")
            self.live_len = 0

    def progress(self, force: bool = False) -> None:
        """The live line (on a terminal) or a line every 5 s (otherwise)."""
        if self.args.quiet or self.t_go is None:
            return
        now = time.monotonic()
        if not force and now - self.last_progress < (0.25 if self.tty else 5.0):
            return
        self.last_progress = now
        step = max(self.commit_time, default=-1) + 1
        recent = self.losses[-20:]
        loss = f"{statistics.fmean(recent):.4f}" if recent else "-"
        states = [c.state for c in self.children.values()]
        line = (f"[{self.now():6.1f}s] step {step}/{self.args.steps}  commits {len(self.commit_time)}  "
                f"aborts {len(self.aborts)}  retries {sum(self.retries.values())}  "
                f"kills {self.kills_text()}  train loss {loss}  "
                f"replicas {states.count('training')} training, {states.count('healing')} healing, "
                f"{sum(s in ('starting', 'killed', 'exited') for s in states)} down"
                + (f", {states.count('done')} done" if 'done' in states else ""))
        if self.tty:
            self._clear_live()
            sys.stdout.write(line)
            sys.stdout.flush()
            self.live_len = len(line)
        else:
            print(line, flush=True)

    # --- processes --------------------------------------------------------

    def replica_argv(self, index: int) -> list[str]:
        """This script in replica mode, as replica `index`."""
        a = self.args
        return [sys.executable, os.path.abspath(__file__), "--replica", str(index), "--coordinator",
                self.cluster.address, "--steps", str(a.steps), "--seed", str(a.seed), "--compute-ms",
                str(a.compute_ms), "--op-timeout", str(a.op_timeout)]

    def start(self) -> None:
        """The coordinator, then the replicas; their first step starts once every one is connected."""
        a = self.args
        self.cluster.start_coordinator(min_replicas=max(1, a.replicas - 1))  # one replica out: the others go on
        if not a.quiet:
            schedule = (f"kill every {a.kill_every:g} s, {self.kills_planned} kills"
                        if a.failure_mtbf is None else
                        f"random kills {a.failure_mtbf:g} s apart on average (seed {a.failure_seed})"
                        + ("" if math.isinf(self.kills_planned) else f", at most {self.kills_planned}"))
            print(f"coordinator on {self.cluster.address}; starting {a.replicas} replicas "
                  f"(steps {a.steps}, {schedule}, restart after {a.restart_delay:g} s)", flush=True)
        procs = self.cluster.start_together([(f"r{i}", self.replica_argv(i)) for i in range(a.replicas)],
                                            timeout=120)
        self.t_go = time.monotonic()
        for i, proc in enumerate(procs):
            self.children[proc.name] = Child(proc.name, i, proc, state="training")
        self.say("go: all replicas are connected")

    # --- events -----------------------------------------------------------

    def handle(self, when: float, proc: LocalProcess, ev: Optional[dict[str, Any]]) -> None:
        rid = proc.name
        child = self.children.get(rid)
        if child is None or child.proc is not proc:
            return  # a killed incarnation's last lines
        t = when - (self.t_go if self.t_go is not None else self.t0)
        if ev is None:  # end of its output
            code = proc.wait(10)
            if child.state not in ("done", "killed"):
                child.state = "exited"
                self.problems.append(f"{rid} exited unexpectedly (status {code}):\n{proc.recent_stderr(20)}")
                self.say(f"{rid} exited unexpectedly with status {code}")
            return
        kind = ev.get("ev")
        if kind == "ready":
            child.ready_at = when
            if self.initial_loss is None:
                self.initial_loss = ev.get("eval_loss")
            if proc.incarnation > 0:
                child.state = "healing"
                kill = self._kill_of(rid)
                if kill is not None:
                    kill.ready = t
                self.say(f"restarted {rid} is up ({when - proc.started_at:.1f} s to start)")
        elif kind == "commit":
            step = ev["step"]
            if child.state == "training" or (child.state == "healing" and ev.get("hash")):
                child.state = "training"
            if step not in self.commit_time:
                self.commit_time[step] = t
                self.n_contrib[step] = ev["n_contrib"]
                self._commit_after_kills(t)
            self.retries[step] = max(self.retries.get(step, 0), ev.get("retries", 0))
            if ev.get("hash"):
                self.hashes.setdefault(step, {})[rid] = ev["hash"]
                if len(set(self.hashes[step].values())) > 1:
                    self.problems.append(f"step {step} committed with different states: {self.hashes[step]}")
                    self.say(f"DIVERGENCE at step {step}: {self.hashes[step]}")
            if ev.get("loss") is not None:
                self.losses.append(ev["loss"])
        elif kind == "abort":
            key = (ev["step"], ev.get("epoch", -1))
            if key not in self.aborts:
                self.aborts.add(key)
                self.say(f"abort at step {ev['step']} (epoch {key[1]}): {ev.get('phase', '?')} "
                         f"{ev.get('status', '?')}, retried")
        elif kind == "adopt_step":
            child.state = "healing"
            kill = self._kill_of(rid)
            if kill is not None:
                kill.joined_step = ev["step"]
            self.say(f"{rid} joined the group at step {ev['step']} and is catching up "
                     f"(contributing zeros, fetching the state)")
        elif kind == "caught_up":
            child.state = "training"
            kill = self._kill_of(rid)
            if kill is not None:
                kill.caught_up = t
            self.say(f"{rid} caught up: state of step {ev.get('state_step')} ({ev.get('bytes', 0)} bytes) + "
                     f"{ev.get('replayed', 0)} replayed updates, fetched in {ev.get('seconds', 0):.2f} s")
        elif kind == "fenced":
            self.say(f"{rid} was fenced at step {ev['step']}; it rejoins")
        elif kind == "fetch_failed":
            self.say(f"{rid}: state fetch failed at step {ev['step']}; trying again")
        elif kind == "done":
            child.state = "done"
            child.done = ev
        elif kind in ("error", "text"):
            self.say(f"{rid}: {ev.get('message') or ev.get('text')}")

    def _kill_of(self, rid: str) -> Optional[Kill]:
        """The latest kill of `rid` that its restarted incarnation has not yet caught up from."""
        for k in reversed(self.kills):
            if k.victim == rid:
                return k if k.caught_up is None else None
        return None

    def _commit_after_kills(self, t: float) -> None:
        for k in self.kills:
            if k.first_commit_after is not None:
                continue
            if t <= k.t:  # reported before the kill, read just after it
                k.last_commit_before = max(k.last_commit_before or t, t)
            else:
                k.first_commit_after = t
                stall = k.stall_s
                if stall is not None:
                    normal = self.median_step()
                    extra = f" (extra {max(0.0, stall - normal):.2f} s over a normal step)" if normal else ""
                    self.say(f"stall around kill {k.number}: the survivors committed no step for "
                             f"{stall:.2f} s{extra}")

    def median_step(self) -> float:
        """Median time between consecutive commits of steps with every replica contributing."""
        gaps = []
        for s, t in self.commit_time.items():
            prev = self.commit_time.get(s - 1)
            if prev is not None and self.n_contrib.get(s) == self.args.replicas \
                    and self.n_contrib.get(s - 1) == self.args.replicas:
                gaps.append(t - prev)
        if not gaps:
            gaps = [t - self.commit_time[s - 1] for s, t in self.commit_time.items() if s - 1 in self.commit_time]
        return statistics.median(gaps) if gaps else 0.0

    # --- the schedule -----------------------------------------------------

    def maybe_kill(self) -> None:
        a = self.args
        if self.t_go is None or len(self.kills) >= self.kills_planned or self.finishing():
            return
        t = self.now()
        if t < self.next_due or not self.commit_time:
            return
        step = max(self.commit_time)
        left_s = (a.steps - step - 1) * max(self.median_step(), 1e-3)
        start_s = max((c.ready_at - c.proc.started_at for c in self.children.values() if c.ready_at),
                      default=2.0)
        if left_s < a.restart_delay + start_s + 2.0:
            self.say(f"kill {len(self.kills) + 1} and later skipped: about {left_s:.1f} s of training left, too "
                     f"little for the victim to restart and catch up")
            self.kills_planned = len(self.kills)
            return
        if a.failure_mtbf is None:
            order = [(len(self.kills) + i) % a.replicas for i in range(a.replicas)]
            victim = next((self.children[f"r{i}"] for i in order if self.children[f"r{i}"].state == "training"),
                          None)
        else:
            training = [self.children[f"r{i}"] for i in range(a.replicas) if self.children[f"r{i}"].state == "training"]
            victim = self.failure_rng.choice(training) if training else None
        if victim is None:
            return  # nobody up to date to kill right now; try again shortly
        self.next_due += self._gap()
        kill = Kill(len(self.kills) + 1, victim.rid, t, step, last_commit_before=self.commit_time[step])
        self.cluster.kill(victim.rid)
        victim.state = "killed"
        self.kills.append(kill)
        self.restarts.append((t + a.restart_delay, victim.rid))
        self.say(f"kill {kill.number}: SIGKILL {victim.rid} (pid {victim.proc.pid}) after step {step}")

    def maybe_restart(self) -> None:
        t = self.now()
        for item in list(self.restarts):
            when, rid = item
            if t >= when:
                self.restarts.remove(item)
                if self.finishing():
                    self.say(f"{rid} not restarted: the group has finished")
                    continue
                old = self.children[rid]
                child = self.children[rid] = Child(rid, old.index, self.cluster.restart(rid))
                for k in reversed(self.kills):
                    if k.victim == rid:
                        k.restarted = t
                        break
                self.say(f"restarted {rid} (pid {child.proc.pid})")

    def finishing(self) -> bool:
        """The group committed its last step."""
        return self.args.steps - 1 in self.commit_time

    # --- main loop --------------------------------------------------------

    def run(self) -> int:
        a = self.args
        try:
            self.start()
        except LocalClusterError as exc:
            self.problems.append(f"the replicas did not all start: {exc}")
            return self.summary()
        deadline = time.monotonic() + a.timeout
        end_wait: Optional[float] = None
        while True:
            if time.monotonic() > deadline:
                self.problems.append(f"the run did not finish within --timeout {a.timeout:g} s")
                break
            try:
                item = self.events.get(timeout=0.05)
            except queue.Empty:
                item = None
            while item is not None:
                self.handle(*item)
                try:
                    item = self.events.get_nowait()
                except queue.Empty:
                    item = None
            self.maybe_kill()
            self.maybe_restart()
            self.progress()
            alive = [c for c in self.children.values() if c.state not in ("killed", "exited")]
            if self.finishing() and not self.restarts:
                if all(c.state == "done" for c in alive):
                    break
                end_wait = end_wait or time.monotonic() + 30
                if time.monotonic() > end_wait:
                    late = [c.rid for c in alive if c.state != "done"]
                    self.problems.append(f"{', '.join(late)} did not finish within 30 s of the last step")
                    break
            elif not alive and not self.restarts:
                self.problems.append("every replica is gone")
                break
        self.progress(force=True)
        self._clear_live()
        return self.summary()

    # --- the end ----------------------------------------------------------

    def summary(self) -> int:
        a = self.args
        finals = {c.rid: c.done for c in self.children.values() if c.done is not None}
        hashes = {rid: d["hash"] for rid, d in finals.items()}
        not_caught_up = [rid for rid, d in finals.items() if not d.get("up_to_date", True)]
        identical = len(finals) == a.replicas and len(set(hashes.values())) == 1 and not not_caught_up
        if len(finals) < a.replicas:
            missing = sorted({f"r{i}" for i in range(a.replicas)} - set(finals))
            self.problems.append(f"no final state from {', '.join(missing)}")
        if not_caught_up:
            self.problems.append(f"{', '.join(not_caught_up)} had not caught up when the group finished")
        if len(set(hashes.values())) > 1:
            self.problems.append(f"final state hashes differ: {hashes}")
        committed = len(self.commit_time)
        wall = max(self.commit_time.values(), default=0.0)
        median = self.median_step()
        effective = min(1.0, committed * median / wall) if wall > 0 else 0.0
        samples = sum(self.n_contrib.values())
        ettr = samples * median / (a.replicas * wall) if wall > 0 else 0.0
        survived = [k for k in self.kills
                    if k.first_commit_after is not None and k.caught_up is not None
                    and hashes.get(k.victim) is not None and len(set(hashes.values())) == 1]
        for k in self.kills:
            if k.restarted is not None and k.caught_up is not None:
                lo, hi = k.restarted, k.caught_up + max(3 * median, 0.1)
                ts = sorted(t for t in self.commit_time.values() if lo - 1.0 <= t <= hi)
                gaps = [b - x for x, b in itertools.pairwise(ts) if b >= lo]
                k.join_stall_s = max(gaps) if gaps else None
        final_loss = next((d.get("eval_loss") for d in finals.values()), None)
        ok = identical and not self.problems
        kills_out = [{"number": k.number, "victim": k.victim, "t_s": round(k.t, 3), "after_step": k.step,
                      "stall_s": None if k.stall_s is None else round(k.stall_s, 4),
                      "extra_stall_s": None if k.stall_s is None else round(max(0.0, k.stall_s - median), 4),
                      "restarted_s": None if k.restarted is None else round(k.restarted, 3),
                      "ready_s": None if k.ready is None else round(k.ready, 3),
                      "joined_at_step": k.joined_step,
                      "caught_up_s": None if k.caught_up is None else round(k.caught_up, 3),
                      "heal_s": None if k.caught_up is None or k.restarted is None
                      else round(k.caught_up - k.restarted, 3),
                      "max_commit_gap_while_joining_s": None if k.join_stall_s is None else round(k.join_stall_s, 4)}
                     for k in self.kills]
        out = {
            "ok": ok, "replicas": a.replicas, "steps": a.steps, "steps_committed": committed,
            "aborts": len(self.aborts), "retries": sum(self.retries.values()),
            "kills_planned": None if math.isinf(self.kills_planned) else self.kills_planned,
            "kills": len(self.kills), "kills_survived": len(survived),
            "failure_schedule": ({"kind": "every", "kill_every_s": a.kill_every} if a.failure_mtbf is None else
                                 {"kind": "exponential", "mtbf_s": a.failure_mtbf, "seed": a.failure_seed}),
            "restart_delay_s": a.restart_delay, "compute_ms": a.compute_ms,
            "min_replicas": max(1, a.replicas - 1),
            "kill_details": kills_out,
            "training_wall_s": round(wall, 3), "median_healthy_step_s": round(median, 5),
            "effective_training_time": round(effective, 4),
            "lost_s": round(max(0.0, wall - committed * median), 3),
            "stall_total_s": round(sum(k.stall_s or 0.0 for k in self.kills), 3),
            "effective_training_time_definition": "steps_committed * median_healthy_step_s / training_wall_s, "
                                                  "capped at 1; healthy: consecutive commits with every replica "
                                                  "contributing; wall: from the go to the last commit",
            "samples_committed": samples, "ettr_samples": round(ettr, 4),
            "ettr_samples_definition": "sum over committed steps of n_contrib * median_healthy_step_s / (replicas * "
                                       "training_wall_s): a replica out costs 1/replicas, as in pymcoll.ftar.simulate",
            "commits": [[s, round(t, 4), self.n_contrib[s]] for s, t in sorted(self.commit_time.items())],
            "initial_loss": self.initial_loss, "final_loss": final_loss,
            "final_hashes": hashes, "hashes_identical": identical, "problems": self.problems,
            "runtime_s": round(time.monotonic() - self.t0, 3),
        }
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
        print("--- summary")
        print(f"steps committed   {committed}/{a.steps}, aborts {len(self.aborts)}, retries "
              f"{sum(self.retries.values())}")
        print(f"kills             {len(self.kills)} ({len(survived)} survived: the group went on and the "
              f"restarted replica caught up)")
        for k in kills_out:
            stall = "-" if k["stall_s"] is None else f"{k['stall_s']:.3f} s (extra {k['extra_stall_s']:.3f} s)"
            heal = "-" if k["heal_s"] is None else f"{k['heal_s']:.2f} s"
            print(f"  kill {k['number']}: {k['victim']} after step {k['after_step']}: stall {stall}, "
                  f"restart to caught up {heal}")
        print(f"effective training time {effective:.3f} = {committed} steps x {median:.4f} s (median healthy "
              f"step) / {wall:.2f} s (training wall time)")
        print(f"ETTR (samples)    {ettr:.3f} = {samples} samples x {median:.4f} s / ({a.replicas} replicas x "
              f"{wall:.2f} s): a step without a replica counts (replicas - 1) / replicas")
        print(f"time lost         {out['lost_s']:.2f} s, of which {out['stall_total_s']:.2f} s in the stalls around "
              f"the kills (the rest: slower steps)")
        loss0 = "-" if self.initial_loss is None else f"{self.initial_loss:.5f}"
        loss1 = "-" if final_loss is None else f"{final_loss:.5f}"
        print(f"eval loss         {loss0} -> {loss1}")
        verdict = (f"identical on all {len(hashes)} replicas" if identical
                   else "NOT identical" if hashes else "none reported")
        print(f"final state hash  {verdict} ({next(iter(hashes.values()))[:16] if hashes else '-'})")
        for p in self.problems:
            print(f"problem: {p}", file=sys.stderr)
        print(f"total runtime     {out['runtime_s']:.1f} s", flush=True)
        return 0 if ok else 1


def _positive(kind: type, name: str, allow_zero: bool = False) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a number") from None
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{name} {text!r} must be {'>= 0' if allow_zero else '> 0'}")
        return value
    return parse


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=_positive(int, "--replicas"), default=4,
                    help="replica processes (default 4)")
    ap.add_argument("--steps", type=_positive(int, "--steps"), default=800, help="steps to train (default 800)")
    ap.add_argument("--kill-every", type=_positive(float, "--kill-every"), default=None, metavar="SECONDS",
                    help="seconds of training between two kills (default 8)")
    ap.add_argument("--kills", type=_positive(int, "--kills", allow_zero=True), default=None,
                    help="replicas to kill in all (default 4; with --failure-mtbf: no limit)")
    ap.add_argument("--failure-mtbf", type=_positive(float, "--failure-mtbf"), default=None, metavar="SECONDS",
                    help="kill at random instead of every --kill-every: exponential gaps of this mean between "
                         "kills, each victim drawn from the replicas that are training")
    ap.add_argument("--failure-seed", type=int, default=0,
                    help="seed of the random kill times and victims (default 0)")
    ap.add_argument("--restart-delay", type=_positive(float, "--restart-delay", allow_zero=True), default=2.0,
                    metavar="SECONDS", help="restart a killed replica after this long (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the model and the data (default 0)")
    ap.add_argument("--compute-ms", type=_positive(float, "--compute-ms", allow_zero=True), default=50.0,
                    help="extra compute per step, simulated with a sleep (default 50)")
    ap.add_argument("--op-timeout", type=_positive(float, "--op-timeout"), default=10.0,
                    help="deadline of each FTAR operation in seconds (default 10)")
    ap.add_argument("--timeout", type=_positive(float, "--timeout"), default=300.0,
                    help="give up (and exit 2) after this many seconds (default 300)")
    ap.add_argument("--json", metavar="FILE", help="write the summary as JSON to FILE")
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument("--replica", type=int, default=None, help=argparse.SUPPRESS)       # internal: replica mode
    ap.add_argument("--coordinator", default="", help=argparse.SUPPRESS)              # internal
    ap.add_argument("--start-file", default="", help=argparse.SUPPRESS)              # internal: the go
    args = ap.parse_args(argv)

    if args.replica is not None:
        if not args.coordinator:
            ap.error("--replica needs --coordinator (it is started by the supervisor)")
        return run_replica(args)
    if args.replicas < 2:
        ap.error("--replicas must be at least 2 (a kill leaves the others training)")
    if args.kill_every is not None and args.failure_mtbf is not None:
        ap.error("--kill-every and --failure-mtbf are two schedules: give one")
    if args.kill_every is None:
        args.kill_every = 8.0
    if args.json and not Path(args.json).resolve().parent.is_dir():
        ap.error(f"--json {args.json}: its directory does not exist")

    sup = Supervisor(args)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stop)
    try:
        code = sup.run()
        if any("did not finish within --timeout" in p for p in sup.problems):
            code = 2
        return code
    except KeyboardInterrupt:
        sup._clear_live()
        print("interrupted: stopping every process", file=sys.stderr, flush=True)
        return 130
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        sup.cluster.close()


if __name__ == "__main__":
    sys.exit(main())
