"""The step timeline: compute, wait (bubble) and communication per rank from recorded
synchronizations, clock offsets, mismatches named, and the Chrome trace export."""

from __future__ import annotations

import threading

import jsonschema
import pytest

from pymcoll.algorithms.balance.timeline import Timeline, analyze, chrome_trace, write_chrome_trace
from test_trace_analysis import EVENT_SCHEMA


def record(rank: int, steps: list[tuple[float, float]], syncs: list[tuple[str, int, float, float]],
           offset: float = 0.0) -> dict:
    return {"rank": rank, "offset": offset, "steps": [list(s) for s in steps],
            "syncs": [list(s) + [0] for s in syncs]}


def two_ranks(offset1: float = 0.0) -> list[dict]:
    # Step 0 on [0, 10]: rank 0 arrives at the exchange at 2 and the allreduce at 6; rank 1 at 3 and 8.
    # The exchange runs 3 -> 4, the allreduce 8 -> 9; step 1 on [10, 12] is balanced (arrive 11, leave 11.5).
    r0 = record(0, [(0, 10), (10, 12)], [("exchange", 0, 2, 4), ("allreduce", 0, 6, 9), ("allreduce", 1, 11, 11.5)])
    r1 = record(1, [(0 + offset1, 10 + offset1), (10 + offset1, 12 + offset1)],
                [("exchange", 0, 3 + offset1, 4 + offset1), ("allreduce", 0, 8 + offset1, 9 + offset1),
                 ("allreduce", 1, 11 + offset1, 11.5 + offset1)], offset=offset1)
    return [r0, r1]


@pytest.mark.parametrize("offset", [0.0, 1234.5])
def test_waits_and_communication_per_rank(offset: float) -> None:
    t0, t1 = analyze(two_ranks(offset))
    assert t0.wait == pytest.approx(1 + 2) and t1.wait == pytest.approx(0)
    assert t0.comm == pytest.approx(1 + 1 + 0.5) and t1.comm == pytest.approx(1 + 1 + 0.5)
    assert t0.compute == pytest.approx(12 - 3 - 2.5) and t1.compute == pytest.approx(12 - 2.5)
    assert t0.waits_by_sync == pytest.approx({"exchange": 1, "allreduce": 2})
    assert t0.steps == t1.steps == 2
    assert set(t0.to_dict()) == {"compute_s", "wait_s", "comm_s", "steps", "wait_by_sync_s"}


def test_ranks_with_other_collectives_are_named() -> None:
    docs = two_ranks()
    docs[1]["syncs"].pop()
    with pytest.raises(ValueError, match="rank 1 recorded 2 synchronizations and rank 0 3"):
        analyze(docs)


def test_recording_steps_syncs_and_threads() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    tl = Timeline(rank=0, clock=clock)
    tl.observe("outside", 0.0, 0.5)  # not in a step: ignored
    with tl.step():
        with tl.sync("allreduce"):
            pass
        seen = threading.Thread(target=tl.observe, args=("exchange", 2.5, 2.7))
        seen.start()
        seen.join()
    nested = Timeline()
    with pytest.raises(RuntimeError, match="already open"):
        with nested.step():
            with nested.step():
                pass
    doc = tl.to_dict()
    assert [s[0] for s in doc["syncs"]] == ["allreduce", "exchange"]
    assert [s[4] for s in doc["syncs"]] == [0, 1]  # the main thread, another thread
    assert doc["steps"][0] == [1.0, 4.0]
    # one rank alone: no waits; the other thread's exchange is not taken out of compute
    [t] = analyze([doc])
    assert t.wait == 0 and t.comm == pytest.approx(1.0 + 0.2) and t.compute == pytest.approx(3.0 - 1.0)
    tl.clear()
    assert tl.to_dict()["syncs"] == [] and tl.step_index == 0


def test_chrome_trace_is_valid_and_shows_waits(tmp_path) -> None:
    docs = two_ranks(5.0)
    docs[0]["syncs"][0][4] = 1  # rank 0's exchange ran on a progress thread
    docs[1]["syncs"][0][4] = 1
    trace = chrome_trace(docs)
    jsonschema.validate(trace, EVENT_SCHEMA)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    waits = [e for e in slices if e["name"] == "wait allreduce" and e["pid"] == 0]
    assert [w["dur"] for w in waits] == [pytest.approx(2e6)]
    assert any(e["tid"] == 2 and e["name"] == "exchange" for e in slices)
    path = write_chrome_trace(docs, tmp_path / "t.json")
    jsonschema.validate(__import__("json").loads(path.read_text()), EVENT_SCHEMA)
    assert chrome_trace([]) == {"traceEvents": [], "displayTimeUnit": "ms"}
