"""pymcoll.testing finds planted bugs with minimal cases, reports hangs, and
passes against correct implementations (mpi4py's own collectives)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conftest import CI, run_mpi

from pymcoll.testing import Case, expected, reduce_arrays


def failures_of(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def only_failure(n: int, bug: str) -> dict:
    proc = run_mpi(n, "planted_bugs", bug, "--examples", "60" if CI else "100", timeout=300)
    found = failures_of(proc.stdout)
    assert "REPORT ok=False failures=1" in proc.stdout, proc.stdout
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("n", [2, 3])
def test_finds_off_by_one_just_above_the_threshold(n: int) -> None:
    f = only_failure(n, "off_by_one")
    case = f["case"]
    nbytes = case["count"] * np.dtype(case["dtype"]).itemsize
    assert f["collective"] == "Allgather"
    assert 4096 < nbytes <= 4096 + np.dtype(case["dtype"]).itemsize, case


@pytest.mark.parametrize("n", [2, 3])
def test_finds_wrong_root(n: int) -> None:
    f = only_failure(n, "wrong_root")
    assert f["case"]["root"] == 1 and f["case"]["count"] == 1, f["case"]


@pytest.mark.parametrize("n", [2, 3])
def test_finds_mishandled_in_place(n: int) -> None:
    f = only_failure(n, "in_place")
    assert f["case"]["in_place"] is True and f["case"]["count"] == 1, f["case"]


@pytest.mark.parametrize("n", [2, 3])
def test_finds_reduction_in_narrow_precision(n: int) -> None:
    f = only_failure(n, "precision")
    assert f["case"]["dtype"] == "float64" and f["case"]["count"] == 1, f["case"]
    assert "precision" in f["message"]


@pytest.mark.parametrize("n", [2, 3])
def test_finds_write_past_the_receive_region(n: int) -> None:
    f = only_failure(n, "write_past")
    assert f["case"]["count"] == 0 and "outside the receive buffer" in f["message"], f


@pytest.mark.parametrize("n", [2, 3])
def test_finds_barrier_that_does_not_wait(n: int) -> None:
    f = only_failure(n, "barrier")
    assert "left the Barrier" in f["message"]


@pytest.mark.parametrize("n", [2, 3])
def test_hang_is_reported_by_the_watchdog_within_the_deadline(n: int) -> None:
    t0 = time.monotonic()
    proc = run_mpi(n, "planted_bugs", "hang", "--deadline", "5", timeout=120, check=False)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert "HANG: Bcast [world]" in proc.stderr and "count=7" in proc.stderr, proc.stderr[-3000:]
    assert elapsed < 5 + 20, f"{elapsed:.1f} s"


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_passes_against_mpi4py(n: int) -> None:
    proc = run_mpi(n, "toolkit_check", "mpi4py", "--examples", "15" if CI else "40",
                   "--layouts", "world,halves,reversed,all-but-first" if n > 1 else "world", timeout=600)
    assert "all passed" in proc.stdout, proc.stdout


def test_reference_reductions_wrap_and_bound() -> None:
    a = np.array([100, -100], np.int8)
    got, tol = reduce_arrays("SUM", [a, a], "int8")
    assert tol is None and got.tolist() == [-56, 56]  # MPI reduces in the type: it wraps
    x = np.array([1e-8], np.float32)
    got, tol = reduce_arrays("SUM", [np.array([1.0], np.float32), x], "float32")
    assert tol is not None and abs(float(got[0]) - (1.0 + 1e-8)) < 1e-12


def test_oracle_marks_gaps_untouched_and_undefined_results() -> None:
    case = Case("Gatherv", 2, dtype="int16", counts=(2, 1), gaps=(1, 2), root=0, seed=3)
    exp = expected(case, 0)
    assert exp.values.size == 1 + 2 + 2 + 1
    assert exp.values.view(np.uint8)[:2].tolist() == [0xA5, 0xA5]  # the gap keeps the sentinel
    ex = expected(Case("Exscan", 3, dtype="int32", count=4, op="SUM", seed=1), 0)
    assert not ex.checked.any()  # rank 0 of Exscan: undefined


def test_pytest_fixture_passes_a_correct_implementation(mpi_check) -> None:
    from conftest import TESTS_DIR, mpi_env

    result = mpi_check(2, "mpi4py", collectives=["Bcast", "Allreduce"], examples=10,
                       env=mpi_env(), cwd=str(TESTS_DIR), timeout=300)
    result.assert_ok()
    assert result.examples["Bcast[world]"] >= 10  # drawn examples, plus one per dtype


def test_pytest_fixture_reports_a_planted_bug(mpi_check) -> None:
    from conftest import TESTS_DIR, mpi_env

    result = mpi_check(3, "mpi_programs.planted_bugs:wrong_root", collectives=["Bcast"], examples=50,
                       env=mpi_env(), cwd=str(TESTS_DIR), timeout=300)
    assert not result.ok and result.returncode == 1
    assert result.failures[0]["case"]["root"] == 1
    with pytest.raises(pytest.fail.Exception, match="reproduce: pymcoll.testing.run_case"):
        result.assert_ok()


def test_nonblocking_forms_are_checked_and_waited_on() -> None:
    names = "Ibarrier,Ibcast,Iscatterv,Igatherv,Iallgatherv,Ialltoallv,Ireduce,Iallreduce,Ireduce_scatter,Iscan,Iexscan"
    proc = run_mpi(3, "toolkit_check", "mpi4py", "--examples", "10", "--collectives", names, timeout=300)
    assert "all passed" in proc.stdout and "Ialltoallv[world]" in proc.stdout, proc.stdout


def test_pymcoll_under_virtual_node_layouts() -> None:
    proc = run_mpi(4, "toolkit_check", "pymcoll", "--examples", "10", "--collectives", "Barrier,Bcast,Allgather",
                   "--layouts", "world,nodes-of-2,nodes-of-3,halves", timeout=300)
    assert "all passed" in proc.stdout and "Allgather[nodes-of-3]" in proc.stdout, proc.stdout


def test_explicit_examples_run_first_and_a_failing_one_is_reported_as_it_is() -> None:
    from hypothesis import strategies as st
    from mpi4py import MPI

    from pymcoll.testing.runner import Watchdog, run_property

    seen: list[int] = []

    def body(x: int) -> str | None:
        seen.append(x)
        return "bad" if x == 7 else None

    watchdog = Watchdog(0, 0)  # no deadline: no thread
    found = run_property(st.integers(0, 3), body, MPI.COMM_SELF, label="t", max_examples=5, watchdog=watchdog,
                         explicit=[5, 7, 9])
    assert found is not None and found.case == 7 and found.first_case == 7 and found.messages == ["bad"]
    assert seen == [5, 7]  # stops at the failing one, before any drawn example
    seen.clear()
    assert run_property(st.integers(0, 3), body, MPI.COMM_SELF, label="t", max_examples=5, watchdog=watchdog,
                        explicit=[5, 9]) is None
    assert seen[:2] == [5, 9] and len(seen) > 2 and all(0 <= x <= 3 for x in seen[2:])
