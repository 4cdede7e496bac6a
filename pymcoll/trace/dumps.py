"""Reading the trace dumps the C core writes, and merging them per rank.

With ``PYMCOLL_TRACE=DIR`` every process writes its collective rings to
``DIR/rank<N>.json`` at finalize (or on request) and to
``DIR/rank<N>.<event>.json`` when a timeout or a signal strikes. This module
reads every such file (format ``pymcoll-trace``, version 1), skips with a
warning the ones that are truncated or unreadable, and merges the files of one
rank: per communicator the records of the newest dump, and every dump's
``wait`` as a snapshot of what the rank was doing at that moment.

Times are put on one clock: CLOCK_MONOTONIC as written when every dump comes
from one host, otherwise CLOCK_REALTIME (monotonic plus each dump's
``realtime_offset_ns``) so that ranks on different hosts line up.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

FORMAT = "pymcoll-trace"
VERSION = 1

REDUCTIONS = frozenset({"Allreduce", "Reduce", "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan"})
ROOTED = frozenset({"Bcast", "Reduce", "Gather", "Gatherv", "Scatter", "Scatterv"})
# Their "bytes" is the rank's own send size, which may differ across ranks.
VFORMS = frozenset({"Gatherv", "Scatterv", "Allgatherv", "Alltoallv", "Reduce_scatter"})
FATAL_REASONS = frozenset({"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"})

Record = dict[str, Any]
DumpSource = Union["TraceSet", str, "os.PathLike[str]", Iterable[Union["Dump", Mapping[str, Any]]]]

_REQUIRED = ("rank", "time_ns", "comms")
_RECORD_TIMES = ("enqueue_ns", "start_ns", "end_ns")
_RECORD_DEFAULTS: dict[str, Any] = {
    "coll": "?", "algorithm": None, "paths": [], "bytes": None, "count": None, "dtype": None,
    "op": None, "root": -1, "mode": "blocking", "in_place": False, "enqueue_ns": None,
    "start_ns": None, "end_ns": None, "status": "ok",
}


class TraceError(Exception):
    """No dumps to read: the directory is missing or holds no pymcoll trace dumps."""


class TraceWarning(UserWarning):
    """A dump file was skipped (truncated, unreadable, another version) or looks inconsistent."""


@dataclass
class Dump:
    """One dump file as written by one process."""

    path: str
    rank: int
    world_size: int
    pid: int
    host: str
    source: str
    reason: str
    time_ns: int
    realtime_offset_ns: int
    comms: list[dict[str, Any]]
    cpus: int = 0  # CPUs the process could run on (0: not recorded)


@dataclass
class CommTrace:
    """A rank's view of one communicator, from the newest dump that holds it."""

    id: str
    rank: int
    size: int
    world_ranks: list[int]
    last_seq: int
    capacity: int
    freed: bool
    records: list[Record]
    dump_time_ns: int
    dump_reason: str
    layout: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_seq = {r["seq"]: r for r in self.records}

    def record(self, seq: int) -> Optional[Record]:
        """The record of collective `seq`, or None (not entered, or overwritten in the ring)."""
        return self._by_seq.get(seq)

    def last_before(self, seq: int) -> Optional[Record]:
        """The newest record with a sequence number below `seq`."""
        earlier = [r for r in self.records if r["seq"] < seq]
        return earlier[-1] if earlier else None


@dataclass
class Snapshot:
    """What a rank was waiting in when one of its dumps was written."""

    reason: str
    time_ns: int
    path: str
    waits: dict[str, dict[str, Any]]  # communicator id -> the wait object


@dataclass
class RankTrace:
    """Everything one world rank left: its communicators and its snapshots, oldest first."""

    rank: int
    host: str
    pid: int
    world_size: int
    files: list[str]
    comms: dict[str, CommTrace]
    snapshots: list[Snapshot]
    cpus: int = 0

    def last_end_before(self, time_ns: int) -> Optional[tuple[str, Record]]:
        """(communicator id, record) of the collective that completed last before `time_ns`."""
        done = [(r["end_ns"], cid, r) for cid, c in self.comms.items() for r in c.records
                if r["end_ns"] is not None and r["end_ns"] <= time_ns]
        if not done:
            return None
        _, cid, rec = max(done, key=lambda t: t[0])
        return cid, rec


