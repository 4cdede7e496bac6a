"""pymcoll.testing finds planted bugs with minimal cases, reports hangs, and
passes against correct implementations (mpi4py's own collectives)."""

from __future__ import annotations

import json
import sys
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


@pytest.mark.parametrize("n", [1, 2, pytest.param(3, marks=pytest.mark.skipif(CI, reason="runs outside CI")), 4])
def test_passes_against_mpi4py(n: int) -> None:
    proc = run_mpi(n, "toolkit_check", "mpi4py", "--examples", ("8" if n > 2 else "15") if CI else "40",
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


# -- mpi4py's argument forms and the comparison with the wrapped communicator --------------------

FORM_FIELDS = ("spec", "counts_as", "displs_as", "dtype_as", "in_place_as", "ignored_as")


def test_vector_specs_are_written_in_each_of_mpi4pys_forms() -> None:
    from mpi4py import MPI

    from pymcoll.testing import stride_gaps, vector_spec

    buf = np.zeros(9, np.int32)
    counts, strided = [2, 2, 2], [0, 3, 6]

    def spec(**forms):
        case = Case("Allgatherv", 3, counts=(2, 2, 2), gaps=stride_gaps(counts, 3), **forms)
        return vector_spec(case, buf, counts, strided, "recvbuf")

    assert spec() == [buf, counts, strided, MPI.INT]
    assert spec(spec="pair", counts_as="int", displs_as="stride") == [buf, (2, 3), MPI.INT]
    assert spec(spec="pair", dtype_as="typecode") == [buf, (counts, strided), "i"]
    assert spec(spec="pair", dtype_as="none") == [buf, (counts, strided)]
    assert spec(dtype_as="none") == [buf, counts, strided, None]
    assert stride_gaps(counts, 3) == (0, 1, 1)
    packed = buf[:6]
    case = Case("Allgatherv", 3, counts=(2, 2, 2), spec="short", counts_as="none", displs_as="none")
    assert vector_spec(case, packed, counts, [0, 2, 4]) == [packed, MPI.INT]
    assert vector_spec(Case(**{**case.kwargs(), "dtype_as": "none"}), packed, counts, [0, 2, 4]) is packed
    case = Case("Allgatherv", 3, counts=(2, 2, 2), spec="short", displs_as="none", dtype_as="none")
    assert vector_spec(case, packed, counts, [0, 2, 4]) == [packed, counts]


def test_forms_that_do_not_fit_name_the_argument() -> None:
    from pymcoll.testing import vector_spec

    buf = np.zeros(8, np.int16)
    with pytest.raises(ValueError, match="counts_as"):
        vector_spec(Case("Gatherv", 2, counts=(1, 2), counts_as="int"), buf, [1, 2], [0, 1])
    with pytest.raises(ValueError, match="displs_as"):
        vector_spec(Case("Gatherv", 2, counts=(1, 2), displs_as="stride"), buf, [1, 2], [1, 3])
    with pytest.raises(ValueError, match="displs_as"):
        vector_spec(Case("Gatherv", 2, counts=(1, 2), displs_as="none"), buf, [1, 2], [0, 2])
    with pytest.raises(ValueError, match="counts_as"):
        vector_spec(Case("Gatherv", 2, counts=(2, 2), counts_as="none"), buf, [2, 2], [0, 2])
    with pytest.raises(ValueError, match="counts_as"):
        Case("Allgather", 2, count=1, counts_as="int")
    with pytest.raises(ValueError, match="in_place_as"):
        Case("Allreduce", 2, count=1, op="SUM", in_place_as="None")
    with pytest.raises(ValueError, match="ignored_as"):
        Case("Allgather", 2, count=1, ignored_as="buffer")
    with pytest.raises(ValueError, match="spec"):
        Case("Scatterv", 2, counts=(1, 1), spec="short")
    with pytest.raises(ValueError, match="counts_as"):
        Case("Reduce_scatter", 2, counts=(1, 1), op="SUM", in_place=True, counts_as="none")
    with pytest.raises(ValueError, match="dtype_as"):
        Case("Scatterv", 2, counts=(1, 1), dtype_as="MPI.INT")


def _forms_seen(cases_: list) -> dict:
    seen: dict = {}
    for c in cases_:
        for name in FORM_FIELDS:
            seen.setdefault((c.collective, name), set()).add(getattr(c, name))
    return seen


def _every_form(coll: str) -> dict:
    from pymcoll.testing.case import (COUNTS_FORMS, DISPLS_FORMS, DTYPE_FORMS, IGNORED_FORMS, IGNORED_OFF_ROOT,
                                      IN_PLACE_FORMS, SPEC_SHAPES, VECTOR_SPEC)

    want = {"in_place_as": set(IN_PLACE_FORMS)}
    if coll in VECTOR_SPEC:
        want.update(spec=set(SPEC_SHAPES), counts_as=set(COUNTS_FORMS), displs_as=set(DISPLS_FORMS),
                    dtype_as=set(DTYPE_FORMS))
    if coll == "Reduce_scatter":
        want["counts_as"] = {"list", "none"}
    if coll in IGNORED_OFF_ROOT:
        want["ignored_as"] = set(IGNORED_FORMS)
    return want


@pytest.mark.parametrize("coll", ["Scatterv", "Gatherv", "Allgatherv", "Alltoallv", "Reduce_scatter", "Reduce",
                                  "Scatter", "Allgather"])
def test_every_form_is_drawn_and_every_drawn_case_builds_on_every_rank(coll: str) -> None:
    from hypothesis import HealthCheck, given, settings

    from pymcoll.testing import build, cases

    size, drawn = 3, []

    @settings(max_examples=150, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases(coll, size, max_bytes=64, spec_forms=True))
    def draw(case: Case) -> None:
        drawn.append(case)
        for rank in range(size):  # raises where a drawn form does not fit the drawn layout
            build(case, rank)

    draw()
    seen = _forms_seen(drawn)
    for name, values in _every_form(coll).items():
        assert seen[(coll, name)] == values, (name, seen[(coll, name)])

    plain: list = []

    @settings(max_examples=30, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases(coll, size, max_bytes=64))
    def draw_plain(case: Case) -> None:
        plain.append(case)

    draw_plain()
    assert all(getattr(c, name) == Case.__dataclass_fields__[name].default for c in plain for name in FORM_FIELDS)


@pytest.mark.parametrize("coll", ["Scatterv", "Gatherv", "Allgatherv", "Alltoallv", "Reduce_scatter", "Gather",
                                  "Reduce", "Scan"])
def test_coverage_cases_take_every_form(coll: str) -> None:
    from pymcoll.testing import build
    from pymcoll.testing.strategies import coverage_cases

    plain = coverage_cases(coll, 3)
    covered = coverage_cases(coll, 3, spec_forms=True)
    assert len(covered) == len(plain)  # the forms ride on the cases there are
    assert all(getattr(c, name) == Case.__dataclass_fields__[name].default for c in plain for name in FORM_FIELDS)
    seen = _forms_seen(covered)
    for name, values in _every_form(coll).items():
        assert seen[(coll, name)] == values, (name, seen[(coll, name)])
    few = coverage_cases(coll, 3, dtypes=["int32"], spec_forms=True)  # more forms than dtypes: more cases
    assert _forms_seen(few) == seen
    for case in covered + few:
        for rank in range(3):
            build(case, rank)


def test_run_case_compares_with_the_wrapped_communicator() -> None:
    from mpi4py import MPI

    from pymcoll.testing import check, run_case

    class FlipsAByte(MPI.Intracomm):
        """A communicator whose Allgatherv changes the first byte of the receive buffer."""

        def Allgatherv(self, sendbuf, recvbuf):  # noqa: N802
            super().Allgatherv(sendbuf, recvbuf)
            np.asarray(recvbuf[0] if isinstance(recvbuf, list) else recvbuf).view(np.uint8)[0] ^= 1

    class RejectsPairs:
        """Raises for [buf, (counts, displs), datatype] receive specs."""

        def Allgatherv(self, sendbuf, recvbuf):  # noqa: N802
            if isinstance(recvbuf, list) and isinstance(recvbuf[1], tuple):
                raise ValueError("recvbuf: no pairs here")
            MPI.COMM_SELF.Allgatherv(sendbuf, recvbuf)

    case = Case("Allgatherv", 1, dtype="int16", counts=(3,), gaps=(2,), seed=5, spec="pair", dtype_as="typecode")
    assert run_case(MPI.COMM_SELF, case, 0, wrapped=MPI.COMM_SELF) is None
    msg = run_case(MPI.COMM_SELF, case, 0, wrapped=FlipsAByte(MPI.COMM_SELF))
    assert msg is not None and "element 0 (byte 0) of the receive buffer" in msg, msg  # a gap: the oracle agrees
    msg = run_case(RejectsPairs(), case, 0, wrapped=MPI.COMM_SELF)
    assert msg is not None and "no pairs here" in msg and "accepted the same arguments" in msg, msg
    # Floating-point reductions are left to the oracle: their rounding depends on the order.
    sums = Case("Allreduce", 1, dtype="float64", count=3, op="SUM", in_place=True, in_place_as="None", seed=1)
    assert run_case(MPI.COMM_SELF, sums, 0, wrapped=MPI.COMM_SELF) is None
    with pytest.raises(ValueError, match="compare_wrapped"):
        check(MPI.COMM_SELF, MPI.COMM_SELF, ["Allgatherv"], compare_wrapped=True)


def test_report_counts_examples_left_to_the_oracle_by_a_known_mpi_defect(monkeypatch) -> None:
    from mpi4py import MPI

    from pymcoll.testing import check

    check_module = sys.modules["pymcoll.testing.check"]  # the package's `check` is the function

    class Wraps:
        """An implementation that wraps COMM_SELF, as a pymcoll.Comm wraps its communicator."""

        mpi = MPI.COMM_SELF

        def __getattr__(self, name):
            return getattr(MPI.COMM_SELF, name)

    # Every in-place case counts as hitting a defect of the wrapped MPI.
    planted = "planted: the wrapped MPI would abort here"
    monkeypatch.setattr(check_module, "wrapped_defect", lambda case: planted if case.in_place else None)
    report = check(Wraps(), MPI.COMM_SELF, ["Reduce_scatter"], max_examples=30, compare_wrapped=True)
    assert report.ok, str(report)
    assert set(report.not_compared) == {planted} and 0 < report.not_compared[planted] <= 30 + 100, report
    assert f"not compared with the wrapped MPI in {report.not_compared[planted]} example(s)" in str(report)
    monkeypatch.setattr(check_module, "wrapped_defect", lambda case: None)
    assert check(Wraps(), MPI.COMM_SELF, ["Reduce_scatter"], max_examples=5, compare_wrapped=True).not_compared == {}


def test_clone_gives_the_same_arguments_in_fresh_memory() -> None:
    from pymcoll.testing import build
    from pymcoll.testing.execute import clone

    case = Case("Alltoallv", 2, dtype="longdouble", counts=(1, 2, 2, 3), gaps=(0, 1) * 4, seed=7,
                spec="pair", dtype_as="typecode")
    bufs = build(case, 1)
    ref = clone(bufs)
    for a, b in zip(bufs.memory(), ref.memory()):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.tobytes() == b.tobytes() and not np.shares_memory(a, b)
    send, recv = ref.args
    assert send[0] is ref.send and np.shares_memory(recv[0], ref.backing) and recv[1] == bufs.args[1][1]
    assert recv[2] == "g"
    scatter = build(Case("Scatter", 2, count=3, in_place=True, root=0, seed=1), 0)
    again = clone(scatter)
    assert again.root_send_in_place is again.send and again.args[0] is again.send
