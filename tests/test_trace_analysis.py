"""The trace reader, analyzer and Chrome export on synthetic dumps (no MPI launch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Union

import jsonschema
import pytest

from conftest import mpi_env
from pymcoll.trace import Report, TraceWarning, analyze, export_chrome, load_dumps
from pymcoll.trace.dumps import REDUCTIONS, ROOTED

US, MS, S = 1_000, 1_000_000, 1_000_000_000
T0 = 5_000 * S  # CLOCK_MONOTONIC at the first call
WORLD = [0, 1, 2, 3]

Call = Union[str, tuple[str, dict[str, Any]]]


# -- building dumps ----------------------------------------------------------------------------------

def record(seq: int, coll: str, enqueue: int, *, dur: int = 20 * US, status: str = "ok",
           nbytes: int = 64, **fields: Any) -> dict[str, Any]:
    """A record as the core writes it; a running record has no end."""
    red = coll in REDUCTIONS
    rec = {"seq": seq, "coll": coll, "algorithm": "node", "paths": ["cico"], "bytes": nbytes,
           "count": nbytes // 8 if red else nbytes, "dtype": "float64" if red else None, "op": "sum" if red else None,
           "root": 0 if coll in ROOTED else -1, "mode": "blocking", "in_place": False, "enqueue_ns": enqueue,
           "start_ns": enqueue, "end_ns": None if status == "running" else enqueue + dur, "status": status}
    rec.update(fields)
    return rec


def calls(colls: list[Call], rank: int, *, first: int = 1, start: int = T0, late: int = 0) -> list[dict[str, Any]]:
    """Records #first.. of `colls` (a name, or (name, record fields)) 1 ms apart; rank r arrives r us in."""
    out = []
    for i, call in enumerate(colls):
        name, fields = (call, {}) if isinstance(call, str) else call
        out.append(record(first + i, name, start + i * MS + rank * US + late, **fields))
    return out


