"""What went wrong in a job, from its trace dumps: hangs, mismatched calls, stragglers.

:func:`analyze` looks at every communicator of the merged dumps and returns a
:class:`Report`:

* hang: the first collective of a communicator that did not complete on every
  member, the members that never entered it or entered it only after the others
  had given up, and what those ranks last did (their last record, and what each
  snapshot caught them doing);
* mismatch: the first sequence number where members called different
  collectives (or with a different root, type, operation or size), recognising a
  skipped or an extra call;
* stragglers: the rank that arrives last, again and again (counted up to a
  communicator's hang or mismatch: after it, arrival order means nothing);
* a per-collective summary: calls, sizes, durations, arrival spread, failures.

``report.paragraph`` says it in words, worst problem first; ``report.table()``
prints the numbers; ``report.to_dict()`` holds everything for ``--json``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from .dumps import (FATAL_REASONS, REDUCTIONS, ROOTED, VFORMS, CommTrace, DumpSource, Record, Snapshot,
                    TraceSet, as_trace, load_dumps)

STRAGGLER_MIN_CALLS = 4
STRAGGLER_MIN_SHARE = 0.5
# Last by a hair is noise, not a straggler; across hosts the realtime clocks
# themselves disagree by up to about a millisecond.
STRAGGLER_MIN_LATENESS_NS = {"monotonic": 100_000, "realtime": 1_000_000}
# More ranks than CPUs on a host: the scheduler's time slices make some rank
# last by milliseconds at every call.
OVERSUBSCRIBED_MIN_LATENESS_NS = 5_000_000
TOP_RANKS = 10  # rows of the last-arrival table
DETAILED_RANKS = 2  # ranks described one by one in a hang; the JSON report holds them all


# -- words and numbers ---------------------------------------------------------------------------

def duration_text(ns: float) -> str:
    """A duration in the unit that suits it: '850 ns', '12.5 us', '20 ms', '3.2 s'."""
    ns = abs(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            value = ns / scale
            return f"{value:.0f} {unit}" if value >= 1000 else f"{value:.3g} {unit}"
    return f"{ns:.0f} ns"


def _runs(ranks: Sequence[int]) -> list[str]:
    """Sorted ranks as items, runs of three or more as 'a-b': [0, 1, 2, 3, 5] -> ['0-3', '5']."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    items: list[str] = []
    for run in runs:
        items += [f"{run[0]}-{run[-1]}"] if len(run) > 2 else [str(r) for r in run]
    return items


def ranks_text(ranks: Iterable[int]) -> str:
    """'rank 3', 'ranks 1 and 3', 'ranks 0, 1 and 3', 'ranks 0-7 and 9'."""
    ordered = sorted(set(ranks))
    if not ordered:
        return "no rank"
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    items = _runs(ordered)
    body = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return f"ranks {body}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _relative(t_ns: int, ref_ns: int, label: str) -> str:
    when = "before" if t_ns <= ref_ns else "after"
    return f"{duration_text(ref_ns - t_ns)} {when} {label}"


def call_text(rec: Record) -> str:
    """The call as MPI matches it: 'Bcast(8 B, root 0)', 'Allreduce(64 B, float64, sum)', 'Gatherv(root 1)'.

    Holds exactly the fields that must agree on every rank, so it also serves as the signature.
    """
    coll = rec["coll"]
    parts = []
    if coll not in VFORMS and rec["bytes"] is not None:
        parts.append(f"{rec['bytes']} B")
    if coll in REDUCTIONS:
        parts += [str(rec["dtype"]), str(rec["op"])]
    if coll in ROOTED:
        parts.append(f"root {rec['root']}")
    return f"{coll}({', '.join(parts)})"


def _snapshot_when(reason: str) -> str:
    if reason in FATAL_REASONS:
        return f"when it crashed ({reason})"
    return {"SIGUSR1": "when signalled (SIGUSR1)", "timeout": "when its own timeout fired",
            "request": "at its requested dump", "finalize": "at finalize"}.get(reason, f"at its {reason} dump")


