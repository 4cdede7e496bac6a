"""Effective training time at scale: a discrete-event model of a training run under failures.

What a fault-tolerant allreduce buys depends on the job's scale: the more servers, the more
often one fails. This module simulates a training run of `Job` under a failure process
(`Failures`) with one of two recovery policies, and reports its effective training time ratio
(ETTR: the share of wall time spent on useful training at full strength).

**Synchronous** (`Synchronous`): every failure stops the whole job. It restarts (``restart_s``)
and resumes from the last checkpoint, so the work since that checkpoint is lost. Checkpoints are
taken every ``checkpoint_interval_s`` of wall time at work and block training for
``checkpoint_cost_s`` (interval 0: no checkpoint is modelled, and a failure loses no work, only
the restart: the form in which a fixed loss per failure is given).

**FT-HSDP** (`FTHSDP`): each data-parallel replica is the unit of failure. A failure in a
replica that is up stalls every replica for the quorum change (``stall_s``, plus the interrupted
step redone: uniform in [0, ``step_s``)); the others then go on at (R - k) / R of the job's
throughput while k replicas are out. The failed replica restarts (``restart_s``) and catches up
(``catchup_s``) before it counts again. With ``spares``, a spare replica takes the failed one's
place after ``spare_join_s`` and the failed replica's servers return to the pool of spares once
repaired (``restart_s``). With ``min_replicas`` above 1 (the coordinator's quorum minimum), the
job makes no progress while fewer replicas than that run (a replica runs again once restarted,
while it still catches up).

Failures that arrive during a recovery:

* Synchronous: a failure during the restart starts the restart again (the job has to be
  rescheduled once more); a failure while the lost work is redone is an ordinary failure (the
  job rolls back to the same checkpoint).
* FT-HSDP: a failure while the replicas stall joins the quorum change under way: it neither
  starts nor lengthens a stall, but its replica goes out as any failed replica does. A failure
  of a replica that is already out restarts that replica's recovery. A replica whose recovery
  is under way counts as out in every respect.

The failure process is the job's: failures arrive as a renewal process with exponential or
Weibull inter-arrival times of mean `Failures.mtbf_s` (or ``per_server_day`` x the job's servers
per day), each on a server drawn uniformly; with ``rack_fraction``, that share of failures takes
the failed server's whole rack (``servers_per_rack`` consecutive servers; replicas hold
consecutive servers, so a rack can span two replicas).

`simulate` runs the discrete-event model; `closed_form` gives the same model's expected ETTR for
exponential failures (fixed recovery times), `first_order` the accounting of one failure rate
times one cost per failure, which ignores failures that arrive during a recovery. The docs page
on FTAR explains why the three differ.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import numpy as np

__all__ = ["Job", "Failures", "Synchronous", "FTHSDP", "Result", "simulate", "closed_form", "first_order",
           "paper_inputs", "DAY_S"]

DAY_S = 86400.0


def _positive(value: float, name: str, *, zero: bool = False) -> float:
    """`value` as a float that is > 0 (>= 0 with `zero`), else a ValueError naming `name`."""
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise ValueError(f"{name}={value!r}: expected a finite number {'>=' if zero else '>'} 0")
    return v


def _count(value: int, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    return int(value)


def _check_checkpoints(interval_s: float, cost_s: float) -> None:
    _positive(interval_s, "checkpoint_interval_s", zero=True)
    _positive(cost_s, "checkpoint_cost_s", zero=True)
    if cost_s > 0 and interval_s == 0:
        raise ValueError("checkpoint_cost_s > 0 needs checkpoint_interval_s > 0 (how often checkpoints are taken)")


@dataclass(frozen=True)
class Job:
    """The training job: its GPUs, how they sit on servers and racks, its replicas.

    Args:
        gpus: GPUs of the whole job.
        gpus_per_server: GPUs per server (a server fails as a whole).
        replicas: data-parallel replicas; each holds ``gpus / replicas`` GPUs on consecutive servers.
        step_s: time of one training step (the interrupted step is redone after a stall).
        servers_per_rack: servers per rack, for correlated rack failures.
    """

    gpus: int = 100_000
    gpus_per_server: int = 8
    replicas: int = 12
    step_s: float = 0.0
    servers_per_rack: int = 16

    def __post_init__(self) -> None:
        _count(self.gpus, "gpus")
        _count(self.gpus_per_server, "gpus_per_server")
        _count(self.replicas, "replicas")
        _positive(self.step_s, "step_s", zero=True)
        _count(self.servers_per_rack, "servers_per_rack")
        if self.replicas > self.servers:
            raise ValueError(f"replicas={self.replicas} exceeds the job's {self.servers} servers "
                             f"(gpus={self.gpus} / gpus_per_server={self.gpus_per_server}); a replica "
                             f"needs at least one server")

    @property
    def servers(self) -> int:
        """Servers of the job (the last one may be partly used)."""
        return -(-self.gpus // self.gpus_per_server)


@dataclass(frozen=True)
class Failures:
    """The job's failure process.

    Args:
        mtbf_s: mean time between failures of the whole job, in seconds; or
        per_server_day: failures per server and day (the job's rate grows with its servers).
        distribution: "exponential" (a Poisson process) or "weibull" (renewal process with
            Weibull inter-arrival times of the same mean).
        weibull_shape: the Weibull shape k (k < 1: failures come in bursts).
        rack_fraction: share of failures that take the failed server's whole rack.
    """

    mtbf_s: Optional[float] = None
    per_server_day: Optional[float] = None
    distribution: str = "exponential"
    weibull_shape: float = 0.7
    rack_fraction: float = 0.0

    def __post_init__(self) -> None:
        if (self.mtbf_s is None) == (self.per_server_day is None):
            raise ValueError("Failures: give exactly one of mtbf_s (the job's mean time between failures) "
                             "and per_server_day (failures per server and day)")
        if self.mtbf_s is not None:
            _positive(self.mtbf_s, "mtbf_s")
        if self.per_server_day is not None:
            _positive(self.per_server_day, "per_server_day")
        if self.distribution not in ("exponential", "weibull"):
            raise ValueError(f"distribution={self.distribution!r}: expected 'exponential' or 'weibull'")
        _positive(self.weibull_shape, "weibull_shape")
        if not 0.0 <= float(self.rack_fraction) <= 1.0:
            raise ValueError(f"rack_fraction={self.rack_fraction!r}: expected a share between 0 and 1")

    def job_mtbf_s(self, job: Job) -> float:
        """The mean time between failures of `job`, in seconds."""
        if self.mtbf_s is not None:
            return float(self.mtbf_s)
        return DAY_S / (float(self.per_server_day) * job.servers)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Synchronous:
    """Recovery of a fully synchronous job: restart everything, resume from the last checkpoint.

    Args:
        restart_s: from a failure until the job trains again (reschedule, reload).
        checkpoint_interval_s: wall time at work between checkpoints (0: none modelled and no
            work lost; the loss per failure is then `restart_s` alone).
        checkpoint_cost_s: time a checkpoint blocks training.
    """

    restart_s: float = 600.0
    checkpoint_interval_s: float = 0.0
    checkpoint_cost_s: float = 0.0
    name: str = field(default="synchronous", init=False)

    def __post_init__(self) -> None:
        _positive(self.restart_s, "restart_s", zero=True)
        _check_checkpoints(self.checkpoint_interval_s, self.checkpoint_cost_s)


@dataclass(frozen=True)
class FTHSDP:
    """Recovery with each replica as the unit of failure (fault-tolerant allreduce, catch-up).

    Args:
        stall_s: the quorum change after a failure: every replica waits this long.
        restart_s: until the failed replica's processes run again (or, with spares, until its
            servers are back in the pool of spares).
        catchup_s: until the restarted replica has fetched the state and counts again.
        spares: spare replicas ready to take a failed one's place.
        spare_join_s: until a spare counts (default: `catchup_s`).
        checkpoint_interval_s: wall time between checkpoints (0: none); a checkpoint blocks
            training for `checkpoint_cost_s` and nothing rolls back to it.
        checkpoint_cost_s: time a checkpoint blocks training.
        restart_drag: share of their throughput the other replicas lose while a replica
            restarts (per restarting replica): hosts shared between replicas, as in a run on one
            machine; 0 where every replica has hosts of its own.
        min_replicas: the quorum minimum: while fewer replicas run (a replica runs again once
            restarted, catching up or not), no step is taken. 1: the others always go on.
    """

    stall_s: float = 180.0
    restart_s: float = 420.0
    catchup_s: float = 0.0
    spares: int = 0
    spare_join_s: Optional[float] = None
    checkpoint_interval_s: float = 0.0
    checkpoint_cost_s: float = 0.0
    restart_drag: float = 0.0
    min_replicas: int = 1
    name: str = field(default="ft-hsdp", init=False)

    def __post_init__(self) -> None:
        _positive(self.stall_s, "stall_s", zero=True)
        _positive(self.restart_s, "restart_s", zero=True)
        _positive(self.catchup_s, "catchup_s", zero=True)
        _count(self.spares, "spares", 0)
        _count(self.min_replicas, "min_replicas")
        if not 0.0 <= float(self.restart_drag) <= 1.0:
            raise ValueError(f"restart_drag={self.restart_drag!r}: expected a share between 0 and 1")
        if self.spare_join_s is not None:
            _positive(self.spare_join_s, "spare_join_s", zero=True)
        _check_checkpoints(self.checkpoint_interval_s, self.checkpoint_cost_s)

    @property
    def out_s(self) -> float:
        """How long a failed replica is out without a spare: restart plus catch-up."""
        return self.restart_s + self.catchup_s

    @property
    def join_s(self) -> float:
        """How long a spare takes to count."""
        return self.catchup_s if self.spare_join_s is None else float(self.spare_join_s)


Policy = Union[Synchronous, FTHSDP]


@dataclass(frozen=True)
class Result:
    """What a simulated run gives.

    Attributes:
        policy: "synchronous" or "ft-hsdp".
        ettr: useful training time at full strength / wall time.
        closed_form: the model's expected ETTR for exponential failures (None where it has none:
            Weibull arrivals, rack failures, a quorum minimum above one replica).
        first_order: 1 - (failure rate x cost per failure) - checkpoint overhead.
        days: simulated wall time, in days.
        failures: failures that arrived.
        stall_per_failure_s: time the whole job made no progress, per failure (synchronous: the
            restarts and the work lost; FT-HSDP: the stalls).
        reduced_fraction: share of wall time trained at reduced strength (a replica out).
        throughput_retention: useful time / time the job was training (not stalled, not
            restarting): the strength it kept while it ran.
        checkpoint_overhead: share of the training time a checkpoint schedule takes.
    """

    policy: str
    ettr: float
    closed_form: Optional[float]
    first_order: float
    days: float
    failures: int
    stall_per_failure_s: float
    reduced_fraction: float
    throughput_retention: float
    checkpoint_overhead: float


def _arrivals(job: Job, failures: Failures, rng: np.random.Generator, chunk: int = 1 << 16) -> Iterator[float]:
    """Failure times from 0 on, without end."""
    mean = failures.job_mtbf_s(job)
    if failures.distribution == "weibull":
        k = float(failures.weibull_shape)
        scale = mean / math.gamma(1.0 + 1.0 / k)
    t = 0.0
    while True:
        if failures.distribution == "weibull":
            gaps = rng.weibull(k, chunk) * scale
        else:
            gaps = rng.exponential(mean, chunk)
        times = t + np.cumsum(gaps)
        t = float(times[-1])
        yield from times.tolist()


def _checkpoint_share(policy: Policy) -> float:
    """Share of the training time a checkpointing policy spends in checkpoints."""
    if policy.checkpoint_interval_s <= 0:
        return 0.0
    return policy.checkpoint_cost_s / (policy.checkpoint_interval_s + policy.checkpoint_cost_s)


def _sync(job: Job, failures: Failures, policy: Synchronous, horizon: float, rng: np.random.Generator) -> Result:
    work = policy.checkpoint_interval_s
    segment = work + policy.checkpoint_cost_s if work > 0 else 0.0
    restart = policy.restart_s
    arrivals = _arrivals(job, failures, rng)
    t = useful = progress = lost = down = checkpoints = 0.0
    n = 0
    f = next(arrivals)
    while t < horizon:
        end = min(f, horizon)
        if segment > 0:
            done = progress + (end - t)
            k = math.floor(done / segment)
            useful += k * work
            checkpoints += k * policy.checkpoint_cost_s
            progress = done - k * segment
        else:
            useful += end - t
        t = end
        if t >= horizon:
            break
        n += 1
        lost += progress  # back to the last checkpoint
        progress = 0.0
        f = next(arrivals)
        while f < t + restart and f < horizon:  # a failure during the restart starts it again
            n += 1
            down += f - t
            t = f
            f = next(arrivals)
        down += restart
        t += restart
    if t > horizon:
        down -= t - horizon
    ran = horizon - down
    return Result(
        policy=policy.name, ettr=useful / horizon, closed_form=closed_form(job, failures, policy),
        first_order=first_order(job, failures, policy), days=horizon / DAY_S, failures=n,
        stall_per_failure_s=(down + lost) / n if n else 0.0, reduced_fraction=0.0,
        throughput_retention=useful / (ran - lost) if ran - lost > 0 else 0.0,
        checkpoint_overhead=_checkpoint_share(policy))


def _ft(job: Job, failures: Failures, policy: FTHSDP, horizon: float, rng: np.random.Generator) -> Result:
    R, servers = job.replicas, job.servers
    rack = job.servers_per_rack
    rack_fraction = float(failures.rack_fraction)
    out_s, join_s, repair_s = policy.out_s, policy.join_s, policy.restart_s
    step_s, stall_s = job.step_s, policy.stall_s
    arrivals = _arrivals(job, failures, rng)
    back: list[tuple[float, int, int]] = []     # (time the replica counts again, replica, version)
    version = [0] * R
    until = [0.0] * R                           # > now: the replica is out until then
    repairs: list[float] = []                   # times failed servers return to the pool of spares
    pool = policy.spares
    drag = float(policy.restart_drag)
    restarting: list[float] = []                # when each restart under way ends (with a drag)
    # The quorum minimum: replicas whose processes do not run, and when each runs again.
    min_up = policy.min_replicas
    absent: list[tuple[float, int, int]] = []   # (time the replica runs again, replica, version)
    absent_version = [0] * R
    runs_at = [0.0] * R
    nabsent = 0
    ndown = 0
    stall_until = 0.0
    t = useful = stalled = reduced = 0.0
    n = 0

    def run(a: float, b: float) -> None:
        # Integrate [a, b) with `ndown` replicas out; the part before stall_until makes no progress.
        nonlocal useful, stalled, reduced
        if R - nabsent < min_up:  # too few replicas for a quorum: nobody steps
            stalled += b - a
            return
        free = b - max(a, stall_until)
        if free < 0.0:
            free = 0.0
        stalled += (b - a) - free
        strength = max(0.0, 1.0 - drag * len(restarting)) if restarting else 1.0
        if ndown:
            reduced += free
            useful += free * strength * (R - ndown) / R
        else:
            useful += free * strength

    def advance(to: float) -> None:
        nonlocal t, ndown, pool, nabsent
        while True:
            up_at = back[0][0] if back else math.inf
            restarted_at = restarting[0] if restarting else math.inf
            runs_again = absent[0][0] if absent else math.inf
            when = min(up_at, restarted_at, runs_again)
            if when > to:
                break
            run(t, when)
            t = when
            if up_at == when:
                _, r, v = heapq.heappop(back)
                if v == version[r]:  # else superseded by a later failure of the same replica
                    ndown -= 1
            elif restarted_at == when:
                heapq.heappop(restarting)
            else:
                _, r, v = heapq.heappop(absent)
                if v == absent_version[r]:
                    nabsent -= 1
        while repairs and repairs[0] <= to:
            heapq.heappop(repairs)
            pool += 1
        run(t, to)
        t = to

    def fail_replica(r: int, now: float) -> bool:
        """Takes replica r out at `now`; True when it was up."""
        nonlocal ndown, pool, nabsent
        was_up = until[r] <= now
        if was_up:
            ndown += 1
        spare = pool > 0 and was_up
        if spare:
            pool -= 1
            heapq.heappush(repairs, now + repair_s)
            ready = now + join_s
        else:
            ready = now + out_s
        if not was_up:
            ready = max(ready, until[r])
        if drag > 0 and repair_s > 0:
            heapq.heappush(restarting, now + repair_s)
        if min_up > 1 and not spare:
            # Its processes run again after the restart (a spare takes its place at once instead).
            if runs_at[r] <= now:
                nabsent += 1
            runs_at[r] = now + repair_s
            absent_version[r] += 1
            heapq.heappush(absent, (runs_at[r], r, absent_version[r]))
        version[r] += 1
        until[r] = ready
        heapq.heappush(back, (ready, r, version[r]))
        return was_up

    for f in arrivals:
        if f >= horizon:
            break
        advance(f)
        n += 1
        server = int(rng.integers(servers))
        if rack_fraction > 0 and rng.random() < rack_fraction:
            lo = server - server % rack
            hi = min(lo + rack, servers) - 1
            hit = range(lo * R // servers, hi * R // servers + 1)
        else:
            hit = range(server * R // servers, server * R // servers + 1)
        any_up = False
        for r in hit:
            any_up |= fail_replica(r, f)
        if any_up and f >= stall_until:
            stall_until = f + stall_s + (float(rng.random()) * step_s if step_s > 0 else 0.0)
    advance(horizon)
    share = _checkpoint_share(policy)
    ran = horizon - stalled
    return Result(
        policy=policy.name, ettr=useful * (1.0 - share) / horizon, closed_form=closed_form(job, failures, policy),
        first_order=first_order(job, failures, policy), days=horizon / DAY_S, failures=n,
        stall_per_failure_s=stalled / n if n else 0.0, reduced_fraction=reduced / horizon,
        throughput_retention=useful / ran if ran > 0 else 0.0, checkpoint_overhead=share)


def simulate(job: Job, failures: Failures, policy: Policy, *, days: float = 1000.0, seed: int = 0) -> Result:
    """Simulates `days` of wall time of `job` under `failures`, recovering by `policy`.

    The same `seed` gives the same failure times for every policy and job with the same failure
    rate (common random numbers), so that policies compare on equal terms.
    """
    if not isinstance(job, Job):
        raise TypeError(f"job: expected a pymcoll.ftar.simulate.Job, got {type(job).__name__}")
    if not isinstance(failures, Failures):
        raise TypeError(f"failures: expected a pymcoll.ftar.simulate.Failures, got {type(failures).__name__}")
    horizon = _positive(days, "days") * DAY_S
    rng = np.random.default_rng(seed)
    if isinstance(policy, Synchronous):
        return _sync(job, failures, policy, horizon, rng)
    if isinstance(policy, FTHSDP):
        if policy.min_replicas > job.replicas:
            raise ValueError(f"min_replicas={policy.min_replicas} exceeds the job's replicas={job.replicas}")
        return _ft(job, failures, policy, horizon, rng)
    raise TypeError(f"policy: expected Synchronous(...) or FTHSDP(...), got {type(policy).__name__}")


def first_order(job: Job, failures: Failures, policy: Policy) -> float:
    """The first-order accounting: 1 - rate x cost per failure - checkpoint overhead.

    The cost of a failure is what it takes when it is the only one: synchronous, the restart
    plus half a checkpoint interval of lost work; FT-HSDP, the stall plus half a step redone plus
    the replica's time out over R (no spare) plus the restart's drag on the others; where one
    replica out leaves too few for a quorum, the restart stops everyone instead."""
    rate = 1.0 / failures.job_mtbf_s(job)
    share = _checkpoint_share(policy)
    if isinstance(policy, Synchronous):
        segment = policy.checkpoint_interval_s + policy.checkpoint_cost_s if policy.checkpoint_interval_s > 0 else 0
        cost = policy.restart_s + segment / 2.0
    else:
        R = job.replicas
        if policy.min_replicas >= R and policy.spares == 0:
            cost = max(policy.stall_s, policy.restart_s) + job.step_s / 2.0 + policy.catchup_s / R
        else:
            cost = (policy.stall_s + job.step_s / 2.0 + policy.out_s / R
                    + policy.restart_drag * policy.restart_s * (R - 1) / R)
    return 1.0 - rate * cost - share


def _poisson_below(k: int, mean: float) -> float:
    """P(N < k) for N ~ Poisson(mean)."""
    term = math.exp(-mean)
    total = 0.0
    for i in range(k):
        total += term
        term *= mean / (i + 1)
    return total


def closed_form(job: Job, failures: Failures, policy: Policy) -> Optional[float]:
    """The expected ETTR of the simulated model for exponential failures and fixed recovery
    times; None for Weibull arrivals, rack failures or a quorum minimum above one replica, which
    it does not cover.

    Synchronous: a segment of `work` plus a checkpoint completes with probability e^{-rate x
    segment}; each failure costs a restart that must itself see no failure, which takes
    (e^{rate x restart} - 1) / rate on average: ETTR = work x rate / ((e^{rate x segment} - 1)
    e^{rate x restart}); without checkpoints, e^{-rate x restart}.

    FT-HSDP: each replica alternates between up (failures reach it at rate / R) and out for
    `out` after a failure, a failure while out starting its recovery again: it is out a share
    d = 1 - e^{-rate x out / R} of the time, for (e^{rate out / R} - 1) / (rate / R) per failure.
    Failures of up replicas arrive at rate' = rate (1 - d). Stalls alternate with
    stall-free periods: a stall starts at the first of those failures outside a stall and lasts
    S = stall + step / 2, so the stalled share is s = rate' S / (1 + rate' S). A replica out
    costs 1 / R of the throughput while no stall runs; a failure that starts a stall is out
    through that stall first, one that joins a stall through the rest of it (uniform), and from
    the stall's end the stalls start afresh, started by the other R - 1 replicas only (rate'
    (R - 1) / R): g(x), the stall-free time in x from a stall's end, follows from the renewal
    equation p(v) = rate'' x (stall-free time in (v - S, v]) for the probability p(v) of a
    stall at v, integrated numerically. ETTR = (1 - s - rate' / R x
    ((1 - s) g(T - S) + s E[g(T - U)])) (1 - checkpoint share), T the mean time out.
    With spares, a failed replica is out for the spare's join time while a spare is free: the
    servers in repair are taken as Poisson with mean rate' x restart. A restart drag takes
    drag x (R - 1) / R x (1 - d) of the throughput (the others' share) for the stall-free part of
    every restart.
    """
    if failures.distribution != "exponential" or failures.rack_fraction > 0:
        return None
    if isinstance(policy, FTHSDP) and policy.min_replicas > 1:
        return None
    rate = 1.0 / failures.job_mtbf_s(job)
    if isinstance(policy, Synchronous):
        if policy.checkpoint_interval_s <= 0:
            return math.exp(-rate * policy.restart_s)
        segment = policy.checkpoint_interval_s + policy.checkpoint_cost_s
        return (policy.checkpoint_interval_s * rate
                / (math.expm1(rate * segment) * math.exp(rate * policy.restart_s)))
    R = job.replicas
    mu = rate / R
    spans = [(1.0, policy.out_s)]
    if policy.spares > 0:
        up_rate = rate * math.exp(-mu * policy.out_s)
        free = _poisson_below(policy.spares, up_rate * policy.restart_s)
        spans = [(free, policy.join_s), (1.0 - free, policy.out_s)]
    d = sum(w * -math.expm1(-mu * t) for w, t in spans)
    up_rate = rate * (1.0 - d)
    stall = policy.stall_s + job.step_s / 2.0
    s = up_rate * stall / (1.0 + up_rate * stall)
    # While a replica is out, only the other R - 1 can start a stall.
    others = up_rate * (R - 1) / R
    lost = 0.0
    for w, t in spans:
        if w <= 0:
            continue
        mean_out = math.expm1(mu * t) / mu if mu * t > 0 else t
        u = (np.arange(64) + 0.5) / 64.0 * stall
        g = _stall_free(others, stall, np.concatenate(([mean_out - stall], mean_out - u)))
        lost += w * ((1.0 - s) * g[0] + s * float(np.mean(g[1:])))
    ettr = 1.0 - s - up_rate / R * lost
    if policy.restart_drag > 0 and policy.restart_s > 0:
        # Every failure restarts a replica; its restart drags the others outside the stalls.
        u = (np.arange(64) + 0.5) / 64.0 * stall
        g = _stall_free(others, stall, np.concatenate(([policy.restart_s - stall], policy.restart_s - u)))
        strength = (R - 1) / R * (1.0 - d)  # the others' share while the restarting replica is out
        ettr -= policy.restart_drag * rate * strength * ((1.0 - s) * g[0] + s * float(np.mean(g[1:])))
    return ettr * (1.0 - _checkpoint_share(policy))


def _stall_free(rate: float, stall: float, xs: np.ndarray, steps: int = 20000) -> np.ndarray:
    """g(x) for each x of `xs`: the expected stall-free time in [0, x) after a stall ends, when
    stalls of length `stall` start at the first failure (rate `rate`) outside a stall."""
    xs = np.asarray(xs, dtype=float)
    if stall <= 0 or rate <= 0:
        return np.clip(xs, 0.0, None)
    # p(v) settles to the stationary share within a few cycles; beyond, time adds at (1 - s).
    end = min(float(xs.max(initial=0.0)), 30.0 * (1.0 / rate + stall))
    if end <= 0:
        return np.zeros_like(xs)
    h = end / steps
    lag = max(1, int(round(stall / h)))
    q = np.empty(steps + 1)
    free = np.zeros(steps + 2)  # free[i]: stall-free time in [0, i h)
    for i in range(steps + 1):
        p = rate * (free[i] - free[max(0, i - lag)])
        q[i] = 1.0 - min(1.0, p)
        free[i + 1] = free[i] + h * q[i]
    s = rate * stall / (1.0 + rate * stall)
    grid = np.arange(steps + 2) * h
    inside = np.interp(np.clip(xs, 0.0, end), grid, free)
    return np.where(xs <= 0, 0.0, inside + np.clip(xs - end, 0.0, None) * (1.0 - s))


def paper_inputs() -> tuple[Job, Failures, Synchronous, FTHSDP]:
    """FT-HSDP's setting: about 100,000 GPUs, a failure every 18 minutes; synchronous training
    loses 10 minutes per failure; with 12 replicas, a failure stalls everyone 3 minutes and keeps
    the failed replica out 7 minutes."""
    job = Job(gpus=100_000, gpus_per_server=8, replicas=12, step_s=0.0)
    return (job, Failures(mtbf_s=18 * 60.0), Synchronous(restart_s=600.0),
            FTHSDP(stall_s=180.0, restart_s=420.0, catchup_s=0.0))
