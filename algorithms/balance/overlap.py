"""The embedding exchange overlapped with compute: chunks in order of need, on a progress thread.

A step's samples are cut into chunks; each chunk's rows are fetched by the embedding exchange
(forward), computed on, and their gradients sent back (backward). A :class:`ProgressThread`
owns every collective of the step and runs them in one fixed order on all ranks (see
:func:`schedule`): the forward exchange of the chunk compute needs next always goes before the
backward of one already computed, at most `lookahead` chunks ahead. The compute thread only
waits when a chunk's rows are not there yet, so a step takes about max(compute, communication)
instead of their sum.

Without a progress thread (``progress=None``) the same operations run inline in the same order,
so a model trains to bit-identical weights with and without overlap.

The CPU analogue of communicating without taking compute units: the progress thread is pinned
to a CPU of its own where the host has one per rank to spare (:func:`plan_cpus`), and torch's
compute threads to the others.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch


def plan_cpus(local_rank: int, local_size: int, threads: int,
              available: Optional[Sequence[int]] = None) -> tuple[list[int], list[int], bool]:
    """(compute CPUs, progress CPUs, separate) for one rank of `local_size` on this host.

    With at least local_size * (threads + 1) CPUs, each rank gets `threads` compute CPUs and one
    for its progress thread (separate=True). Otherwise the host's CPUs are shared out for compute
    and the progress thread runs on its rank's compute CPUs (separate=False): it mostly waits,
    and leaving it there keeps it off the other ranks' CPUs.
    """
    if local_size < 1 or not 0 <= local_rank < local_size:
        raise ValueError(f"local_rank={local_rank}, local_size={local_size}: 0 <= local_rank < local_size")
    if threads < 1:
        raise ValueError(f"threads={threads}: at least 1 compute thread")
    cpus = sorted(os.sched_getaffinity(0) if available is None else available)
    if not cpus:
        raise ValueError("available: no CPU to run on")
    if len(cpus) >= local_size * (threads + 1):
        base = local_rank * (threads + 1)
        return cpus[base:base + threads], [cpus[base + threads]], True
    per = max(len(cpus) // local_size, 1)
    start = (local_rank * per) % len(cpus)
    compute = [cpus[(start + i) % len(cpus)] for i in range(min(per, threads))]
    return compute, list(compute), False


class ProgressThread:
    """A thread that owns communication: runs submitted calls one at a time, in submission order.

    Submitting collectives in the same order on every rank keeps them matched. `cpus`: pin the
    thread there (Linux; None: leave it). Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, cpus: Optional[Sequence[int]] = None, name: str = "pymcoll-progress") -> None:
        self._queue: queue.SimpleQueue[Optional[tuple[Future, Callable[..., Any], tuple]]] = queue.SimpleQueue()
        self.cpus = list(cpus) if cpus else None
        self.busy_s = 0.0  # seconds spent running calls
        self.native_id: Optional[int] = None
        self._ready = threading.Event()
        self._pin_error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._pin_error is not None:
            self.close()
            raise ValueError(f"cpus={self.cpus}: cannot pin the progress thread there "
                             f"({self._pin_error}); give CPUs this process may use") from self._pin_error

    def _run(self) -> None:
        self.native_id = threading.get_native_id()
        if self.cpus is not None:
            try:
                os.sched_setaffinity(0, self.cpus)  # on Linux, 0 is this thread only
            except OSError as exc:
                self._pin_error = exc
        self._ready.set()
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            t0 = time.perf_counter()
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                fut.set_exception(exc)
            finally:
                self.busy_s += time.perf_counter() - t0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queues ``fn(*args)``; its result (or exception) arrives in the returned future."""
        if not self._thread.is_alive():
            raise RuntimeError("ProgressThread.submit: the thread was closed")
        fut: Future = Future()
        self._queue.put((fut, fn, args))
        return fut

    def close(self) -> None:
        """Runs what was submitted, then stops the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> "ProgressThread":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def schedule(chunks: int, lookahead: int = 1) -> list[tuple[str, int]]:
    """The order of a step's exchanges: ("forward", k) fetches chunk k's rows, ("backward", k)
    returns their gradients. Forwards go up to `lookahead` chunks ahead of compute; each
    backward follows as soon as its chunk is computed, before the next forward is queued."""
    if chunks < 0 or lookahead < 0:
        raise ValueError(f"chunks={chunks}, lookahead={lookahead}: both 0 or more")
    order = [("forward", k) for k in range(min(lookahead + 1, chunks))]
    for k in range(chunks):
        order.append(("backward", k))
        if k + lookahead + 1 < chunks:
            order.append(("forward", k + lookahead + 1))
    return order