def comm(records: list[dict[str, Any]], rank: int, *, cid: str = "0.1", world_ranks: Optional[list[int]] = None,
         last_seq: Optional[int] = None, wait: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A communicator entry of `rank`'s dump (the world by default); last_seq defaults to the last record."""
    members = WORLD if world_ranks is None else world_ranks
    return {"id": cid, "rank": members.index(rank), "size": len(members), "world_ranks": members, "node": 0,
            "nnodes": 1, "local_rank": members.index(rank), "local_size": len(members),
            "last_seq": max((r["seq"] for r in records), default=0) if last_seq is None else last_seq,
            "capacity": 1024, "freed": False, "wait": wait, "records": records}


def dump(rank: int, comms: list[dict[str, Any]], *, time_ns: int, reason: str = "finalize",
         host: str = "node0") -> dict[str, Any]:
    """A whole dump of world rank `rank` (4 ranks, pid 4000 + rank)."""
    return {"format": "pymcoll-trace", "version": 1, "rank": rank, "world_size": 4, "pid": 4000 + rank,
            "host": host, "source": "python", "reason": reason, "time_ns": time_ns,
            "realtime_offset_ns": 1_700_000_000 * S, "comms": comms}


def flag_wait(seq: int, coll: str, since: int, waiting_for: list[int]) -> dict[str, Any]:
    """The wait of a rank blocked on the data flags of `waiting_for` (communicator ranks)."""
    return {"seq": seq, "coll": coll, "kind": "flag", "flag": "data", "target": 1, "since_ns": since,
            "waiting_for": waiting_for, "pids": [4000 + r for r in waiting_for]}


def write(directory: Path, dumps: list[dict[str, Any]]) -> Path:
    """Each dump under the name the core gives it: rank<N>.json or rank<N>.<event>.json."""
    for d in dumps:
        event = "" if d["reason"] in ("finalize", "request") else "." + d["reason"].lower()
        (directory / f"rank{d['rank']}{event}.json").write_text(json.dumps(d))
    return directory


def same_program(colls: list[Call], *, end: int = T0 + S, **per_rank: dict[str, Any]) -> list[dict[str, Any]]:
    """Finalize dumps of 4 ranks that made the same calls; per_rank['r2'] = calls() keywords for rank 2."""
    return [dump(r, [comm(calls(colls, r, **per_rank.get(f"r{r}", {})), r)], time_ns=end) for r in WORLD]


def analyze_files(tmp_path: Path, dumps: list[dict[str, Any]]) -> Report:
    """Write `dumps` to tmp_path and analyze them from there, as the command does."""
    return analyze(load_dumps(write(tmp_path, dumps)))


# -- scenarios ------------------------------------------------------------------------------------------

def sleeping_rank_dumps() -> list[dict[str, Any]]:
    """Ranks 0, 1, 3 time out in Bcast #4 after 10 s; rank 2 is asleep after Allreduce #3 (SIGUSR1 dump only)."""
    before = ["Allreduce"] * 3
    t4 = T0 + 3 * MS
    dumps = []
    for r in (0, 1, 3):
        recs = calls(before, r) + [record(4, "Bcast", t4 + r * US, dur=10 * S, status="timeout")]
        dumps.append(dump(r, [comm(recs[:3] + [record(4, "Bcast", t4 + r * US, status="running")], r,
                                   wait=flag_wait(4, "Bcast", t4 + r * US, [2]))],
                          time_ns=t4 + 10 * S, reason="timeout"))
        dumps.append(dump(r, [comm(recs, r)], time_ns=t4 + 11 * S))
    dumps.append(dump(2, [comm(calls(before, 2), 2)], time_ns=t4 + 5 * S, reason="SIGUSR1"))
    return dumps


def test_rank_that_never_entered_is_named_with_what_it_last_did(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, sleeping_rank_dumps())
    text = report.paragraph
    assert text.startswith("Hang: Bcast #4 did not complete"), text
    assert "Rank 2 never entered #4" in text
    assert "its last collective there was Allreduce #3 (ok)" in text
    assert "when signalled (SIGUSR1) it was in no pymcoll collective" in text
    assert "ranks 0, 1 and 3 waited up to 10 s in it for rank 2 (data flag) and gave up (timeout)" in text
    hang = report.hangs[0]
    assert (hang["comm"], hang["seq"]) == ("0.1", 4)
    assert [a["rank"] for a in hang["never_entered"]] == [2] and hang["late"] == []
    assert report.mismatches == [] and report.missing_ranks == []


def test_rank_that_entered_after_the_others_gave_up(tmp_path: Path) -> None:
    colls = ["Allreduce"] * 5
    dumps = same_program(colls[:4], end=T0 + 30 * S)
    t5 = T0 + 4 * MS
    for d in dumps:
        r, recs = d["rank"], d["comms"][0]["records"]
        enq = t5 + (13 * S if r == 2 else r * US)
        recs.append(record(5, "Allreduce", enq, dur=10 * S, status="peer_aborted" if r == 2 else "timeout"))
        d["comms"][0]["last_seq"] = 5
    report = analyze_files(tmp_path, dumps)
    hang = report.hangs[0]
    assert [a["rank"] for a in hang["late"]] == [2] and hang["never_entered"] == []
    assert abs(hang["late"][0]["late_ns"] - (3 * S - 3 * US)) < 10 * US
    assert "Rank 2 entered #5 only 3 s after the others gave up" in report.paragraph
    assert "its last collective there was Allreduce #4 (ok)" in report.paragraph


def test_deadlock_across_communicators_names_the_subcommunicator(tmp_path: Path) -> None:
    # Rank 2 waits in Bcast #1 on 0.2 = {2, 3} for rank 3; rank 3 waits in world Allreduce #2 for rank 2.
    pair = [2, 3]
    t = T0 + MS
    dumps = []
    for r in WORLD:
        world = calls(["Allreduce"], r)
        if r == 2:
            sub = comm([record(1, "Bcast", t, status="running")], 2, cid="0.2", world_ranks=pair,
                       wait=flag_wait(1, "Bcast", t, [1]))
            dumps.append(dump(2, [comm(world, 2), sub], time_ns=t + 10 * S, reason="timeout"))
            continue
        world.append(record(2, "Allreduce", t + r * US, status="running"))
        comms = [comm(world, r, wait=flag_wait(2, "Allreduce", t + r * US, [2]))]
        if r == 3:
            comms.append(comm([], 3, cid="0.2", world_ranks=pair))
        dumps.append(dump(r, comms, time_ns=t + 10 * S, reason="timeout"))
    report = analyze_files(tmp_path, dumps)
    world_hang = next(h for h in report.hangs if h["comm"] == "0.1")
    assert world_hang["seq"] == 2 and [a["rank"] for a in world_hang["never_entered"]] == [2]
    assert "waiting in Bcast #1 on communicator 0.2 (size 2) for rank 3 (data flag)" in world_hang["text"]
    sub_hang = next(h for h in report.hangs if h["comm"] == "0.2")
    assert sub_hang["seq"] == 1 and [a["rank"] for a in sub_hang["never_entered"]] == [3]


def test_skipped_collective_is_named_as_skipped(tmp_path: Path) -> None:
    program = ["Allreduce", ("Bcast", {"nbytes": 1024}), "Allreduce", ("Allgather", {"nbytes": 32})]
    dumps = same_program(program)
    dumps[1] = dump(1, [comm(calls(program[:1] + program[2:], 1), 1)], time_ns=T0 + S)
    report = analyze_files(tmp_path, dumps)
    [mismatch] = report.mismatches
    assert mismatch["seq"] == 2 and mismatch["deviants"] == [
        {"rank": 1, "kind": "skipped", "call": "Bcast(1024 B, root 0)"}]
    assert "rank 1 skipped Bcast #2" in report.paragraph
    assert "called" not in mismatch["text"]
    # One call short, rank 1 never entered the others' #4: a hang, caused by the skip.
    assert [a["rank"] for a in report.hangs[0]["never_entered"]] == [1] and report.hangs[0]["seq"] == 4
    assert "This mismatch is the likely cause of the hang." in report.paragraph


def test_extra_call_is_named_as_extra(tmp_path: Path) -> None:
    program = ["Allreduce", "Allreduce", ("Allgather", {"nbytes": 32})]
    dumps = same_program(program)
    dumps[3] = dump(3, [comm(calls(program[:1] + ["Barrier"] + program[1:], 3), 3)], time_ns=T0 + S)
    report = analyze_files(tmp_path, dumps)
    assert [d["kind"] for d in report.mismatches[0]["deviants"]] == ["extra"]
    assert "rank 3 made an extra call, Barrier(64 B) at #2" in report.paragraph


def test_different_collective_at_the_same_seq(tmp_path: Path) -> None:
    program: list[Call] = ["Allreduce", "Allreduce", "Bcast"]
    dumps = same_program(program)
    dumps[3]["comms"][0]["records"][1] = record(2, "Reduce", T0 + MS, root=0)
    report = analyze_files(tmp_path, dumps)
    [mismatch] = report.mismatches
    assert mismatch["seq"] == 2 and mismatch["majority"]["ranks"] == [0, 1, 2]
    assert ("rank 3 called Reduce(64 B, float64, sum, root 0) at #2 where ranks 0-2 called "
            "Allreduce(64 B, float64, sum)") in report.paragraph


def test_different_size_at_the_same_seq_reports_only_the_first(tmp_path: Path) -> None:
    program: list[Call] = ["Bcast", "Allreduce", "Allreduce", "Allreduce"]
    dumps = same_program(program)
    for seq in (3, 4):  # a consequence of #3, not reported on its own
        dumps[0]["comms"][0]["records"][seq - 1]["bytes"] = 128
    report = analyze_files(tmp_path, dumps)
    [mismatch] = report.mismatches
    assert mismatch["seq"] == 3 and mismatch["later_mismatches"] == 1
    assert "rank 0 called Allreduce(128 B, float64, sum) at #3 where ranks 1-3 called" in report.paragraph
    assert "1 later collective there differs as well" in report.paragraph


def test_v_form_with_different_sizes_is_not_a_mismatch(tmp_path: Path) -> None:
    dumps = same_program(["Allreduce", "Gatherv", "Alltoallv"])
    for d in dumps:
        for rec in d["comms"][0]["records"][1:]:
            rec["bytes"] = 100 * (d["rank"] + 1)
    report = analyze_files(tmp_path, dumps)
    assert report.mismatches == [], report.mismatches
    assert report.paragraph.startswith("No hang, mismatch or straggler found")


def test_straggler_twenty_ms_late_is_named(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, same_program(["Allreduce"] * 10, r3={"late": 20 * MS}))
    stats = report.stragglers
    assert stats["stragglers"] == [3] and stats["compared"] == 10
    top = stats["ranks"][0]
    assert (top["rank"], top["last"], top["of"]) == (3, 10, 10)
    assert top["mean_lateness_us"] == pytest.approx(20_001)  # 20 ms + rank 3 arrives 1 us after rank 2
    assert "Straggler: rank 3 arrived last at 10 of 10 collectives (100%), on average 20 ms" in report.paragraph
    assert "straggler" in report.table()


def test_last_by_a_microsecond_every_time_is_not_a_straggler(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, same_program(["Allreduce"] * 10))  # rank 3 always 1 us after rank 2
    top = report.stragglers["ranks"][0]
    assert (top["rank"], top["last"]) == (3, 10) and top["mean_lateness_us"] == pytest.approx(1)
    assert report.stragglers["stragglers"] == [] and "Straggler" not in report.paragraph


@pytest.mark.parametrize("late_ms,named", [(2, []), (20, [3])])
def test_oversubscribed_host_needs_more_lateness(tmp_path: Path, late_ms: int, named: list[int]) -> None:
    # 4 ranks on 2 CPUs: the scheduler alone makes someone last by milliseconds.
    dumps = same_program(["Allreduce"] * 10, r3={"late": late_ms * MS})
    for d in dumps:
        d["cpus"] = 2
    report = analyze_files(tmp_path, dumps)
    assert report.stragglers["stragglers"] == named, report.stragglers
    assert report.stragglers["oversubscribed"] == {"node0": {"ranks": 4, "cpus": 2}}
    assert "oversubscribed" in report.table()


def test_clean_run_says_so(tmp_path: Path) -> None:
    program = ["Allreduce"] * 10 + ["Bcast"] * 5
    dumps = same_program(program)
    for d in dumps:  # a few microseconds of jitter, a different last arriver each time
        for rec in d["comms"][0]["records"]:
            rec["enqueue_ns"] = rec["start_ns"] = T0 + rec["seq"] * MS + (rec["seq"] * 7 + d["rank"] * 3) % 5 * US
    report = analyze_files(tmp_path, dumps)
    assert report.paragraph == ("No hang, mismatch or straggler found in 15 collectives on 1 communicator "
                                "from 4 ranks.")
    assert report.hangs == [] and report.stragglers["stragglers"] == []


def test_rank_without_dump_is_reported_missing(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, same_program(["Allreduce"] * 3)[:3])
    assert report.ranks == [0, 1, 2] and report.missing_ranks == [3]
    assert "Rank 3 left no dump (killed before it could dump?)" in report.paragraph


def test_corrupt_file_is_skipped_with_a_warning(tmp_path: Path) -> None:
    write(tmp_path, same_program(["Allreduce"] * 3))
    (tmp_path / "rank7.timeout.json").write_text('{"format": "pymcoll-trace", "version": 1, "rank": 7, "co')
    (tmp_path / "other.json").write_text('{"some": "other tool"}')
    with pytest.warns(TraceWarning, match=r"rank7\.timeout\.json: truncated"):
        trace = load_dumps(tmp_path)
    assert sorted(trace.ranks) == WORLD and len(trace.problems) == 1
    assert analyze(trace).problems == trace.problems


def test_event_dump_and_later_finalize_dump_merge(tmp_path: Path) -> None:
    dumps = same_program(["Allreduce"] * 5, end=T0 + S)
    early = comm(calls(["Allreduce"] * 2, 0), 0, last_seq=3, wait=flag_wait(3, "Allreduce", T0 + 2 * MS, [1]))
    dumps.append(dump(0, [early], time_ns=T0 + 2 * MS + 500 * US, reason="SIGUSR1"))
    trace = load_dumps(write(tmp_path, dumps))
    rank0 = trace.ranks[0]
    assert [r["seq"] for r in rank0.comms["0.1"].records] == [1, 2, 3, 4, 5]  # the newest dump's ring
    assert [s.reason for s in rank0.snapshots] == ["SIGUSR1", "finalize"]
    assert rank0.snapshots[0].waits["0.1"]["waiting_for"] == [1] and rank0.snapshots[1].waits == {}
    assert len(rank0.files) == 2
    assert analyze(trace).hangs == []


def test_hosts_are_aligned_with_the_realtime_offset(tmp_path: Path) -> None:
    dumps = same_program(["Allreduce"] * 4)
    dumps[2]["host"] = "node1"
    dumps[2]["realtime_offset_ns"] -= 5 * MS  # node1's monotonic clock runs 5 ms ahead of the others'
    for rec in dumps[2]["comms"][0]["records"]:
        for key in ("enqueue_ns", "start_ns", "end_ns"):
            rec[key] += 5 * MS
    trace = load_dumps(write(tmp_path, dumps))
    assert trace.clock == "realtime"
    report = analyze(trace)
    assert report.stragglers["stragglers"] == [] and report.summary[0]["spread_us"] < 10


# -- Chrome export ----------------------------------------------------------------------------------------

EVENT_SCHEMA = {
    "type": "object",
    "required": ["traceEvents", "displayTimeUnit"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "ph", "pid", "tid"],
            "properties": {"name": {"type": "string"}, "ph": {"enum": ["X", "M", "i"]},
                           "ts": {"type": "number", "minimum": 0}, "pid": {"type": "integer"},
                           "tid": {"type": "integer"}, "dur": {"type": "number", "minimum": 0},
                           "s": {"enum": ["g", "p", "t"]}},
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur"]}},
                {"if": {"properties": {"ph": {"const": "i"}}}, "then": {"required": ["ts", "s"]}},
                {"if": {"properties": {"ph": {"const": "M"}}}, "then": {
                    "required": ["args"], "properties": {"args": {"type": "object", "anyOf": [
                        {"required": ["name"], "properties": {"name": {"type": "string"}}},
                        {"required": ["sort_index"]}]}}}},
            ]}},
    },
}