def _detailed(acts: list[dict[str, Any]], what: str, sentence: Callable[[dict[str, Any]], str]) -> list[str]:
    """A sentence per rank; for many ranks one naming them all, then the most telling few in detail."""
    if len(acts) <= DETAILED_RANKS:
        return [sentence(a) for a in acts]
    # A rank caught by a signal or a timeout says more than one that only reached finalize.
    shown = sorted(acts, key=lambda a: (all(r == "finalize" for r in a["snapshots"]), a["rank"]))[:DETAILED_RANKS]
    return [f"{_cap(ranks_text(a['rank'] for a in acts))} {what}", *map(sentence, shown),
            f"The other {len(acts) - len(shown)} are described in the --json report"]


# -- one communicator as all its members saw it ----------------------------------------------------

@dataclass
class CommView:
    """One communicator across the ranks that dumped it."""

    id: str
    size: int
    world_ranks: list[int]
    members: dict[int, CommTrace]  # world rank -> its view
    absent: list[int]  # members whose dumps do not hold this communicator
    is_world: bool

    def where(self) -> str:
        """'' for the world communicator, else ' on communicator <id> (size <n>)'."""
        return "" if self.is_world else f" on communicator {self.id} (size {self.size})"

    def seqs(self) -> list[int]:
        """Every sequence number any member recorded, ascending."""
        return sorted({r["seq"] for ct in self.members.values() for r in ct.records})

    def records_at(self, seq: int) -> dict[int, Record]:
        """World rank -> its record of collective `seq`, for the members that hold one."""
        return {w: r for w, ct in self.members.items() if (r := ct.record(seq)) is not None}

    def coll_at(self, seq: int) -> str:
        """The collective most members recorded at `seq`."""
        colls = Counter(r["coll"] for r in self.records_at(seq).values())
        return colls.most_common(1)[0][0] if colls else "collective"

    def arrivals(self, seq: int) -> Optional[list[tuple[int, int]]]:
        """(enqueue_ns, world rank) of every member, earliest first; None unless all members have one."""
        recs = self.records_at(seq)
        if len(recs) != self.size or any(r["enqueue_ns"] is None for r in recs.values()):
            return None
        return sorted((r["enqueue_ns"], w) for w, r in recs.items())

    def world_of(self, comm_ranks: Iterable[int]) -> list[int]:
        """World ranks of the given ranks of this communicator."""
        return [self.world_ranks[c] for c in comm_ranks if 0 <= c < len(self.world_ranks)]


def comm_views(trace: TraceSet) -> list[CommView]:
    """A :class:`CommView` per communicator id, in natural id order."""
    world_size = trace.world_size()
    views = []
    for cid in trace.comm_ids():
        members = trace.members(cid)
        first = next(iter(members.values()))
        world_ranks = first.world_ranks or sorted(members)
        views.append(CommView(id=cid, size=first.size or len(world_ranks), world_ranks=world_ranks,
                              members=members, absent=[w for w in world_ranks if w not in members],
                              is_world=world_ranks == list(range(world_size))))
    return views


# -- hangs -------------------------------------------------------------------------------------------

def first_incomplete(view: CommView) -> Optional[int]:
    """The first seq some member failed (any status but ok) or that some members entered and others did not."""
    candidates = [next((r["seq"] for r in ct.records if r["status"] != "ok"), None) for ct in view.members.values()]
    found = [k for k in candidates if k is not None]
    lasts = [ct.last_seq for ct in view.members.values()]
    if min(lasts) < max(lasts):
        found.append(min(lasts) + 1)
    return min(found, default=None)