@dataclass
class PipelineTimes:
    """One step of :class:`OverlappedStep`: seconds computing (compute thread busy), stalled
    (compute thread waiting for rows) and communicating (the exchanges' own time; comm_cpu of it
    on a CPU: what the exchanges take from compute when they share its CPU)."""

    compute: float = 0.0
    stall: float = 0.0
    comm: float = 0.0
    comm_cpu: float = 0.0  # CPU seconds of the thread running the exchanges, within comm
    order: tuple[tuple[str, int], ...] = ()


class OverlappedStep:
    """The chunked, prioritized exchange of one training step.

    `embed(chunk) -> rows` runs the forward exchange of a chunk (a collective; autograd records
    its backward exchange); `progress`: the thread that owns communication, or None to run
    everything inline in the same order; `lookahead`: forwards queued ahead of compute.
    """

    def __init__(self, embed: Callable[[Any], torch.Tensor], progress: Optional[ProgressThread] = None,
                 lookahead: int = 1) -> None:
        if lookahead < 0:
            raise ValueError(f"lookahead={lookahead}: 0 or more chunks ahead")
        self.embed, self.progress, self.lookahead = embed, progress, int(lookahead)

    def run(self, chunks: Sequence[Any], consume: Callable[[int, Any, torch.Tensor], None]) -> PipelineTimes:
        """Calls consume(k, chunk, rows) for every chunk in order: rows is a leaf that requires grad;
        consume computes and calls backward, and rows.grad goes back through the exchange.
        Every rank must pass the same number of chunks (empty ones allowed)."""
        times = PipelineTimes()
        done: list[tuple[str, int]] = []
        fetched: dict[int, Any] = {}
        outs: dict[int, torch.Tensor] = {}
        pending: list[Future] = []

        def forward(k: int) -> torch.Tensor:
            t0, c0 = time.perf_counter(), time.thread_time()
            out = self.embed(chunks[k])
            outs[k] = out
            done.append(("forward", k))
            times.comm += time.perf_counter() - t0
            times.comm_cpu += time.thread_time() - c0
            return out

        def backward(k: int, grad: torch.Tensor) -> None:
            t0, c0 = time.perf_counter(), time.thread_time()
            outs.pop(k).backward(grad)
            done.append(("backward", k))
            times.comm += time.perf_counter() - t0
            times.comm_cpu += time.thread_time() - c0

        def issue(op: str, k: int, *args: Any) -> None:
            fn = forward if op == "forward" else backward
            if self.progress is None:
                if op == "forward":
                    fetched[k] = forward(k)
                else:
                    backward(k, *args)
                return
            fut = self.progress.submit(fn, k, *args)
            if op == "forward":
                fetched[k] = fut
            pending.append(fut)

        try:
            for k in range(min(self.lookahead + 1, len(chunks))):
                issue("forward", k)
            for k, chunk in enumerate(chunks):
                got = fetched[k]
                if isinstance(got, Future):
                    t0 = time.perf_counter()
                    got = got.result()
                    times.stall += time.perf_counter() - t0
                t0 = time.perf_counter()
                rows = got.detach().requires_grad_(True)
                consume(k, chunk, rows)
                grad = rows.grad if rows.grad is not None else torch.zeros_like(rows)
                times.compute += time.perf_counter() - t0
                issue("backward", k, grad)
                if k + self.lookahead + 1 < len(chunks):
                    issue("forward", k + self.lookahead + 1)
        finally:
            if pending:
                t0 = time.perf_counter()
                for fut in pending:
                    fut.exception()  # wait for all, even after an error, so no exchange is left running
                times.stall += time.perf_counter() - t0
        for fut in pending:
            fut.result()  # raises the first exchange's error, if any
        times.order = tuple(done)
        return times
