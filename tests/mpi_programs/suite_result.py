"""Outcomes of a public test suite run under mpiexec: one per test and rank, logged as the tests go.

Shared by the runners of mpi4py's suite (mpi4py_suite.py) and torch's (torch_suite.py).
"""

from __future__ import annotations

import json
import time
import unittest
from typing import Any

#: From best to worst; a test's outcome is the worst any of its parts reported.
ORDER = ("pass", "skip", "xfail", "upass", "missing", "fail", "error")


class Outcomes(unittest.TestResult):
    """Records one outcome per test (subtests fold into their test) and logs each test's start and
    end to `log` as JSON lines, so that a hang names its test."""

    def __init__(self, log: Any) -> None:
        super().__init__()
        self.outcomes: dict[str, str] = {}
        self.details: dict[str, str] = {}
        self._log = log
        self._t0 = 0.0

    def _set(self, test: Any, outcome: str, detail: str = "") -> None:
        tid = test.id()
        old = self.outcomes.get(tid)
        if old is None or ORDER.index(outcome) > ORDER.index(old):
            self.outcomes[tid] = outcome
            if detail:
                self.details[tid] = detail[-3000:]

    def startTest(self, test: Any) -> None:  # noqa: N802 - unittest API
        super().startTest(test)
        self._t0 = time.perf_counter()
        self._log.write(json.dumps({"start": test.id()}) + "\n")
        self._log.flush()

    def stopTest(self, test: Any) -> None:  # noqa: N802 - unittest API
        super().stopTest(test)
        tid = test.id()
        self.outcomes.setdefault(tid, "pass")
        self._log.write(json.dumps({"done": tid, "outcome": self.outcomes[tid],
                                    "seconds": round(time.perf_counter() - self._t0, 4)}) + "\n")
        self._log.flush()

    def addError(self, test: Any, err: Any) -> None:  # noqa: N802
        self._set(test, "error", self._exc_info_to_string(err, test))

    def addFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self._set(test, "fail", self._exc_info_to_string(err, test))

    def addSkip(self, test: Any, reason: str) -> None:  # noqa: N802
        self._set(test, "skip", reason)

    def addExpectedFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self._set(test, "xfail")

    def addUnexpectedSuccess(self, test: Any) -> None:  # noqa: N802
        self._set(test, "upass")

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:  # noqa: N802
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._set(test, "fail" if failed else "error",
                      f"{subtest.id()}\n{self._exc_info_to_string(err, test)}")


def print_summary(world: Any, outcomes: dict[str, str], details: dict[str, str], **per_rank: Any) -> None:
    """Gathers every rank's outcomes at rank 0, which prints one JSON line: per test id the outcome on
    each rank ("missing" where a rank has none), the details by rank, and each `per_rank` value as a
    list over the ranks."""
    everyone = world.gather((outcomes, details, per_rank), root=0)
    if world.Get_rank() != 0:
        return
    merged: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    for r, (outs, dets, _) in enumerate(everyone):
        for tid, outcome in outs.items():
            merged.setdefault(tid, ["missing"] * len(everyone))[r] = outcome
            if tid in dets:
                notes.setdefault(tid, []).append(f"[rank {r}] {dets[tid]}")
    doc = {"outcomes": merged, "details": {k: "\n".join(v) for k, v in notes.items()}}
    doc.update({key: [e[2][key] for e in everyone] for key in per_rank})
    print(json.dumps(doc), flush=True)
