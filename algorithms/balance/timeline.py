"""Where each rank's training step goes: computing, waiting at a synchronization (the bubble), communicating.

Every synchronization (a collective all ranks enter) is recorded on each rank as the time it
arrived and the time it left. After the run, ranks exchange their records; at synchronization
k the last rank to arrive sets the start of the communication, so rank r waited

    wait(r, k) = max_j arrived(j, k) - arrived(r, k)

and the collective itself took ``left(r, k) - max_j arrived(j, k)``. Everything else in a step is
computing. Times are ``time.perf_counter()`` seconds (CLOCK_MONOTONIC, one clock per host);
:meth:`Timeline.align` measures each rank's offset to rank 0 after a barrier, so that hosts'
clocks can be compared to within the barrier's exit skew (microseconds on one host).

A timeline exports as a Chrome trace (chrome://tracing, Perfetto): one process per rank, slices
"compute", "wait <sync>" and "<sync>"; collectives run by another thread (a progress thread
overlapping compute) on a track of their own, and not taken out of the compute time.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np


@dataclass
class Sync:
    """One synchronization as this rank saw it."""

    name: str
    step: int
    arrived: float
    left: float
    thread: int = 0  # 0: the main thread; 1: another (a progress thread, overlapping compute)


@dataclass
class StepTimes:
    """Seconds of one rank over the steps recorded: computing, waiting (bubble), communicating."""

    compute: float = 0.0
    wait: float = 0.0
    comm: float = 0.0
    steps: int = 0
    waits_by_sync: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"compute_s": self.compute, "wait_s": self.wait, "comm_s": self.comm, "steps": self.steps,
                "wait_by_sync_s": dict(self.waits_by_sync)}


class Timeline:
    """Records steps and synchronizations of one rank.

    Use ``with tl.step(): ...`` around each training step and ``with tl.sync("allreduce"): ...``
    around each collective (or pass :meth:`observe` as an embedding exchange's ``observer``).
    Every rank must record the same synchronizations in the same order.
    """

    def __init__(self, rank: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.rank = int(rank)
        self.clock = clock
        self.offset = 0.0  # this rank's clock minus rank 0's (see align)
        self.syncs: list[Sync] = []
        self.steps: list[tuple[float, float]] = []
        self._step_start: Optional[float] = None

    @property
    def step_index(self) -> int:
        return len(self.steps)

    @contextmanager
    def step(self) -> Iterator[None]:
        """Marks one training step (nesting is an error)."""
        if self._step_start is not None:
            raise RuntimeError("Timeline.step: a step is already open; close it before the next")
        self._step_start = self.clock()
        try:
            yield
        finally:
            self.steps.append((self._step_start, self.clock()))
            self._step_start = None

    @contextmanager
    def sync(self, name: str) -> Iterator[None]:
        """Marks a collective: arrival before the body, departure after it."""
        arrived = self.clock()
        try:
            yield
        finally:
            self.observe(name, arrived, self.clock())

    def observe(self, name: str, arrived: float, left: float) -> None:
        """Records a synchronization timed by the caller (an exchange's observer)."""
        if self._step_start is None:
            return  # outside recorded steps (warm-up, evaluation)
        thread = 0 if threading.current_thread() is threading.main_thread() else 1
        self.syncs.append(Sync(name, len(self.steps), arrived, left, thread))

    def align(self, comm: Any) -> None:
        """Measures this rank's clock offset to rank 0 (a collective: comm is an mpi4py communicator)."""
        comm.Barrier()
        comm.Barrier()  # the second exit is the closer to simultaneous: everyone was already awake
        now = self.clock()
        zero = comm.bcast(now if comm.rank == 0 else None, root=0)
        self.offset = now - zero

    def clear(self) -> None:
        self.syncs.clear()
        self.steps.clear()

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "offset": self.offset, "steps": [list(s) for s in self.steps],
                "syncs": [[s.name, s.step, s.arrived, s.left, s.thread] for s in self.syncs]}


def _records(doc: Union[Timeline, dict[str, Any]]) -> dict[str, Any]:
    return doc.to_dict() if isinstance(doc, Timeline) else doc


def analyze(timelines: list[Union[Timeline, dict[str, Any]]]) -> list[StepTimes]:
    """Per rank (in the order given, rank order): compute, wait and communication seconds.

    `timelines`: every rank's :class:`Timeline` or its ``to_dict()`` (gathered, e.g. with
    ``comm.allgather(tl.to_dict())``). Raises ValueError when ranks recorded different
    synchronizations, which means they did not run the same collectives.
    """
    docs = [_records(t) for t in timelines]
    if not docs:
        return []
    names = [[(s[0], s[1]) for s in d["syncs"]] for d in docs]
    for r, n in enumerate(names[1:], start=1):
        if n != names[0]:
            raise ValueError(f"timelines: rank {r} recorded {len(n)} synchronizations and rank 0 {len(names[0])}, "
                             "or in another order; every rank must record the same collectives")
    arrived = np.array([[s[2] - d["offset"] for s in d["syncs"]] for d in docs]).reshape(len(docs), -1)
    left = np.array([[s[3] - d["offset"] for s in d["syncs"]] for d in docs]).reshape(len(docs), -1)
    last = arrived.max(axis=0) if arrived.size else np.zeros(0)
    out = []
    for r, d in enumerate(docs):
        wait = np.maximum(last - arrived[r], 0.0)
        comm = np.maximum(left[r] - np.maximum(last, arrived[r]), 0.0)
        main = np.array([len(s) < 5 or s[4] == 0 for s in d["syncs"]], dtype=bool)
        total = sum(b - a for a, b in d["steps"])
        t = StepTimes(wait=float(wait.sum()), comm=float(comm.sum()), steps=len(d["steps"]))
        # Syncs on another thread overlap the main thread's compute: not taken out of it.
        t.compute = max(total - float(wait[main].sum()) - float(comm[main].sum()), 0.0)
        for (name, _), w in zip(names[0], wait, strict=True):
            t.waits_by_sync[name] = t.waits_by_sync.get(name, 0.0) + float(w)
        out.append(t)
    return out


def chrome_trace(timelines: list[Union[Timeline, dict[str, Any]]]) -> dict[str, Any]:
    """A Chrome trace-event document: per rank, step, compute, wait and collective slices (us)."""
    docs = [_records(t) for t in timelines]
    if not docs:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    t0 = min(d["steps"][0][0] - d["offset"] for d in docs if d["steps"]) if any(d["steps"] for d in docs) else 0.0
    arrived = [[s[2] - d["offset"] for s in d["syncs"]] for d in docs]
    last = np.max(np.array(arrived), axis=0) if arrived and arrived[0] else []
    events: list[dict[str, Any]] = []

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 3)

    def slice_(pid: int, tid: int, name: str, a: float, b: float, cat: str) -> None:
        if b > a:
            events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": us(a),
                           "dur": round((b - a) * 1e6, 3)})

    for d in docs:
        pid, off = int(d["rank"]), d["offset"]
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"rank {pid}"}})
        for k, (a, b) in enumerate(d["steps"]):
            slice_(pid, 0, f"step {k}", a - off, b - off, "step")
        by_step: dict[int, list[tuple[str, float, float, float]]] = {}
        for i, (name, step, a, b, *thread) in enumerate(d["syncs"]):
            if thread and thread[0] != 0:  # a progress thread's exchange: its own track
                slice_(pid, 2, f"wait {name}", a - off, max(float(last[i]), a - off), "wait")
                slice_(pid, 2, name, max(float(last[i]), a - off), b - off, "comm")
                continue
            by_step.setdefault(step, []).append((name, a - off, float(last[i]), b - off))
        for k, (a, b) in enumerate(d["steps"]):
            at = a - off
            for name, arrive, start, leave in by_step.get(k, []):
                slice_(pid, 1, "compute", at, arrive, "compute")
                slice_(pid, 1, f"wait {name}", arrive, max(start, arrive), "wait")
                slice_(pid, 1, name, max(start, arrive), leave, "comm")
                at = leave
            slice_(pid, 1, "compute", at, b - off, "compute")
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(timelines: list[Union[Timeline, dict[str, Any]]], path: Union[str, Path]) -> Path:
    """Writes :func:`chrome_trace` as JSON to `path` and returns it."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(timelines)))
    return path