@dataclass
class TraceSet:
    """The merged dumps of a job: one :class:`RankTrace` per world rank that left a dump."""

    ranks: dict[int, RankTrace]
    clock: str  # "monotonic" (one host) or "realtime" (several hosts)
    problems: list[str] = field(default_factory=list)
    directory: Optional[str] = None

    @property
    def hosts(self) -> list[str]:
        """The hosts the dumps came from, sorted."""
        return sorted({t.host for t in self.ranks.values()})

    def oversubscribed_hosts(self) -> dict[str, tuple[int, int]]:
        """Host -> (ranks, CPUs) for the hosts that ran more ranks than they have CPUs."""
        out: dict[str, tuple[int, int]] = {}
        for host in self.hosts:
            here = [t for t in self.ranks.values() if t.host == host]
            cpus = max(t.cpus for t in here)
            if 0 < cpus < len(here):
                out[host] = (len(here), cpus)
        return out

    def comm_ids(self) -> list[str]:
        """Every communicator id seen in any dump, in natural order ('0.2' before '0.10')."""
        return sorted({cid for t in self.ranks.values() for cid in t.comms}, key=natural_key)

    def members(self, comm_id: str) -> dict[int, CommTrace]:
        """World rank -> that rank's view of `comm_id`, for the ranks whose dumps hold it."""
        return {w: t.comms[comm_id] for w, t in sorted(self.ranks.items()) if comm_id in t.comms}

    def world_size(self) -> int:
        """The size of MPI_COMM_WORLD: from the dumps, else the largest world rank seen plus one."""
        sizes = [t.world_size for t in self.ranks.values() if t.world_size > 0]
        if sizes:
            return max(sizes)
        seen = [w for t in self.ranks.values() for c in t.comms.values() for w in c.world_ranks]
        return max(seen + list(self.ranks), default=-1) + 1

    def missing_ranks(self) -> list[int]:
        """World ranks that belong to the job (a communicator lists them) but left no dump."""
        expected = {w for t in self.ranks.values() for c in t.comms.values() for w in c.world_ranks}
        expected.update(w for t in self.ranks.values() if t.world_size > 0 for w in range(t.world_size))
        return sorted(expected - set(self.ranks))


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders the digit runs of `text` by value."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def _int(obj: Mapping[str, Any], key: str, default: Optional[int] = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"'{key}' is {value!r}, not an integer")
    return value


def parse_dump(obj: Mapping[str, Any], path: str = "<memory>") -> Optional[Dump]:
    """A :class:`Dump` from a decoded JSON object; None when it is not a pymcoll trace dump.

    Raises ValueError naming the problem when it is one but of another version or incomplete.
    """
    if not isinstance(obj, Mapping) or obj.get("format") != FORMAT:
        return None
    if obj.get("version") != VERSION:
        raise ValueError(f"format version {obj.get('version')!r}, this reader knows version {VERSION}: "
                         "analyze it with the pymcoll that wrote it")
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise ValueError(f"incomplete dump, missing {', '.join(missing)}")
    if not isinstance(obj["comms"], list):
        raise ValueError("'comms' is not a list")
    return Dump(path=path, rank=_int(obj, "rank"), world_size=_int(obj, "world_size", -1),
                pid=_int(obj, "pid", -1), host=str(obj.get("host", "?")), source=str(obj.get("source", "?")),
                reason=str(obj.get("reason", "?")), time_ns=_int(obj, "time_ns"),
                realtime_offset_ns=_int(obj, "realtime_offset_ns", 0), comms=list(obj["comms"]),
                cpus=_int(obj, "cpus", 0))


