"""The collective trace end to end: faults injected at 4 ranks, dumps written
by the core, the analyzer's verdict checked; signals, bad settings, export."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import TESTS_DIR, mpi_env, run_mpi
from pymcoll.trace import analyze, export_chrome, load_dumps
from test_trace_analysis import EVENT_SCHEMA

FAULT_ENV = {"PYMCOLL_TIMEOUT": "2"}


def faulty_run(tmp_path: Path, mode: str, k: int, trace: bool = True) -> subprocess.CompletedProcess:
    env = dict(FAULT_ENV, PYMCOLL_TRACE=str(tmp_path) if trace else None)
    return run_mpi(4, "trace_faults", mode, str(k), env=env, timeout=240, check=False)


@pytest.mark.timeout(300)
def test_sleeping_rank_is_named_at_the_collective_it_missed(tmp_path: Path) -> None:
    proc = faulty_run(tmp_path, "sleep", 6)
    assert "timed out" in proc.stdout, proc.stdout + proc.stderr
    # The rank that timed out dumped, and signalled the sleeper, which dumped too.
    names = {p.name for p in tmp_path.iterdir()}
    assert "rank3.sigusr1.json" in names and any(n.endswith(".timeout.json") for n in names), names
    report = analyze(tmp_path)
    assert report.hangs, report.paragraph
    hang = report.hangs[0]
    assert (hang["seq"], hang["coll"]) == (6, "Allreduce"), hang
    assert hang["named"] == [3], hang
    assert "Rank 3" in report.paragraph and "#6" in report.paragraph, report.paragraph
    assert "Bcast #5" in report.paragraph and "no pymcoll collective" in report.paragraph, report.paragraph
    # What the waiting rank saw: it waited for rank 3.
    assert any(w["for_ranks"] == [3] for w in hang["waiting"]), hang["waiting"]


@pytest.mark.timeout(300)
def test_skipped_collective_is_named(tmp_path: Path) -> None:
    faulty_run(tmp_path, "skip", 7)
    report = analyze(tmp_path)
    (m,) = report.mismatches
    assert m["seq"] == 7 and m["coll"] == "Bcast", m
    assert [(d["rank"], d["kind"]) for d in m["deviants"]] == [(2, "skipped")], m
    assert "rank 2 skipped Bcast #7" in report.paragraph, report.paragraph


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode,call", [("coll", "Bcast(32 B, root 0)"), ("count", "Allreduce(40 B, float64, sum)")])
def test_different_call_at_the_same_number_is_named(tmp_path: Path, mode: str, call: str) -> None:
    faulty_run(tmp_path, mode, 6)
    report = analyze(tmp_path)
    (m,) = report.mismatches
    assert m["seq"] == 6, m
    assert m["majority"] == {"ranks": [0, 2, 3], "call": "Allreduce(32 B, float64, sum)"}, m
    assert [(d["rank"], d["kind"], d["call"]) for d in m["deviants"]] == [(1, "different", call)], m
    assert f"rank 1 called {call} at #6" in report.paragraph, report.paragraph


@pytest.mark.timeout(300)
def test_slow_rank_is_named_straggler_and_exports(tmp_path: Path) -> None:
    proc = faulty_run(tmp_path, "straggler", 0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = analyze(tmp_path)
    assert not report.hangs and not report.mismatches, report.paragraph
    assert report.stragglers["stragglers"] == [2], report.stragglers
    assert report.paragraph.startswith("Straggler: rank 2"), report.paragraph
    # The exported timeline of real dumps is valid Chrome trace JSON, one track per rank.
    out = tmp_path / "timeline.json"
    export_chrome(load_dumps(tmp_path), out)
    data = json.loads(out.read_text())
    jsonschema.validate(data, EVENT_SCHEMA)
    slices = [e for e in data["traceEvents"] if e["ph"] == "X" and e.get("cat") == "collective"]
    assert {e["pid"] for e in slices} == {0, 1, 2, 3}
    assert len(slices) == 4 * 12, len(slices)


@pytest.mark.timeout(300)
def test_clean_run_has_every_call_recorded(tmp_path: Path) -> None:
    proc = faulty_run(tmp_path, "clean", 0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace = load_dumps(tmp_path)
    assert sorted(trace.ranks) == [0, 1, 2, 3]
    report = analyze(trace)
    assert report.paragraph.startswith("No hang, mismatch or straggler found in 12 collectives"), report.paragraph
    dump = json.loads((tmp_path / "rank1.json").read_text())
    (comm,) = dump["comms"]
    recs = comm["records"]
    assert [r["seq"] for r in recs] == list(range(1, 13))
    assert all(r["status"] == "ok" and r["enqueue_ns"] <= r["start_ns"] <= r["end_ns"] for r in recs), recs
    assert {r["coll"] for r in recs} == {"Allreduce", "Bcast"}
    assert recs[1]["dtype"] == "float64" and recs[1]["op"] == "sum" and recs[0]["root"] == 0


@pytest.mark.timeout(300)
def test_without_trace_dir_a_signalled_rank_prints_what_it_did(tmp_path: Path) -> None:
    proc = faulty_run(tmp_path, "sleep", 6, trace=False)
    assert "pymcoll trace: rank 3" in proc.stderr and "SIGUSR1" in proc.stderr, proc.stderr
    assert "last call Bcast #5 (ok" in proc.stderr and "not waiting in it" in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir())


def singleton(code: str, env: dict[str, str | None]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=TESTS_DIR, env=mpi_env(env), capture_output=True,
                          text=True, timeout=120)


PROGRAM = ("from mpi4py import MPI\nimport numpy as np, pymcoll\nc = pymcoll.Comm(MPI.COMM_WORLD)\n"
           "a = np.ones(3)\nc.Allreduce(a, a.copy())\n")


@pytest.mark.timeout(150)
def test_fatal_signal_dumps_then_dies_as_before(tmp_path: Path) -> None:
    proc = singleton(PROGRAM + "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
                     {"PYMCOLL_TRACE": str(tmp_path)})
    assert proc.returncode == -11, (proc.returncode, proc.stderr)
    dump = json.loads((tmp_path / "rank0.sigsegv.json").read_text())
    assert dump["reason"] == "SIGSEGV" and dump["comms"][0]["records"][0]["coll"] == "Allreduce"


@pytest.mark.timeout(150)
def test_explicit_dump_and_ring_of_zero(tmp_path: Path) -> None:
    code = PROGRAM + ("from pymcoll import tracing\nprint(tracing.dump())\n"
                      "tracing.setup(ring=0)\nd = pymcoll.Comm(MPI.COMM_WORLD)\nd.Barrier()\n"
                      "print('ids', c.trace_id, d.trace_id, tracing.cost_ns(10000) > 0)\n")
    proc = singleton(code, {"PYMCOLL_TRACE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "ids 0.1 0.2 True" in proc.stdout, proc.stdout
    comms = {c["id"]: c for c in json.loads((tmp_path / "rank0.json").read_text())["comms"]}
    # A communicator made with no ring is not traced at all.
    assert list(comms) == ["0.1"] and len(comms["0.1"]["records"]) == 1


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name,value,message", [
    ("PYMCOLL_TRACE", "/dev/null/trace", "PYMCOLL_TRACE='/dev/null/trace': cannot create or write it"),
    ("PYMCOLL_TRACE_RING", "-1", "PYMCOLL_TRACE_RING='-1' must be >= 0"),
    ("PYMCOLL_TRACE_SIGNALS", "maybe", "PYMCOLL_TRACE_SIGNALS='maybe': expected 1 or 0"),
])
def test_bad_trace_setting_is_named(name: str, value: str, message: str) -> None:
    proc = singleton(PROGRAM + "print('ran')\n", {name: value})
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert message in proc.stderr, proc.stderr
    # The same settings are good again once fixed.
    assert singleton(PROGRAM + "print('ran')\n", {}).stdout.strip() == "ran"


def test_calls_run_in_the_wrapped_communicator_are_recorded_as_mpi(tmp_path: Path) -> None:
    proc = run_mpi(2, "trace_external", env={"PYMCOLL_TRACE": str(tmp_path)}, timeout=120)
    assert proc.stdout.count("external ok") == 2, proc.stdout
    for rank in (0, 1):
        (comm,) = json.loads((tmp_path / f"rank{rank}.json").read_text())["comms"]
        recs = comm["records"]
        assert [r["seq"] for r in recs] == list(range(1, 8)), recs
        assert all(r["status"] == "ok" for r in recs), recs
        got = [(r["coll"], r["algorithm"], r["mode"]) for r in recs]
        assert got[1:6] == [("Allreduce", "mpi", "blocking"), ("Bcast", "mpi", "nonblocking"),
                            ("Allreduce", "mpi", "persistent"), ("Allreduce", "mpi", "persistent"),
                            ("Allreduce", "mpi", "blocking")], got
        assert got[0][1] != "mpi" and got[6][1] != "mpi", got


NODES2 = {"PYMCOLL_NODE_SIZE": "2"}
LEADER = dict(NODES2, **{f"PYMCOLL_{c.upper()}_ALGORITHM": "leader" for c in ("Bcast", "Allreduce", "Alltoall")})


@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks,env,expected", [
    # One rank, or no data: nothing crosses ranks.
    (1, {}, [("Allreduce:64", "self"), ("Allgather:64", "self")]),
    (2, {}, [("Bcast:0", "self"), ("Allreduce:0", "self"),
             # One node: the segment's algorithms, Gatherv included.
             ("Allreduce:64", "node"), ("Gatherv:64", "node"), ("Scatter:4096", "node")]),
    # No segment: everything runs in the wrapped communicator.
    (2, {"PYMCOLL_SHM": "off"}, [("Allreduce:64", "mpi"), ("Bcast:64", "mpi"), ("Gather:64", "mpi")]),
    # Two virtual nodes: the lanes where they serve; Gatherv, Allgatherv and a Gather
    # larger than the lanes' tree holds (4 x 2 MiB > the 4 MiB segment) go to MPI. A Reduce
    # of up to 1 KiB per rank gathers the inputs at the root through MPI; up to 32 KiB it
    # goes up the single leader (the lanes' exchange would be one round), a larger one takes
    # the lanes.
    (4, NODES2, [("Bcast:64", "lanes"), ("Allreduce:64", "lanes"), ("Gather:64", "lanes"),
                 ("Alltoall:64", "lanes"), ("Reduce_scatter_block:64", "lanes"), ("Gatherv:64", "mpi"),
                 ("Allgatherv:64", "mpi"), ("Gather:2097152", "mpi"), ("Scatter:2097152", "mpi"),
                 ("Reduce:64", "mpi"), ("Reduce:1024", "mpi"), ("Reduce:1032", "leader"),
                 ("Reduce:32768", "leader"), ("Reduce:32776", "lanes")]),
    # Asked for, the lanes serve a small Reduce too; 3 nodes of one rank (1 lane) fold in
    # the lanes' exchange: a small Reduce still gathers at the root (which follows the
    # exchange's order), a larger one stays on the lanes.
    (4, dict(NODES2, PYMCOLL_REDUCE_ALGORITHM="lanes"), [("Reduce:64", "lanes")]),
    (3, {"PYMCOLL_NODE_SIZE": "1"}, [("Reduce:64", "mpi"), ("Reduce:2048", "lanes"), ("Allreduce:64", "lanes")]),
    # One leader per node, where asked for, and for the collectives that have only that.
    (4, LEADER, [("Bcast:64", "leader"), ("Allreduce:64", "leader"), ("Alltoall:64", "leader"),
                 ("Barrier:0", "leader"), ("Scan:64", "leader")]),
], ids=["self", "node", "mpi", "lanes", "lanes-asked", "folds", "leader"])
def test_trace_records_the_algorithm_each_call_took(tmp_path: Path, ranks: int, env: dict[str, str],
                                                     expected: list[tuple[str, str]]) -> None:
    specs = [spec for spec, _ in expected]
    proc = run_mpi(ranks, "trace_algorithms", *specs, env=dict(env, PYMCOLL_TRACE=str(tmp_path)), timeout=150)
    assert proc.stdout.count("algorithms ok") == ranks, proc.stdout
    want = [(spec.partition(":")[0], family) for spec, family in expected]
    for rank in range(ranks):
        (comm,) = json.loads((tmp_path / f"rank{rank}.json").read_text())["comms"]
        got = [(r["coll"], r["algorithm"]) for r in comm["records"]]
        assert got == want, (rank, got)
