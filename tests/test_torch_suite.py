"""torch's own torch.distributed test suite, run against the "pymcoll" backend.

The suite (``DistributedTest._DistTestBase``, 285 tests in torch 2.13) ships inside the torch
wheel the test command installs from the package index; nothing of it is kept here. The runner
(mpi_programs/torch_suite.py) gives every test a fresh process group on mpiexec's ranks.

The suite decides per backend name what to run (CUDA, DDP, timeouts, sparse tensors, which
collectives), and it knows gloo, NCCL, UCC and MPI by name. pymcoll replaces them on the CPU, so
it runs under two of those names, its groups on pymcoll either way:

- as gloo, torch's CPU backend: beside torch's own gloo run of the same tests (the reference),
  pymcoll must pass every test gloo passes and skip exactly what gloo skips;
- as MPI at 3 ranks (the size torch's suite assumes for MPI): the tests torch keeps to MPI
  (all_to_all on CPU tensors, the subgroup forms of the collectives), which gloo's run skips.

A test may fail only where the suite checks a backend's identity rather than behaviour
(``EXPECTED``); each such failure must say exactly that, and a listed test that starts to pass is
an error here too, so the list cannot go stale.

CI runs both names at their first size, gloo's own run left out (it takes as long again); the
other sizes carry the ``slow`` marker and compare with gloo's run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import expecttest  # noqa: F401 - torch's test helpers need it; the test extra installs it, missing must fail here
import torch  # noqa: F401 - the test command installs the CPU build; missing torch must fail here

from conftest import CI
from suite_runs import run_suite, verdicts

#: Tests that check a backend's identity: (what the failure must say on some rank, why).
_NAME = ("String comparison failed: 'pymcoll' != '{name}'", "the suite asserts the default group's backend name")
_MONITORED = ("monitored_barrier is only implemented for GLOO backend",
              "torch implements monitored_barrier on its gloo backend only")
EXPECTED = {
    "gloo": {
        "test_get_backend": _NAME,
        "test_monitored_barrier_gloo": _MONITORED,
        "test_monitored_barrier_gloo_subgroup": _MONITORED,
        # The group's own method, called directly: pymcoll's says so too.
        "test_monitored_barrier_gloo_rank_0_timeout": ("torch implements monitored_barrier on its gloo backend only",
                                                       _MONITORED[1]),
    },
    "mpi": {"test_get_backend": _NAME},
}
# Seconds for a whole run: 285 tests in about 45 s at 2 ranks, most of them skipped at once.
TIMEOUT = 600


def _run(n: int, backend: str, suite_backend: str, out: Path) -> dict:
    program = [sys.executable, "-m", "mpi_programs.torch_suite", str(out), "--backend", backend,
               "--as", suite_backend]
    # No PYMCOLL_TIMEOUT: the groups' deadlines are the suite's own (torch's timeout=, 60 s unless a
    # test sets one), so a rank left waiting by another's failure errs instead of hanging.
    return run_suite(n, program, out, {}, TIMEOUT)


def _test_name(tid: str) -> str:
    return tid.rsplit(".", 1)[-1]


def _check(result: dict, suite_backend: str) -> dict[str, str]:
    """pymcoll's verdicts; asserts that only the expected tests fail, each for its expected reason."""
    ours = verdicts(result)
    expected = EXPECTED[suite_backend]
    bad = {tid: v for tid, v in ours.items() if v not in ("pass", "skip")}
    unexpected = {tid: v for tid, v in bad.items() if _test_name(tid) not in expected}
    assert not unexpected, "\n\n".join(f"{tid}: {v}\n{result['details'].get(tid, '')}"
                                       for tid, v in sorted(unexpected.items()))
    for tid, v in ours.items():
        name = _test_name(tid)
        if name not in expected:
            continue
        says, why = expected[name]
        says = says.format(name=suite_backend)
        assert v in ("fail", "error"), f"{name} now {v}s as {suite_backend} ({why}): update EXPECTED"
        assert says in result["details"].get(tid, ""), (f"{name} failed for another reason than {why!r}:\n"
                                                        f"{result['details'].get(tid, '')}")
    return ours


def _counts(verdict: dict[str, str]) -> str:
    return ", ".join(f"{sum(1 for v in verdict.values() if v == k)} {k}" for k in ("pass", "skip", "fail", "error"))


GLOO_SIZES = [pytest.param(2, id="np2")] + [
    pytest.param(n, id=f"np{n}", marks=[pytest.mark.slow, pytest.mark.skipif(CI, reason="runs outside CI (slow marker)")])
    for n in (3, 4)]
MPI_SIZES = [pytest.param(3, id="np3")] + [
    pytest.param(4, id="np4", marks=[pytest.mark.slow, pytest.mark.skipif(CI, reason="runs outside CI (slow marker)")])]


@pytest.mark.parametrize("n", GLOO_SIZES)
def test_torch_suite_as_gloo(n: int, tmp_path: Path) -> None:
    """pymcoll under gloo's name passes what torch's gloo passes, and skips what it skips (in CI
    without gloo's own run, which takes as long again: every test it runs must pass but EXPECTED)."""
    ours = _check(_run(n, "pymcoll", "gloo", tmp_path / "pymcoll"), "gloo")
    if CI:
        print(f"\ntorch suite at {n} ranks as gloo: pymcoll {_counts(ours)}")
        return
    reference = verdicts(_run(n, "gloo", "gloo", tmp_path / "gloo"))
    print(f"\ntorch suite at {n} ranks as gloo: pymcoll {_counts(ours)}; gloo {_counts(reference)}")
    assert set(ours) == set(reference), sorted(set(ours) ^ set(reference))
    differ = {tid: (reference[tid], ours[tid]) for tid in ours if (ours[tid] == "skip") != (reference[tid] == "skip")}
    assert not differ, f"skips differ from gloo's (gloo, pymcoll): {differ}"
    lost = sorted(_test_name(tid) for tid, v in reference.items()
                  if v == "pass" and ours[tid] != "pass" and _test_name(tid) not in EXPECTED["gloo"])
    assert not lost, f"gloo passes, pymcoll does not: {lost}"


@pytest.mark.parametrize("n", MPI_SIZES)
def test_torch_suite_as_mpi(n: int, tmp_path: Path) -> None:
    """pymcoll under MPI's name passes the tests torch keeps to MPI (no MPI backend in torch's CPU wheel
    to compare with: every test it runs must pass)."""
    ours = _check(_run(n, "pymcoll", "mpi", tmp_path / "pymcoll"), "mpi")
    print(f"\ntorch suite at {n} ranks as MPI: pymcoll {_counts(ours)}")
    names = {_test_name(tid) for tid, v in ours.items() if v == "pass"}
    # What this name adds over gloo's: torch's CPU all_to_all tests and the subgroup forms.
    for must in ("test_all_to_all_single_unequal_split", "test_all_to_all_group", "test_all_reduce_group_sum",
                 "test_scatter_group"):
        assert must in names, f"{must} did not pass as MPI: {ours.get('__main__.TestDistBackend.' + must)}"
