"""Hypothesis made safe under MPI.

Every rank runs the same derandomized example sequence; after each example
the ranks agree on its verdict over a private communicator before any rank
asserts, so all ranks pass, fail and shrink in lock step. A collective that
hangs cannot be cancelled: a watchdog thread gives each example a deadline,
prints the example that hung on every rank that can still print, and aborts
the job.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st
from mpi4py import MPI

HANG_EXIT = 75  # exit status of a job the watchdog aborted


class Watchdog:
    """A per-example deadline that aborts the MPI job when it passes."""

    def __init__(self, deadline: float, rank: int, grace: float = 1.0) -> None:
        self.deadline = deadline
        self.rank = rank
        self.grace = grace
        self._lock = threading.Lock()
        self._armed: Optional[tuple[str, Any, float]] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pymcoll-testing-watchdog", daemon=True)
        if deadline > 0:
            self._thread.start()

    def arm(self, label: str, case: Any) -> None:
        """Start the clock for one example."""
        with self._lock:
            self._armed = (label, case, time.monotonic() + self.deadline)

    def disarm(self) -> None:
        """The example finished."""
        with self._lock:
            self._armed = None

    def stop(self) -> None:
        """End the watchdog thread."""
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                armed = self._armed
            if armed is None or time.monotonic() < armed[2]:
                continue
            label, case, _ = armed
            print(f"pymcoll.testing: HANG: {label} did not finish within {self.deadline:g} s on rank "
                  f"{self.rank}; the example (not shrunk): {case!r}; aborting the job",
                  file=sys.stderr, flush=True)
            time.sleep(self.grace)  # let the other ranks' watchdogs speak too
            try:
                MPI.COMM_WORLD.Abort(HANG_EXIT)
            finally:
                os._exit(HANG_EXIT)


@dataclass
class FoundFailure:
    """A failing example: the minimal one found and the first one seen."""

    case: Any
    messages: list[Optional[str]]          # per rank of the verdict communicator
    first_case: Any = None
    first_messages: list[Optional[str]] = field(default_factory=list)


_SEEDS: dict[Any, int] = {}


def _derandomized_seed(test: Any) -> Optional[int]:
    """The seed hypothesis gives a derandomized `test`: a digest of its source,
    which hypothesis reads and tokenizes again on every run (a good part of a
    short property's time under MPI); computed here once per function body.
    None where this hypothesis does not expose what it takes."""
    inner = getattr(getattr(test, "hypothesis", None), "inner_test", None)
    if inner is None or not hasattr(inner, "__code__"):
        return None
    if inner.__code__ not in _SEEDS:
        try:
            from hypothesis.internal.reflection import function_digest
        except ImportError:  # pragma: no cover - depends on the hypothesis version
            return None
        _SEEDS[inner.__code__] = int.from_bytes(function_digest(inner), "big")
    return _SEEDS[inner.__code__]


class RanksDisagree(RuntimeError):
    """Ranks drew different examples: the strategy depends on rank-local values."""


def run_property(strategy: st.SearchStrategy, body: Callable[[Any], Optional[str]], comm: MPI.Comm, *,
                 label: str, max_examples: int, watchdog: Watchdog,
                 explicit: Sequence[Any] = ()) -> Optional[FoundFailure]:
    """Run `body` over examples of `strategy` on every rank of `comm`.

    body(example) returns None when this rank's part is right, else a message;
    exceptions it raises count as failures. Returns None when every example
    passed on every rank, else the failure (identical on every rank). Never
    raises for a failing example. `explicit` examples run first, unshrunk.
    """
    def agree(drawn: Any) -> None:
        seen = comm.allgather(repr(drawn))
        if len(set(seen)) != 1:
            raise RanksDisagree(f"{label}: ranks drew different examples {seen}; strategies may only "
                                "depend on values every rank agrees on")

    def verdict(case: Any, drawn: bool = True) -> Optional[list[Optional[str]]]:
        """Run one example everywhere; the messages of every rank when any failed, else None."""
        if drawn:
            agree(case)
        # The deadline covers the verdict too: a rank whose peer hangs waits there.
        watchdog.arm(label, case)
        try:
            msg = body(case)
        except Exception as exc:  # noqa: BLE001 - a failure of the implementation, agreed below
            msg = f"{type(exc).__name__}: {exc}"
        messages = comm.allgather(msg)
        watchdog.disarm()
        return messages if any(m is not None for m in messages) else None

    # Explicit examples are never shrunk: they run in a plain loop, which costs a
    # fraction of hypothesis's per-example bookkeeping.
    explicit = list(explicit)
    if explicit:
        agree(explicit)  # once for the list, not per example
    for ex in explicit:
        messages = verdict(ex, drawn=False)
        if messages is not None:
            return FoundFailure(ex, messages, ex, messages)

    state: dict[str, Any] = {"last": None, "first": None}

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
              phases=[Phase.generate, Phase.shrink], report_multiple_bugs=False, print_blob=False)
    @given(case=strategy)
    def prop(case: Any) -> None:
        messages = verdict(case)
        if messages is not None:
            state["last"] = (case, messages)
            if state["first"] is None:
                state["first"] = (case, messages)
            raise AssertionError(f"{label} failed")

    fixed = _derandomized_seed(prop)
    if fixed is not None:
        # The seed derandomize would derive (same examples), without deriving it each time;
        # and no database key (there is no database), which hypothesis derives the same way.
        prop = seed(fixed)(prop)
        prop._hypothesis_internal_database_key = None  # type: ignore[attr-defined]

    try:
        prop()
    except RanksDisagree:
        raise
    except Exception:  # noqa: BLE001 - hypothesis re-raises the minimal failure (or Flaky)
        if state["last"] is None:
            raise
    if state["last"] is None:
        return None
    case, messages = state["last"]
    first_case, first_messages = state["first"]
    return FoundFailure(case, messages, first_case, first_messages)