class _Analysis:
    """The hang and mismatch findings, with the cross-communicator lookups their sentences need."""

    def __init__(self, trace: TraceSet, views: list[CommView]) -> None:
        self.trace = trace
        self.views = {v.id: v for v in views}

    def where(self, comm_id: str) -> str:
        view = self.views.get(comm_id)
        return view.where() if view else f" on communicator {comm_id}"

    # What a rank was doing --------------------------------------------------------------------

    def wait_text(self, comm_id: str, wait: dict[str, Any], snap: Snapshot) -> str:
        """'waiting in Bcast #3 on communicator 0.2 (size 2) for rank 1 (data flag) for 2 s'."""
        view = self.views.get(comm_id)
        head = f"waiting in {wait.get('coll', '?')} #{wait.get('seq', '?')}{self.where(comm_id)}"
        if wait.get("kind") == "mpi":
            head += f" in {wait.get('call', 'MPI')}"
        else:
            whom = view.world_of(wait.get("waiting_for") or []) if view else []
            head += f" for {ranks_text(whom)} ({wait.get('flag', '?')} flag)"
        since = wait.get("since_ns")
        return head if since is None else f"{head} for {duration_text(snap.time_ns - since)}"

    def snapshot_text(self, rank: int, snap: Snapshot, seq: int) -> str:
        """What one snapshot caught `rank` doing, as a clause."""
        when = _snapshot_when(snap.reason)
        if snap.waits:
            return f"{when} it was " + " and ".join(self.wait_text(c, w, snap) for c, w in snap.waits.items())
        if snap.reason == "finalize":
            return f"it went on to finalize without entering #{seq}"
        last = self.trace.ranks[rank].last_end_before(snap.time_ns)
        if last is None:
            since = "since it started (it had completed no collective)"
        else:
            cid, rec = last
            since = (f"since its {rec['coll']} #{rec['seq']}{self.where(cid)} ended "
                     f"{duration_text(snap.time_ns - rec['end_ns'])} earlier")
        return f"{when} it was in no pymcoll collective: in user code or another library {since}"

    def previous_text(self, ct: CommTrace, seq: int, ref_ns: Optional[int], ref_label: str) -> tuple[str, Any]:
        """A clause on the rank's last record before `seq` on this communicator, and that record as a dict."""
        prev = ct.last_before(seq)
        if prev is None:
            text = "it had entered no collective there" if ct.last_seq == 0 else \
                f"its records before #{seq} were overwritten in the ring"
            return text, None
        text = f"its last collective there was {prev['coll']} #{prev['seq']} ({prev['status']})"
        if prev["end_ns"] is None:
            text += ", still running"
        elif ref_ns is not None:
            text += f", which ended {_relative(prev['end_ns'], ref_ns, ref_label)}"
        return text, {k: prev[k] for k in ("seq", "coll", "status", "end_ns")}

    def activity(self, view: CommView, rank: int, seq: int, ref: tuple[Optional[int], str],
                 entered: bool) -> dict[str, Any]:
        """What `rank` last did before #seq: its previous record, then each snapshot (finalize ones only
        when it never entered #seq)."""
        text, prev = self.previous_text(view.members[rank], seq, *ref)
        snaps = [s for s in self.trace.ranks[rank].snapshots if not (entered and s.reason == "finalize")]
        clauses = [text] + [self.snapshot_text(rank, s, seq) for s in snaps]
        return {"rank": rank, "previous": prev, "snapshots": [s.reason for s in snaps], "text": "; ".join(clauses)}

    # Who waited, and for whom --------------------------------------------------------------------

    @staticmethod
    def snapshot_wait(view: CommView, snap: Snapshot, rank: int, seq: int) -> Optional[dict[str, Any]]:
        """The wait in #seq that `snap` caught `rank` in, as a waiter entry; None if it caught none."""
        wait = snap.waits.get(view.id)
        if not wait or wait.get("seq") != seq or wait.get("since_ns") is None:
            return None
        mpi = wait.get("kind") == "mpi"
        return {"rank": rank, "waited_ns": snap.time_ns - wait["since_ns"], "for_comm_ranks": wait.get("waiting_for"),
                "for_ranks": None if mpi else view.world_of(wait.get("waiting_for") or []), "pids": wait.get("pids"),
                "how": f"in {wait.get('call')}" if mpi else f"{wait.get('flag', '?')} flag", "seen": snap.reason}

    @staticmethod
    def record_wait(view: CommView, rank: int, rec: Record) -> Optional[dict[str, Any]]:
        """A failed record as a waiter entry (how long it ran; for whom is unknown)."""
        begin = rec["start_ns"] if rec["start_ns"] is not None else rec["enqueue_ns"]
        if rec["status"] == "ok" or begin is None:
            return None
        end = rec["end_ns"] if rec["end_ns"] is not None else view.members[rank].dump_time_ns
        return {"rank": rank, "waited_ns": end - begin, "for_comm_ranks": None, "for_ranks": None, "pids": None,
                "how": "", "seen": "record"}

    def waiter(self, view: CommView, rank: int, rec: Record, seq: int) -> Optional[dict[str, Any]]:
        """How long `rank` waited in #seq and for whom: from its longest snapshot wait, else its record."""
        caught = [w for s in self.trace.ranks[rank].snapshots if (w := self.snapshot_wait(view, s, rank, seq))]
        best = max(caught, key=lambda w: w["waited_ns"]) if caught else self.record_wait(view, rank, rec)
        return None if best is None else dict(best, status=rec["status"])

    @staticmethod
    def waiters_text(waiters: list[dict[str, Any]]) -> str:
        """'ranks 0 and 1 waited up to 10 s for rank 2 (data flag) and gave up (timeout)', one clause per group."""
        groups: dict[tuple[Any, str], list[dict[str, Any]]] = {}
        for w in waiters:
            groups.setdefault((tuple(w["for_ranks"]) if w["for_ranks"] is not None else None, w["how"]), []).append(w)
        clauses = []
        for (whom, how), ws in groups.items():
            longest = max(w["waited_ns"] for w in ws)
            text = f"{ranks_text(w['rank'] for w in ws)} waited {'up to ' if len(ws) > 1 else ''}" \
                   f"{duration_text(longest)} in it"
            if whom is not None:
                text += f" for {ranks_text(whom)}"
            if how:
                text += f" ({how})"
            failed = sorted({w["status"] for w in ws} - {"ok", "running"})
            running = any(w["status"] == "running" for w in ws)
            text += f" and gave up ({', '.join(failed)})" if failed else \
                f" and {'was' if len(ws) == 1 else 'were'} still waiting when dumped" if running else ""
            clauses.append(text)
        return "; ".join(clauses)

    # The hang of one communicator ------------------------------------------------------------------

    def hang(self, view: CommView) -> Optional[dict[str, Any]]:
        """The first incomplete collective of `view`, who held it up and what they did instead."""
        seq = first_incomplete(view)
        if seq is None:
            return None
        recs = view.records_at(seq)
        gave_up = {w: r["end_ns"] for w, r in recs.items() if r["status"] != "ok" and r["end_ns"] is not None}
        late = {}
        for w, r in recs.items():
            others = [t for v, t in gave_up.items() if v != w]
            if others and r["enqueue_ns"] is not None and r["enqueue_ns"] > min(others):
                late[w] = r["enqueue_ns"] - min(others)
        never = [w for w, ct in view.members.items() if ct.last_seq < seq]
        gave_up_ns = min((t for w, t in gave_up.items() if w not in late), default=None)
        ref = self.reference(view, recs, gave_up_ns, late)
        waiters = [x for w, r in recs.items() if w not in late and (x := self.waiter(view, w, r, seq))]
        hang = {
            "comm": view.id, "size": view.size, "seq": seq, "coll": view.coll_at(seq),
            "statuses": {str(w): r["status"] for w, r in recs.items()},
            "gave_up_ns": gave_up_ns,
            "waiting": waiters,
            "never_entered": [self.activity(view, w, seq, ref, entered=False) for w in never],
            "late": [dict(self.activity(view, w, seq, ref, entered=True), late_ns=ns) for w, ns in late.items()],
            "absent": view.absent,
        }
        hang["named"] = sorted(set(never) | set(late) | set(view.absent))
        hang["text"] = self.hang_text(view, hang)
        return hang

    @staticmethod
    def reference(view: CommView, recs: dict[int, Record], gave_up_ns: Optional[int],
                  late: dict[int, int]) -> tuple[Optional[int], str]:
        """The moment the others stopped waiting (their earliest give-up, else their dump) and its name."""
        if gave_up_ns is not None:
            return gave_up_ns, "the others gave up"
        dumps = [view.members[w].dump_time_ns for w in recs if w not in late]
        return (min(dumps), "the others' dumps") if dumps else (None, "")

    def hang_text(self, view: CommView, hang: dict[str, Any]) -> str:
        seq = hang["seq"]
        head = f"Hang: {hang['coll']} #{seq}{view.where()} did not complete on every rank"
        if hang["waiting"]:
            head += f": {self.waiters_text(hang['waiting'])}"
        sentences = [head]
        sentences += _detailed(hang["never_entered"], f"never entered #{seq}",
                               lambda a: f"Rank {a['rank']} never entered #{seq}: {a['text']}")
        sentences += _detailed(hang["late"], f"entered #{seq} only after the others gave up",
                               lambda a: f"Rank {a['rank']} entered #{seq} only {duration_text(a['late_ns'])} "
                                         f"after the others gave up; before that {a['text']}")
        if hang["absent"]:
            sentences.append(f"{_cap(ranks_text(hang['absent']))} of this communicator left no dump "
                             "(killed before it could dump?)")
        return ". ".join(sentences) + "."

    # Mismatches ------------------------------------------------------------------------------------

    @staticmethod
    def signatures(view: CommView, seq: int) -> dict[str, list[int]]:
        """Call text -> world ranks that recorded it at `seq`."""
        groups: dict[str, list[int]] = {}
        for w, r in view.records_at(seq).items():
            groups.setdefault(call_text(r), []).append(w)
        return groups

    @staticmethod
    def majority_call(view: CommView, ranks: list[int], seq: int) -> Optional[str]:
        calls = Counter(call_text(r) for w, r in view.records_at(seq).items() if w in ranks)
        return calls.most_common(1)[0][0] if calls else None

    def shifted_match(self, view: CommView, rank: int, majority: list[int], seq: int, mine: int, theirs: int) -> bool:
        """True when rank's records seq+mine, seq+mine+1, ... equal the majority's seq+theirs, ... (at least one)."""
        ct, compared = view.members[rank], 0
        while (rec := ct.record(seq + mine + compared)) is not None:
            other = self.majority_call(view, majority, seq + theirs + compared)
            if other is None:
                break
            if call_text(rec) != other:
                return False
            compared += 1
        return compared > 0

    def deviant(self, view: CommView, rank: int, rec: Record, majority: list[int], seq: int) -> dict[str, Any]:
        """How `rank`, whose record `rec` at `seq` differs from the majority's, differs: skipped, extra or other."""
        if self.shifted_match(view, rank, majority, seq, 0, 1):
            return {"rank": rank, "kind": "skipped", "call": self.majority_call(view, majority, seq)}
        kind = "extra" if self.shifted_match(view, rank, majority, seq, 1, 0) else "different"
        return {"rank": rank, "kind": kind, "call": call_text(rec)}

    def mismatch(self, view: CommView) -> Optional[dict[str, Any]]:
        """The first seq of `view` whose members' calls differ, and how each odd rank differs."""
        bad = [k for k in view.seqs() if len(self.signatures(view, k)) > 1]
        if not bad:
            return None
        seq = bad[0]
        groups = self.signatures(view, seq)
        call, majority = max(groups.items(), key=lambda kv: (len(kv[1]), -min(kv[1])))
        recs = view.records_at(seq)
        deviants = [self.deviant(view, w, recs[w], majority, seq) for w in recs if w not in majority]
        found = {"comm": view.id, "size": view.size, "seq": seq, "coll": view.coll_at(seq),
                 "majority": {"ranks": majority, "call": call}, "deviants": deviants, "later_mismatches": len(bad) - 1}
        found["text"] = self.mismatch_text(view, found)
        return found

    @staticmethod
    def mismatch_text(view: CommView, found: dict[str, Any]) -> str:
        seq, majority = found["seq"], found["majority"]
        groups: dict[tuple[str, str], list[int]] = {}
        for d in found["deviants"]:
            groups.setdefault((d["kind"], d["call"]), []).append(d["rank"])
        clauses = []
        for (kind, call), ranks in groups.items():
            who, their = ranks_text(ranks), "its" if len(ranks) == 1 else "their"
            if kind == "different":
                clauses.append(f"{who} called {call} at #{seq} where {ranks_text(majority['ranks'])} "
                               f"called {majority['call']}")
                continue
            skipped = kind == "skipped"
            what = (f"skipped {call.split('(')[0]} #{seq} ({call})" if skipped
                    else f"made an extra call, {call} at #{seq}")
            mine, theirs = (seq, seq + 1) if skipped else (seq + 1, seq)
            clauses.append(f"{who} {what}: from #{mine} on {their} calls match the others' from #{theirs} on")
        text = f"Mismatch{view.where()}: {'; '.join(clauses)}."
        if found["later_mismatches"]:
            later = found["later_mismatches"]
            text += (f" {_plural(later, 'later collective')} there {'differs' if later == 1 else 'differ'} as well, "
                     "a consequence of this one (not reported).")
        return text


