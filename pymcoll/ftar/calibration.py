"""FT-HSDP's recovery times from measured FTAR runs, scaled to a job by stated rules.

The simulator (`pymcoll.ftar.simulate`) takes a failure's costs as inputs: the stall of every
replica while the quorum changes, the failed replica's restart, and its catch-up. This module
derives them from what ``perf/bench_ftar.py`` measured on a machine (the ``stall`` and
``catchup`` runs: ``ftar_stall*.json``, ``ftar_catchup*.json`` in a results directory) and from
the few facts of the job that no local run can measure (its state size, its links, how long its
scheduler takes to restart a replica), and says where each input came from.

The rules:

* **stall** = detection + re-forming + redo. Detection: a host that dies silently closes no
  socket, so the survivors learn of it when the coordinator evicts it, after its eviction
  deadline (``--evict-ms`` of the coordinator; the measured runs' own setting unless one is
  given). A process that crashes closes its sockets and is detected as fast as measured.
  Re-forming (the new epoch's quorum) and redo (the retried allreduce and commit of the kept
  gradients) are the measured medians. The interrupted step's compute is not part of it: the
  simulator adds a uniform share of ``Job.step_s`` itself.
* **catch-up** = transfer + replay. The replica's state is split over its hosts, each fetching
  its part over its own link at once: transfer = state bytes / (hosts x link bandwidth), or at
  the fetch rate measured here when no link is given. Loading the snapshot and replaying an
  update each take one pass over a host's part of the state, at the measured rate of loading a
  fetched state. While the joiner fetches and replays, the others commit a step every
  ``step_s``, each replayed in turn: catch-up = (transfer + pass) / (1 - pass / step_s), a
  geometric sum that converges only while a replay is faster than a step.
* **restart**: what the job's scheduler takes to run the replica's processes again, given by the
  user; without one, the restart of a worker process measured here (seconds, where a real
  reschedule takes minutes).
* **restart drag**: 0, each replica on hosts of its own, unless given.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from .simulate import FTHSDP

__all__ = ["Input", "Measurements", "Calibration", "read_measurements", "calibrate"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Input:
    """One input of the simulator and where its value came from.

    Args:
        name: the input (``stall_s``, ``detection_s``, ...); the parts of a sum come first.
        value: its value, in seconds (``restart_drag``: a share).
        source: where the value came from: a file and field measured on this machine, the
            user's figure, or a default.
        rule: how the value follows from its sources.
    """

    name: str
    value: float
    source: str
    rule: str = ""


@dataclass(frozen=True)
class Measurements:
    """The figures read from a results directory (times in seconds, medians over all runs).

    Args:
        directory: the results directory read.
        stall_files: the ``ftar_stall*.json`` files read.
        stall_kills: kills measured in them (every repetition of every file).
        detection_s: fault until the last survivor's failed call returned (closed sockets).
        reform_s: until the last survivor's quorum of the retry was formed.
        redo_s: until the retried allreduce and its commit returned.
        grad_bytes: gradient bytes per step of the stall runs.
        evict_s: the eviction deadline of the coordinator in the stall runs (None when the
            files do not say).
        catchup_files: the ``ftar_catchup*.json`` files read.
        catchups: catch-ups measured in them.
        fetch_s_per_byte: time to fetch a state, per byte of state.
        pass_s_per_byte: time to load a fetched state (one pass over it), per byte.
        restart_s: from the kill until the restarted worker process was ready.
        state_bytes: the largest state of the catch-up runs.
    """

    directory: str
    stall_files: tuple[str, ...]
    stall_kills: int
    detection_s: float
    reform_s: float
    redo_s: float
    grad_bytes: int
    evict_s: Optional[float]
    catchup_files: tuple[str, ...]
    catchups: int
    fetch_s_per_byte: float
    pass_s_per_byte: float
    restart_s: float
    state_bytes: int


@dataclass(frozen=True)
class Calibration:
    """An `FTHSDP` policy derived from measurements, with the source of each of its inputs.

    Args:
        policy: the recovery policy, ready for `pymcoll.ftar.simulate.simulate`.
        inputs: every input and the parts it is the sum of, with their sources.
        measurements: the figures read from the results directory.
    """

    policy: FTHSDP
    inputs: tuple[Input, ...]
    measurements: Measurements

    def input(self, name: str) -> Input:
        """The input called `name` (KeyError naming the known ones when there is none)."""
        for item in self.inputs:
            if item.name == name:
                return item
        raise KeyError(f"no input {name!r}; the inputs are {', '.join(i.name for i in self.inputs)}")

    def report(self) -> str:
        """One line per input: its value, then where it came from and by which rule."""
        lines = [f"# FT-HSDP inputs calibrated from {self.measurements.directory}"]
        for item in self.inputs:
            value = f"{item.value:.4g}" if item.name == "restart_drag" else _seconds(item.value)
            rule = f"; {item.rule}" if item.rule else ""
            lines.append(f"  {item.name:<13} {value:>10}  {item.source}{rule}")
        return "\n".join(lines)


def _seconds(s: float) -> str:
    if s >= 120:
        return f"{s / 60:.3g} min"
    if s >= 1:
        return f"{s:.3g} s"
    return f"{s * 1000:.3g} ms"


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict):
        raise ValueError(f"{path}: expected an object with 'meta' as perf/bench_ftar.py writes it")
    return doc


def _field(record: dict[str, Any], key: str, path: str, where: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{path}: {where} has no number {key!r} (found {value!r}); is it a file of "
                         f"perf/bench_ftar.py?")
    return float(value)


def _evict_s(meta: dict[str, Any]) -> Optional[float]:
    m = re.search(r"evict (\d+(?:\.\d+)?) ?ms", str(meta.get("coordinator", "")))
    return float(m.group(1)) / 1000.0 if m else None


def read_measurements(results_dir: PathLike) -> Measurements:
    """Reads the stall and catch-up runs of ``perf/bench_ftar.py`` in `results_dir`.

    Every repetition of every ``ftar_stall*.json`` and every cycle of every
    ``ftar_catchup*.json`` counts once; the figures are their medians.

    Args:
        results_dir: the directory holding the files (``perf/results`` of a checkout).

    Returns:
        The measured figures.

    Raises:
        ValueError: the directory holds no such files, or a file lacks a figure.
    """
    directory = Path(results_dir)
    if not directory.is_dir():
        raise ValueError(f"results_dir={str(results_dir)!r}: no such directory (give the folder where "
                         f"perf/bench_ftar.py wrote ftar_stall*.json and ftar_catchup*.json)")
    stall_files = sorted(glob.glob(str(directory / "ftar_stall*.json")))
    catchup_files = sorted(glob.glob(str(directory / "ftar_catchup*.json")))
    if not stall_files or not catchup_files:
        missing = " and ".join(n for n, f in (("ftar_stall*.json", stall_files),
                                                  ("ftar_catchup*.json", catchup_files)) if not f)
        raise ValueError(f"results_dir={str(results_dir)!r}: no {missing} in it; run "
                         f"`python perf/bench_ftar.py stall` and `... catchup` with --out there")
    detection, reform, redo, evicts, grads = [], [], [], [], []
    for path in stall_files:
        doc = _load(path)
        reps = doc.get("reps")
        if not isinstance(reps, list) or not reps:
            raise ValueError(f"{path}: no 'reps' list of measured kills")
        for i, rep in enumerate(reps):
            where = f"reps[{i}]"
            detection.append(_field(rep, "detection_ms", path, where) / 1000.0)
            reform.append(_field(rep, "reform_ms", path, where) / 1000.0)
            redo.append(_field(rep, "redo_ms", path, where) / 1000.0)
        grads.append(int(_field(doc["meta"], "grad_bytes", path, "meta")))
        evict = _evict_s(doc["meta"])
        if evict is not None:
            evicts.append(evict)
    fetch, passes, restarts, states = [], [], [], []
    for path in catchup_files:
        doc = _load(path)
        state_bytes = _field(doc["meta"], "state_bytes", path, "meta")
        if state_bytes <= 0:
            raise ValueError(f"{path}: meta.state_bytes={state_bytes!r}: expected a positive size")
        states.append(int(state_bytes))
        cycles = doc.get("cycles")
        if not isinstance(cycles, list) or not cycles:
            raise ValueError(f"{path}: no 'cycles' list of measured catch-ups")
        for i, cycle in enumerate(cycles):
            where = f"cycles[{i}]"
            fetch.append(_field(cycle, "fetch_ms", path, where) / 1000.0 / state_bytes)
            passes.append(_field(cycle, "load_ms", path, where) / 1000.0 / state_bytes)
            # The joiner's events carry ms since the kill; "ready" is its process up and connected.
            ready = [e.get("t") for e in cycle.get("joiner_events", []) if isinstance(e, dict) and e.get("ev") == "ready"]
            if not ready or not isinstance(ready[0], (int, float)):
                raise ValueError(f"{path}: {where} has no joiner event 'ready' with a time 't'")
            restarts.append(float(ready[0]) / 1000.0)
    return Measurements(
        directory=str(directory), stall_files=tuple(Path(p).name for p in stall_files), stall_kills=len(detection),
        detection_s=statistics.median(detection), reform_s=statistics.median(reform),
        redo_s=statistics.median(redo), grad_bytes=int(statistics.median(grads)),
        evict_s=statistics.median(evicts) if evicts else None,
        catchup_files=tuple(Path(p).name for p in catchup_files), catchups=len(fetch),
        fetch_s_per_byte=statistics.median(fetch), pass_s_per_byte=statistics.median(passes),
        restart_s=statistics.median(restarts), state_bytes=max(states))


def _positive(value: Optional[float], name: str, *, zero: bool = False) -> Optional[float]:
    if value is None:
        return None
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise ValueError(f"{name}={value!r}: expected a finite number {'>=' if zero else '>'} 0")
    return v


def calibrate(results: Union[PathLike, Measurements], *, state_bytes: float, hosts: int = 1,
              link_bytes_per_s: Optional[float] = None, restart_s: Optional[float] = None,
              evict_s: Optional[float] = None, silent: bool = True, step_s: float = 0.0,
              restart_drag: float = 0.0) -> Calibration:
    """An `FTHSDP` policy whose stall, restart and catch-up follow from measured FTAR runs.

    The rules are the module's: stall = detection + re-forming + redo; catch-up = (transfer +
    one pass) / (1 - pass / step_s); restart as given, else as measured.

    Args:
        results: a results directory of ``perf/bench_ftar.py`` (or its figures, read before by
            `read_measurements`).
        state_bytes: bytes of a replica's state that a joiner fetches (parameters, optimizer
            state), over the whole replica.
        hosts: hosts the replica's state is split over, each fetching its part on its own link.
        link_bytes_per_s: each host's link bandwidth in bytes per second (None: the fetch rate
            measured on this machine).
        restart_s: from a failure until the replica's processes run again (None: the restart
            of a worker process measured here, which leaves out any rescheduling).
        evict_s: the coordinator's eviction deadline, the detection time of a host that dies
            silently (None: the deadline of the measured runs' coordinator).
        silent: failures are hosts that die without closing their sockets (True), detected at
            the eviction deadline; False: crashing processes, detected as fast as measured.
        step_s: the job's step time; updates committed during a catch-up are replayed (0: no
            replay counted).
        restart_drag: passed on to `FTHSDP.restart_drag` (0 where every replica has hosts of
            its own).

    Returns:
        The policy and, for each input, its value and source.

    Raises:
        ValueError: a bad argument (named), figures missing from the results, or a replay of
            one update that takes a step or longer (the joiner would never catch up).
    """
    m = results if isinstance(results, Measurements) else read_measurements(results)
    state = _positive(state_bytes, "state_bytes")
    assert state is not None
    if isinstance(hosts, bool) or int(hosts) != hosts or hosts < 1:
        raise ValueError(f"hosts={hosts!r}: expected an integer >= 1")
    link = _positive(link_bytes_per_s, "link_bytes_per_s")
    restart = _positive(restart_s, "restart_s", zero=True)
    evict = _positive(evict_s, "evict_s")
    step = _positive(step_s, "step_s", zero=True)
    assert step is not None
    measured_stall = f"measured: median of {m.stall_kills} SIGKILLs in {', '.join(m.stall_files)}"
    inputs: list[Input] = []

    if not silent:
        detection = Input("detection_s", m.detection_s, measured_stall,
                          "a crashed process closes its sockets: the survivors' calls fail at once")
    elif evict is not None:
        detection = Input("detection_s", evict, "given: the coordinator's eviction deadline",
                          "a host that dies silently is found when the coordinator evicts it")
    elif m.evict_s is not None:
        detection = Input("detection_s", m.evict_s, "the eviction deadline of the measured runs' coordinator "
                          f"({m.stall_files[0]} meta.coordinator)",
                          "a host that dies silently is found when the coordinator evicts it")
    else:
        raise ValueError("evict_s: the results do not say the coordinator's eviction deadline; give evict_s "
                         "(the detection time of a host that dies silently) or silent=False")
    reform = Input("reform_s", m.reform_s, measured_stall, "the new epoch's quorum")
    redo = Input("redo_s", m.redo_s, measured_stall,
                 f"the retried allreduce and commit of {m.grad_bytes / 2**20:g} MiB of kept gradients")
    inputs += [detection, reform, redo,
               Input("stall_s", detection.value + reform.value + redo.value, "the three above",
                     "detection + re-forming + redo")]

    part = state / hosts
    share = f"{part / 1e9:.4g} GB per host ({hosts} host{'s' if hosts > 1 else ''} share the state)"
    if link is not None:
        transfer = Input("transfer_s", part / link, f"given: {link * 8 / 1e9:g} Gbit/s per host", f"{share} / link")
    else:
        transfer = Input("transfer_s", part * m.fetch_s_per_byte,
                         f"measured: median fetch rate {1e-9 / m.fetch_s_per_byte:.3g} GB/s of {m.catchups} "
                         f"catch-ups in {', '.join(m.catchup_files)} (loopback)", f"{share} / rate")
    one_pass = part * m.pass_s_per_byte
    if step > 0 and one_pass >= step:
        raise ValueError(f"step_s={step:g}: replaying one update ({one_pass:.3g} s, a pass over {part / 1e9:.4g} GB "
                         f"at the measured {1e-9 / m.pass_s_per_byte:.3g} GB/s) takes a step or longer, so the "
                         f"joiner never catches up; give a longer step_s, more hosts, or step_s=0 to count no replay")
    pass_source = (f"measured: median load of a fetched state, {1e-9 / m.pass_s_per_byte:.3g} GB/s, of "
                   f"{m.catchups} catch-ups in {', '.join(m.catchup_files)}")
    load = Input("load_s", one_pass, pass_source, f"one pass over the {share.split(' (')[0]}")
    # T = transfer + pass + (T / step) x pass: every step committed meanwhile is replayed in turn.
    replayed = (transfer.value + one_pass) * one_pass / (step - one_pass) if step > 0 else 0.0
    total = transfer.value + one_pass + replayed
    replay = Input("replay_s", replayed, pass_source,
                   f"one pass per step committed during the catch-up (a step every {_seconds(step)})" if step > 0
                   else "no step time given: no update replayed")
    catchup = Input("catchup_s", total, "the three above",
                    "(transfer + pass) / (1 - pass / step_s)" if step > 0 else "transfer + load")
    inputs += [transfer, load, replay, catchup]

    if restart is not None:
        restart_in = Input("restart_s", restart, "given", "until the replica's processes run again")
    else:
        restart_in = Input("restart_s", m.restart_s, f"measured: median restart of a worker process of "
                           f"{m.catchups} catch-ups in {', '.join(m.catchup_files)}",
                           "kill until the new process was connected; no rescheduling in it")
    drag = _positive(restart_drag, "restart_drag", zero=True)
    assert drag is not None
    inputs.append(restart_in)
    inputs.append(Input("restart_drag", drag, "given" if drag > 0 else "default",
                        "share of the others' throughput a restart takes"
                        + ("" if drag > 0 else ": none, each replica on hosts of its own")))
    policy = FTHSDP(stall_s=inputs[3].value, restart_s=restart_in.value, catchup_s=catchup.value,
                    restart_drag=drag)
    return Calibration(policy=policy, inputs=tuple(inputs), measurements=m)