def test_chrome_export_is_valid_with_one_track_per_rank(tmp_path: Path) -> None:
    dumps_dir = tmp_path / "dumps"
    dumps_dir.mkdir()
    out = tmp_path / "trace.json"
    count = export_chrome(load_dumps(write(dumps_dir, sleeping_rank_dumps())), out)
    data = json.loads(out.read_text())
    jsonschema.validate(data, EVENT_SCHEMA)
    events = data["traceEvents"]
    assert count == len(events)
    names = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert sorted(e["pid"] for e in names) == WORLD
    assert names[2]["args"]["name"] == "rank 2 (node0, pid 4002)"
    assert {e["pid"] for e in events} == set(WORLD)
    bcast = [e for e in events if e["name"] == "Bcast #4"]
    assert len(bcast) == 3 and all(e["args"]["status"] == "timeout" for e in bcast)
    assert all(9_999_000 < e["dur"] < 10_001_000 for e in bcast)  # 10 s in microseconds
    waits = [e for e in events if e["name"] == "waiting for ranks [2] (data flag)"]
    assert sorted(e["pid"] for e in waits) == [0, 1, 3]
    assert sorted(e["name"] for e in events if e["ph"] == "i" and e["pid"] == 0) == ["finalize", "timeout"]
    assert min(e["ts"] for e in events if "ts" in e) == 0