# -- stragglers and the summary table ----------------------------------------------------------

def straggler_stats(views: list[CommView], clock: str, stop: Optional[dict[str, int]] = None,
                    oversubscribed: Optional[dict[str, tuple[int, int]]] = None) -> dict[str, Any]:
    """Who arrived last, over the collectives every member of a communicator recorded.

    `stop` maps a communicator id to the first seq not to count: from a hang or a mismatch on, the
    calls are refused at once or pair different calls, so arrival order means nothing there.
    `oversubscribed` (host -> (ranks, CPUs)) raises the lateness a straggler needs.
    """
    floor = STRAGGLER_MIN_LATENESS_NS.get(clock, STRAGGLER_MIN_LATENESS_NS["realtime"])
    if oversubscribed:
        floor = max(floor, OVERSUBSCRIBED_MIN_LATENESS_NS)
    stop = stop or {}
    stats: dict[int, dict[str, Any]] = {}
    compared = 0
    for view in views:
        for seq in view.seqs() if view.size > 1 else []:
            arrivals = view.arrivals(seq) if seq < stop.get(view.id, seq + 1) else None
            if arrivals is None:
                continue
            compared += 1
            for _, w in arrivals:
                stats.setdefault(w, {"rank": w, "of": 0, "late": []})["of"] += 1
            (last_t, last_w), (next_t, _) = arrivals[-1], arrivals[-2]
            if last_t > next_t:  # a tie has no last arriver
                stats[last_w]["late"].append(last_t - next_t)
    rows = [_straggler_row(s, floor) for s in stats.values()]
    rows.sort(key=lambda r: (-r["last"], -r["mean_lateness_us"], r["rank"]))
    return {"compared": compared, "stopped_at": stop, "min_calls": STRAGGLER_MIN_CALLS,
            "min_share": STRAGGLER_MIN_SHARE, "min_lateness_us": floor / 1e3, "ranks": rows,
            "oversubscribed": {h: {"ranks": r, "cpus": c} for h, (r, c) in (oversubscribed or {}).items()},
            "stragglers": [r["rank"] for r in rows if r["straggler"]]}


