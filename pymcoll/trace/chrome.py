"""Export the dumps as a Chrome trace (Trace Event Format), for chrome://tracing or ui.perfetto.dev.

One process track per world rank (pid = world rank), one thread per
communicator (tid numbered in communicator id order, the same on every rank).
Each collective is a complete ("X") event from the call's entry to its end, a
collective still running at the dump lasts until the dump; each wait a dump
caught is an "X" event from the start of the wait to the dump; each dump is an
instant event named by its reason. Times are microseconds from the earliest
timestamp in the dumps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from .dumps import CommTrace, DumpSource, Record, RankTrace, Snapshot, TraceSet, as_trace

DUMP_TID = 0  # the thread that carries a rank's dump instants


def _times(trace: TraceSet) -> Iterator[int]:
    for rt in trace.ranks.values():
        for ct in rt.comms.values():
            for rec in ct.records:
                yield from (rec[k] for k in ("enqueue_ns", "start_ns", "end_ns") if rec[k] is not None)
        for snap in rt.snapshots:
            yield snap.time_ns
            yield from (w["since_ns"] for w in snap.waits.values() if w.get("since_ns") is not None)


def _us(t_ns: int, t0_ns: int) -> float:
    return (t_ns - t0_ns) / 1e3


def _metadata(rt: RankTrace, tids: dict[str, int]) -> list[dict[str, Any]]:
    pid = rt.rank
    events = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": DUMP_TID,
         "args": {"name": f"rank {rt.rank} ({rt.host}, pid {rt.pid})"}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": DUMP_TID, "args": {"sort_index": rt.rank}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": DUMP_TID, "args": {"name": "dumps"}},
    ]
    for cid, ct in rt.comms.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[cid],
                       "args": {"name": f"comm {cid} (size {ct.size})"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tids[cid],
                       "args": {"sort_index": tids[cid]}})
    return events


def _record_event(rt: RankTrace, ct: CommTrace, rec: Record, tid: int, t0: int) -> Optional[dict[str, Any]]:
    begin = rec["enqueue_ns"] if rec["enqueue_ns"] is not None else rec["start_ns"]
    if begin is None:
        return None
    end = rec["end_ns"]
    if end is None:
        end = ct.dump_time_ns if rec["status"] == "running" else begin
    queued = None if rec["start_ns"] is None or rec["enqueue_ns"] is None else \
        (rec["start_ns"] - rec["enqueue_ns"]) / 1e3
    args = {k: rec[k] for k in ("seq", "bytes", "count", "dtype", "op", "root", "algorithm", "paths", "mode",
                                "in_place", "status")}
    return {"name": f"{rec['coll']} #{rec['seq']}", "cat": "collective", "ph": "X", "ts": _us(begin, t0),
            "dur": max(0, end - begin) / 1e3, "pid": rt.rank, "tid": tid,
            "args": dict(args, comm=ct.id, queued_us=queued)}


def _wait_event(rt: RankTrace, snap: Snapshot, cid: str, wait: dict[str, Any], tid: int,
                t0: int) -> Optional[dict[str, Any]]:
    since = wait.get("since_ns")
    if since is None:
        return None
    comm = rt.comms.get(cid)
    world = [comm.world_ranks[c] for c in wait.get("waiting_for") or []
             if comm and 0 <= c < len(comm.world_ranks)]
    if wait.get("kind") == "mpi":
        name = f"waiting in {wait.get('call', 'MPI')}"
    else:
        name = f"waiting for ranks {world} ({wait.get('flag', '?')} flag)"
    args = {k: wait.get(k) for k in ("seq", "coll", "kind", "flag", "call", "target", "pids")}
    end = snap.time_ns
    rec = comm.record(wait["seq"]) if comm and isinstance(wait.get("seq"), int) else None
    if rec and rec["end_ns"] is not None and since <= rec["end_ns"] < end:
        end = rec["end_ns"]  # the dump ran while the call unwound: keep the wait inside its call's slice
    return {"name": name, "cat": "wait", "ph": "X", "ts": _us(since, t0),
            "dur": max(0, end - since) / 1e3, "pid": rt.rank, "tid": tid,
            "args": dict(args, comm=cid, waiting_for_comm_ranks=wait.get("waiting_for"),
                         waiting_for_world_ranks=world, dump=snap.reason)}


def _rank_events(rt: RankTrace, tids: dict[str, int], t0: int) -> list[dict[str, Any]]:
    events = _metadata(rt, tids)
    for cid, ct in rt.comms.items():
        events += [e for rec in ct.records if (e := _record_event(rt, ct, rec, tids[cid], t0))]
    for snap in rt.snapshots:
        events += [e for cid, w in snap.waits.items() if (e := _wait_event(rt, snap, cid, w, tids.get(cid, 0), t0))]
        events.append({"name": snap.reason, "cat": "dump", "ph": "i", "s": "p", "ts": _us(snap.time_ns, t0),
                       "pid": rt.rank, "tid": DUMP_TID, "args": {"file": snap.path}})
    return events


def chrome_trace(dumps: DumpSource) -> dict[str, Any]:
    """The Trace Event Format object for `dumps` (a directory, a TraceSet, or dump dicts)."""
    trace = as_trace(dumps)
    t0 = min(_times(trace), default=0)
    tids = {cid: i + 1 for i, cid in enumerate(trace.comm_ids())}
    events = [e for rt in trace.ranks.values() for e in _rank_events(rt, tids, t0)]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "python -m pymcoll trace export", "directory": trace.directory,
                          "clock": trace.clock, "t0_ns": t0, "hosts": trace.hosts, "ranks": sorted(trace.ranks),
                          "communicators": tids}}


def export_chrome(dumps: DumpSource, out_path: Union[str, "os.PathLike[str]"]) -> int:
    """Write the Chrome trace of `dumps` to `out_path`; returns the number of events written."""
    data = chrome_trace(dumps)
    Path(out_path).write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    return len(data["traceEvents"])