def test_chrome_export_is_invalid_when_a_duration_is_negative() -> None:
    # The schema itself must reject what the export must never write.
    bad = {"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": -1, "pid": 0, "tid": 1}],
           "displayTimeUnit": "ms"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, EVENT_SCHEMA)


# -- the command line -------------------------------------------------------------------------------------

def pymcoll_trace(*args: Union[str, Path], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m pymcoll trace ARGS`` as a user would (the installed package: -P)."""
    cmd = [sys.executable, "-P", "-m", "pymcoll", "trace", *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=mpi_env(), capture_output=True, text=True, timeout=120)


def test_cli_analyze_prints_paragraph_and_tables(tmp_path: Path) -> None:
    dumps_dir = write(tmp_path, sleeping_rank_dumps())
    proc = pymcoll_trace("analyze", dumps_dir, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, rest = proc.stdout.split("\n", 1)
    assert first.startswith("Hang: Bcast #4") and "Rank 2 never entered #4" in first
    assert "#" in rest and "collective" in rest and "Allreduce" in rest and "Bcast" in rest


def test_cli_analyze_json(tmp_path: Path) -> None:
    proc = pymcoll_trace("analyze", write(tmp_path, sleeping_rank_dumps()), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["hangs"][0]["seq"] == 4 and data["ranks"] == WORLD
    assert data["paragraph"].startswith("Hang:")


def test_cli_export_writes_the_trace(tmp_path: Path) -> None:
    dumps_dir = tmp_path / "dumps"
    dumps_dir.mkdir()
    out = tmp_path / "out.json"
    proc = pymcoll_trace("export", write(dumps_dir, sleeping_rank_dumps()), out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    assert f"wrote {len(events)} events" in proc.stdout and "ui.perfetto.dev" in proc.stdout


def test_cli_empty_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    proc = pymcoll_trace("analyze", tmp_path, cwd=tmp_path)
    assert proc.returncode == 1
    assert str(tmp_path) in proc.stderr and "PYMCOLL_TRACE=" in proc.stderr
    usage = pymcoll_trace(cwd=tmp_path)
    assert usage.returncode == 2