def _straggler_row(s: dict[str, Any], floor_ns: int) -> dict[str, Any]:
    late = s["late"]
    mean = sum(late) / len(late) if late else 0.0
    named = s["of"] >= STRAGGLER_MIN_CALLS and len(late) >= STRAGGLER_MIN_SHARE * s["of"] and mean >= floor_ns
    return {"rank": s["rank"], "last": len(late), "of": s["of"], "fraction": len(late) / s["of"],
            "mean_lateness_us": mean / 1e3, "max_lateness_us": max(late, default=0) / 1e3, "straggler": named}


def _mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def summary_rows(view: CommView) -> list[dict[str, Any]]:
    """Per collective name on `view`: calls, bytes range, duration, arrival spread (us), failed records."""
    acc: dict[str, dict[str, Any]] = {}
    for seq in view.seqs():
        recs = view.records_at(seq).values()
        a = acc.setdefault(view.coll_at(seq), {"calls": 0, "bytes": [], "dur": [], "spread": [], "failures": 0})
        a["calls"] += 1
        a["bytes"] += [r["bytes"] for r in recs if r["bytes"] is not None]
        a["dur"] += [(r["end_ns"] - r["start_ns"]) / 1e3 for r in recs
                     if r["end_ns"] is not None and r["start_ns"] is not None]
        a["failures"] += sum(r["status"] != "ok" for r in recs)
        arrivals = view.arrivals(seq)
        if arrivals is not None:
            a["spread"].append((arrivals[-1][0] - arrivals[0][0]) / 1e3)
    return [{"comm": view.id, "size": view.size, "coll": coll, "calls": a["calls"],
             "bytes_min": min(a["bytes"], default=None), "bytes_max": max(a["bytes"], default=None),
             "mean_us": _mean(a["dur"]), "max_us": max(a["dur"], default=None),
             "spread_us": _mean(a["spread"]), "failures": a["failures"]} for coll, a in acc.items()]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def format_table(title: str, columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]]) -> str:
    """A '# title' line, a '#' column line and right-aligned rows (OSU / nccl-tests style).

    `columns` holds (row key, column heading) pairs.
    """
    cells = [[_cell(row[key]) for key, _ in columns] for row in rows]
    widths = [max([len(head)] + [len(c[i]) for c in cells]) for i, (_, head) in enumerate(columns)]
    lines = [f"# {title}", "# " + "  ".join(h.rjust(w) for (_, h), w in zip(columns, widths))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


SUMMARY_COLUMNS = (("comm", "comm"), ("size", "size"), ("coll", "collective"), ("calls", "calls"),
                   ("bytes_min", "bytes_min"), ("bytes_max", "bytes_max"), ("mean_us", "mean_us"),
                   ("max_us", "max_us"), ("spread_us", "spread_us"), ("failures", "failures"))
STRAGGLER_COLUMNS = (("rank", "rank"), ("last", "last"), ("of", "of"), ("fraction", "fraction"),
                     ("mean_lateness_us", "mean_late_us"), ("max_lateness_us", "max_late_us"),
                     ("straggler", "straggler"))


# -- the report ----------------------------------------------------------------------------------

@dataclass
class Report:
    """The findings of :func:`analyze`. ``paragraph`` says them in words; ``table()`` prints the numbers."""

    ranks: list[int]
    missing_ranks: list[int]
    crashed: list[dict[str, Any]]
    hosts: list[str]
    clock: str
    communicators: list[dict[str, Any]]
    collectives: int
    hangs: list[dict[str, Any]]
    mismatches: list[dict[str, Any]]
    stragglers: dict[str, Any]
    summary: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)
    rank_hosts: dict[int, str] = field(default_factory=dict)

    @property
    def paragraph(self) -> str:
        """One paragraph, worst problem first: hang, missing or crashed ranks, mismatch, stragglers."""
        found = self.hangs or self.mismatches or self.stragglers["stragglers"]
        named = set(self.hangs[0]["named"]) if self.hangs else set()
        parts = [] if found else [
            f"No hang, mismatch or straggler found in {_plural(self.collectives, 'collective')} on "
            f"{_plural(len(self.communicators), 'communicator')} from {_plural(len(self.ranks), 'rank')}."]
        if self.hangs:
            parts.append(self.hangs[0]["text"])
            parts += [f"Also incomplete: {h['coll']} #{h['seq']} on communicator {h['comm']}." for h in self.hangs[1:]]
        parts += self._rank_sentences(named)
        parts += [self._mismatch_sentence(m) for m in self.mismatches]
        parts += [self._straggler_sentence(r) for r in self.stragglers["ranks"] if r["straggler"]]
        parts += self._host_sentence(named | set(self.stragglers["stragglers"]))
        return " ".join(parts)

    def _host_sentence(self, ranks: set[int]) -> list[str]:
        """Where the ranks named above run, when the job spans several hosts."""
        where = [f"rank {r} on {self.rank_hosts[r]}" for r in sorted(ranks) if r in self.rank_hosts]
        if len(self.hosts) < 2 or not where:
            return []
        return [f"Hosts: {', '.join(where)}."]

    def _rank_sentences(self, named: set[int]) -> list[str]:
        sentences = []
        missing = [w for w in self.missing_ranks if w not in named]
        if missing:
            sentences.append(f"{_cap(ranks_text(missing))} left no dump (killed before it could dump?).")
        for c in self.crashed:
            if c["rank"] not in named:
                sentences.append(f"Rank {c['rank']} crashed ({c['signal']}); see {os.path.basename(c['file'])}.")
        return sentences

    def _mismatch_sentence(self, m: dict[str, Any]) -> str:
        cause = any(h["comm"] == m["comm"] and h["seq"] >= m["seq"] for h in self.hangs)
        return m["text"] + (" This mismatch is the likely cause of the hang." if cause else "")

    def _straggler_sentence(self, r: dict[str, Any]) -> str:
        return (f"Straggler: rank {r['rank']} arrived last at {r['last']} of {r['of']} collectives "
                f"({r['fraction']:.0%}), on average {duration_text(r['mean_lateness_us'] * 1e3)} after the "
                f"next-latest rank (at most {duration_text(r['max_lateness_us'] * 1e3)}): it spends that long "
                "outside the collectives (computation, I/O, a slower node) before calling them.")

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-serialisable, with the paragraph."""
        return dict(asdict(self), paragraph=self.paragraph)

    def table(self) -> str:
        """The per-collective summary and the last-arrival counts as '#'-headed text tables."""
        hosts = f"{_plural(len(self.hosts), 'host')} ({', '.join(self.hosts)})"
        head = (f"# pymcoll trace: {_plural(len(self.ranks), 'rank')} on {hosts}, "
                f"{_plural(len(self.communicators), 'communicator')}, {_plural(self.collectives, 'collective')}; "
                f"clock {self.clock}")
        summary = format_table("Collectives per communicator: durations end - start, spread = last minus first "
                               "arrival (us)", SUMMARY_COLUMNS, self.summary)
        s = self.stragglers
        late = format_table(
            f"Last arrivals over {_plural(s['compared'], 'collective')} every member recorded"
            f"{' (up to the hang or mismatch)' if s['stopped_at'] else ''}; straggler: last in "
            f">= {s['min_share']:.0%} of >= {s['min_calls']}, mean lateness >= {s['min_lateness_us']:g} us",
            STRAGGLER_COLUMNS, s["ranks"][:TOP_RANKS])
        over = "; ".join(f"{h} ({v['ranks']} ranks on {v['cpus']} CPUs)" for h, v in s["oversubscribed"].items())
        if over:
            head += f"\n# oversubscribed: {over}: a straggler must be at least {s['min_lateness_us'] / 1e3:g} ms late"
        return "\n#\n".join([head, summary, late])


def _crashed(trace: TraceSet) -> list[dict[str, Any]]:
    return [{"rank": w, "signal": s.reason, "file": s.path} for w, t in trace.ranks.items()
            for s in t.snapshots if s.reason in FATAL_REASONS]


def analyze(dumps: DumpSource) -> Report:
    """Analyze a job's dumps: a directory, :func:`load_dumps`'s result, or an iterable of dump dicts."""
    trace = as_trace(dumps)
    views = comm_views(trace)
    analysis = _Analysis(trace, views)
    hangs = [h for v in views if (h := analysis.hang(v))]
    hangs.sort(key=lambda h: h["gave_up_ns"] if h["gave_up_ns"] is not None else float("inf"))
    mismatches = [m for v in views if (m := analysis.mismatch(v))]
    stop: dict[str, int] = {}
    for found in hangs + mismatches:
        stop[found["comm"]] = min(found["seq"], stop.get(found["comm"], found["seq"]))
    return Report(
        ranks=sorted(trace.ranks), missing_ranks=trace.missing_ranks(), crashed=_crashed(trace),
        hosts=trace.hosts, clock=trace.clock,
        communicators=[{"id": v.id, "size": v.size, "world_ranks": v.world_ranks, "world": v.is_world,
                        "absent": v.absent} for v in views],
        collectives=sum(len(v.seqs()) for v in views), hangs=hangs, mismatches=mismatches,
        stragglers=straggler_stats(views, trace.clock, stop, trace.oversubscribed_hosts()),
        summary=[row for v in views for row in summary_rows(v)], problems=list(trace.problems),
        rank_hosts={r: t.host for r, t in sorted(trace.ranks.items())})


def analyze_dir(path: Union[str, "os.PathLike[str]"]) -> Report:
    """:func:`analyze` the dumps in directory `path` (raises TraceError when it holds none)."""
    return analyze(load_dumps(path))