def read_dump(path: Union[str, "os.PathLike[str]"]) -> Optional[Dump]:
    """Read one file: a :class:`Dump`, or None when the file is JSON but not a pymcoll dump.

    Raises ValueError (with the reason) for a truncated, unreadable or incomplete dump.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable: {exc}") from exc
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        # The process may have died, or run out of disk, while writing it.
        raise ValueError(f"truncated or not JSON ({exc.msg} at line {exc.lineno})") from exc
    return parse_dump(obj, str(path))


def _shifted(value: Optional[int], shift: int) -> Optional[int]:
    return None if value is None else value + shift


def _record(raw: Mapping[str, Any], shift: int) -> Record:
    rec = dict(_RECORD_DEFAULTS)
    rec.update(raw)
    for key in _RECORD_TIMES:
        rec[key] = _shifted(rec[key], shift)
    return rec


def _comm(raw: Mapping[str, Any], dump: Dump, shift: int) -> CommTrace:
    if not isinstance(raw, Mapping):
        raise TypeError(f"not an object: {raw!r:.40}")
    records = sorted((_record(r, shift) for r in raw.get("records") or [] if "seq" in r), key=lambda r: r["seq"])
    layout = {k: raw[k] for k in ("node", "nnodes", "local_rank", "local_size") if k in raw}
    return CommTrace(id=str(raw["id"]), rank=int(raw.get("rank", -1)), size=int(raw.get("size", 0)),
                     world_ranks=list(raw.get("world_ranks") or []), last_seq=int(raw.get("last_seq", 0)),
                     capacity=int(raw.get("capacity", 0)), freed=bool(raw.get("freed", False)),
                     records=records, dump_time_ns=dump.time_ns + shift, dump_reason=dump.reason, layout=layout)


def _snapshot(dump: Dump, shift: int) -> Snapshot:
    waits = {}
    for c in dump.comms:
        wait = c.get("wait") if isinstance(c, Mapping) else None
        if isinstance(wait, Mapping) and "id" in c:
            waits[str(c["id"])] = dict(wait, since_ns=_shifted(wait.get("since_ns"), shift))
    return Snapshot(reason=dump.reason, time_ns=dump.time_ns + shift, path=dump.path, waits=waits)


def _one_process(rank: int, dumps: list[Dump], problems: list[str]) -> list[Dump]:
    """The dumps of the newest process that claimed `rank` (two jobs may have shared DIR)."""
    newest = max(dumps, key=lambda d: d.time_ns)
    keep = [d for d in dumps if (d.pid, d.host) == (newest.pid, newest.host)]
    if len(keep) < len(dumps):
        others = sorted({os.path.basename(d.path) for d in dumps if d not in keep})
        _warn(problems, f"rank {rank} was dumped by more than one process (two jobs in one directory?): "
                        f"using pid {newest.pid} on {newest.host}, ignoring {', '.join(others)}")
    return keep


def _rank_trace(rank: int, dumps: list[Dump], multi_host: bool, problems: list[str]) -> RankTrace:
    dumps = sorted(_one_process(rank, dumps, problems), key=lambda d: d.time_ns)
    comms: dict[str, CommTrace] = {}
    for d in dumps:  # oldest first: a newer dump's communicator replaces an older one's
        for raw in d.comms:
            try:
                comm = _comm(raw, d, _shift(d, multi_host))
            except (KeyError, TypeError, ValueError) as exc:
                _warn(problems, f"{d.path}: skipped a malformed communicator entry ({exc!r})")
                continue
            comms[comm.id] = comm
    last = dumps[-1]
    return RankTrace(rank=rank, host=last.host, pid=last.pid, world_size=max(d.world_size for d in dumps),
                     files=[d.path for d in dumps], comms=comms,
                     snapshots=[_snapshot(d, _shift(d, multi_host)) for d in dumps], cpus=last.cpus)


def _shift(dump: Dump, multi_host: bool) -> int:
    # One host shares CLOCK_MONOTONIC; across hosts only CLOCK_REALTIME is comparable.
    return dump.realtime_offset_ns if multi_host else 0


def _warn(problems: list[str], message: str) -> None:
    problems.append(message)
    warnings.warn(message, TraceWarning, stacklevel=3)


def _parsed(dump: Union[Dump, Mapping[str, Any]], problems: list[str]) -> Optional[Dump]:
    if isinstance(dump, Dump):
        return dump
    try:
        return parse_dump(dump)
    except ValueError as exc:
        _warn(problems, f"skipped a dump: {exc}")
        return None


def merge_dumps(dumps: Iterable[Union[Dump, Mapping[str, Any]]], directory: Optional[str] = None,
                problems: Optional[list[str]] = None) -> TraceSet:
    """Merge dumps (:class:`Dump` objects or decoded JSON dicts) into a :class:`TraceSet`.

    Per rank and communicator the newest dump's records win; every dump becomes a snapshot.
    """
    problems = [] if problems is None else problems
    parsed = [d for d in (_parsed(d, problems) for d in dumps) if d is not None]
    multi_host = len({d.host for d in parsed}) > 1
    by_rank: dict[int, list[Dump]] = {}
    for d in parsed:
        by_rank.setdefault(d.rank, []).append(d)
    ranks = {r: _rank_trace(r, ds, multi_host, problems) for r, ds in sorted(by_rank.items())}
    return TraceSet(ranks=ranks, clock="realtime" if multi_host else "monotonic",
                    problems=problems, directory=directory)


def load_dumps(directory: Union[str, "os.PathLike[str]"]) -> TraceSet:
    """Read and merge every pymcoll trace dump (``*.json``) in `directory`.

    Files that are truncated or unreadable are skipped with a :class:`TraceWarning` (also listed in
    ``TraceSet.problems``); JSON files of other formats are ignored. Raises :class:`TraceError` when
    `directory` does not exist or holds no dump.
    """
    path = Path(directory)
    hint = f"set PYMCOLL_TRACE={path} when running the job so that every rank dumps its collectives there"
    if not path.is_dir():
        raise TraceError(f"trace directory {path} does not exist or is not a directory: {hint}")
    problems: list[str] = []
    dumps = []
    for file in sorted(path.glob("*.json"), key=lambda p: natural_key(p.name)):
        try:
            dump = read_dump(file)
        except ValueError as exc:
            _warn(problems, f"skipped {file}: {exc}")
            continue
        if dump is not None:
            dumps.append(dump)
    if not dumps:
        raise TraceError(f"{path} holds no pymcoll trace dumps (rank<N>.json): {hint}")
    return merge_dumps(dumps, directory=str(path), problems=problems)


def as_trace(dumps: DumpSource) -> TraceSet:
    """A :class:`TraceSet` from a TraceSet, a dump directory, or an iterable of dumps.

    Raises :class:`TraceError` when there is no dump among them.
    """
    if isinstance(dumps, TraceSet):
        return dumps
    if isinstance(dumps, (str, os.PathLike)):
        return load_dumps(dumps)
    if isinstance(dumps, Mapping):
        raise TypeError("dumps: pass a list of dump dicts (or a directory, or load_dumps()'s result), "
                        "not a single dump dict")
    trace = merge_dumps(dumps)
    if not trace.ranks:
        raise TraceError(f"dumps: none of the given objects is a pymcoll trace dump (\"format\": \"{FORMAT}\")")
    return trace
