"""Benchmark pymcoll's collectives side by side with the MPI's own.

For every collective and message size, pymcoll.Comm and the reference (with
--vs mpi, the default: the same collective of the communicator pymcoll wraps,
called through mpi4py, so both sides pay a Python call) run in alternating
blocks: warm-up, then A B A B ... (pymcoll, reference), a Barrier before each
block and, as OSU times collectives, the MPI's Barrier (untimed) before every
timed call (--back-to-back: none between the calls of a block, so a rank may
run ahead into the next call, as in an application's loop). --persistent times
X_init once per size on both sides and Start + Wait per call. Before every call one element per 4 KiB page of
every send block gets a new value (untimed), so no cached result can flatter a
copy; only the call is timed. Once per size and implementation the result is checked element by
element on every rank against numpy (#wrong: wrong elements, summed over ranks).

Collectives (--colls, a comma list, or all): barrier, bcast, gather, gatherv,
scatter, scatterv, allgather, allgatherv, alltoall, alltoallv, reduce,
allreduce, reduce_scatter_block, reduce_scatter, scan, exscan. The v-forms use
equal counts. Every buffer holds --dtype (default float32); reductions use
--op (default sum) on inputs chosen so that every result is exact.

Sizes (-m MIN:MAX, or one size -m 1K; K/M/G suffixes) double from MIN up to MAX.
A size is the bytes of the call's largest buffer, as in nccl-tests: the
message or vector (Bcast, Reduce, Allreduce, Scan, Exscan), or ranks x block
(Gather(v), Allgather(v): the receive buffer; Scatter(v), Alltoall(v),
Reduce_scatter(_block): the send buffer), rounded down to whole elements per
rank's block; count is the elements of one block.

One table per collective, one row per size and implementation. Columns:
  Avg/Min/Max Latency(us), Iterations  (OSU) each rank's mean time per call over
      its timed calls, averaged / least / most over the ranks; timed calls per rank
  time(us)  median over the blocks of the slowest rank's time per call
  algbw, busbw (nccl-tests, GB/s = 1e9 B/s)  size / time, and algbw x factor:
      Allreduce 2(n-1)/n; Allgather(v), Alltoall(v), Reduce_scatter(_block),
      Gather(v), Scatter(v) (n-1)/n; Bcast, Reduce, Scan, Exscan 1
  #wrong  elements that differed in the verified call
  vs_ref  pymcoll time / reference time (< 1: pymcoll is faster); not with --vs none
  mem_frac  from 64 KiB: the time of a memcpy of half the bytes the busiest rank
      must read plus write (a copy counts both), run on every rank at once in the
      same launch, over the collective's time (1: as fast as memory copies)
--json FILE writes the run's header and one record per size and implementation;
--plot FILE.png draws latency and bus bandwidth against size, pymcoll and the
reference on the same axes (needs matplotlib). Progress goes to stderr (-q: none).

Started without mpiexec, it starts itself under ``mpiexec -n NP`` (-n; default
one rank per core, 2 to 4). Exit status: 0, 1 if a result was wrong, 2 on a bad
option. Examples:

    python -m pymcoll bench
    python -m pymcoll bench --vs mpi --plot out.png
    python -m pymcoll bench -n 4 --colls all -m 8:16M --json bench.json
    python -m pymcoll bench --colls allreduce,reduce_scatter --dtype float64 --op max -m 1K:1M
    python -m pymcoll bench --colls scatter,gather --back-to-back -m 8:4K
    python -m pymcoll bench --persistent --colls allreduce,allgather -m 1M:64M
    python -m pymcoll bench -n 4 --node-size 2 --colls allgather -m 8:64K -i 100 -w 10
    mpiexec -n 2 python -m pymcoll bench --vs none --colls barrier,bcast
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import socket
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .bench_cases import (COLLECTIVES, DTYPES, MEM_FRAC_MIN, METHODS, OPS, REDUCTIONS, ROOTED, SIZE_MEANING,
                          TITLES, busbw_factor, make_call, make_case, mpi_type, planned_sizes, rank_traffic,
                          reference_call)
from .bench_table import format_header, format_table, paired_rows, write_json
from .launch import DEFAULT_TIMEOUT_S, is_launched, one_rank_per_core, python_command, run_under_mpiexec

__all__ = [
    "COLLECTIVES", "TITLES", "busbw_factor", "parse_size", "power_of_two_sizes", "parse_message_sizes",
    "doubling_sizes", "parse_colls", "default_iters", "default_warmup", "describe_run", "format_header",
    "bench_collective", "run_benchmark", "paired_rows", "format_table", "write_json", "progress_printer",
    "add_arguments", "check_arguments", "run", "DEFAULT_TIMEOUT_S", "is_launched", "run_under_mpiexec",
]

HELP = "benchmark every collective against the MPI's own (OSU and nccl-tests columns, --json, --plot)"

DEFAULT_COLLS = "bcast,allgather,allreduce,barrier"
DEFAULT_MIN, DEFAULT_MAX = "8", "1M"
IMPLS: tuple[str, ...] = ("pymcoll", "mpi4py")  # A, B of every A B A B ... sequence
VS_CHOICES: tuple[str, ...] = ("mpi", "none")
MIN_ITERS = 3
TARGET_BLOCK_S = 0.025  # a block aims at about this long (iterations are capped by it)
TOOL = "python -m pymcoll bench"


# -- argument parsing ----------------------------------------------------------

def parse_size(text: str, name: str) -> int:
    """Bytes from '8', '64K', '1M' (K/M/G suffixes, powers of 1024); ValueError names `name`."""
    from ..config import parse_bytes

    return parse_bytes(str(text), name)


def power_of_two_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Every power of two from `min_bytes` to `max_bytes`, both included.

    Raises ValueError (naming --min-bytes / --max-bytes) when either is not a
    power of two or min exceeds max.
    """
    for name, value in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
        if value < 1 or value & (value - 1):
            lower = 1 << max(value.bit_length() - 1, 0)
            raise ValueError(f"{name}={value} is not a power of two; use e.g. {lower} or {lower * 2}, "
                             f"or -m MIN:MAX for sizes doubling from any MIN")
    if min_bytes > max_bytes:
        raise ValueError(f"--min-bytes={min_bytes} is larger than --max-bytes={max_bytes}; swap them")
    return doubling_sizes(min_bytes, max_bytes)


def doubling_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """MIN, 2 MIN, 4 MIN, ... up to MAX (OSU's -m): MAX itself only if it is on that ladder."""
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def parse_message_sizes(text: str) -> tuple[int, int]:
    """(MIN, MAX) from -m's 'MIN:MAX', 'SIZE', 'MIN:' or ':MAX' (missing ends: 8 and 1M).

    ValueError names -m/--message-sizes and shows the accepted forms.
    """
    forms = "expected MIN:MAX or one size, bytes with an optional K/M/G suffix, e.g. -m 8:16M or -m 1K"
    raw = str(text).strip()
    parts = raw.split(":")
    if len(parts) > 2 or not raw or raw == ":":
        raise ValueError(f"-m/--message-sizes={text!r}: {forms}")
    if len(parts) == 1:
        low = high = parts[0]
    else:  # a missing end takes the default's
        low, high = parts[0] or DEFAULT_MIN, parts[1] or DEFAULT_MAX
    values = []
    for part in (low, high):
        try:
            values.append(parse_size(part, "size"))
        except ValueError:
            raise ValueError(f"-m/--message-sizes={text!r}: {part.strip()!r} is not a positive size; "
                             f"{forms}") from None
    if values[0] > values[1]:
        raise ValueError(f"-m/--message-sizes={text!r}: MIN {values[0]} is larger than MAX {values[1]}; "
                         f"swap them")
    return values[0], values[1]


def parse_colls(text: str) -> list[str]:
    """'bcast,allgather' -> ['bcast', 'allgather'] (given order), 'all' -> every collective.

    ValueError names --colls and the choices.
    """
    colls = [c.strip().lower() for c in str(text).split(",") if c.strip()]
    if colls == ["all"]:
        return list(COLLECTIVES)
    bad = [c for c in colls if c not in COLLECTIVES]
    if bad or not colls:
        raise ValueError(f"--colls={text!r}: unknown {', '.join(bad) or '(empty list)'}; "
                         f"choose all or a comma list of {', '.join(COLLECTIVES)}")
    return list(dict.fromkeys(colls))


def default_iters(nbytes: int) -> int:
    """Upper bound on iterations per block for a message of `nbytes` (fewer for big ones).

    The benchmark lowers it further so that a block lasts about
    TARGET_BLOCK_S on this machine.
    """
    return max(10, min(2000, (16 << 20) // max(nbytes, 1)))


def default_warmup(iters: int) -> int:
    """Warm-up calls per implementation and size: a tenth of a block, at least 2."""
    return max(2, iters // 10)


# -- what ran ---------------------------------------------------------------------

def describe_run(comm: Any, **settings: Any) -> dict[str, Any]:
    """The header record: machine, MPI, pymcoll and layout of `comm`, plus `settings`.

    Collective over `comm` (a pymcoll.Comm); every rank gets the same dict.
    """
    import mpi4py
    from mpi4py import MPI

    import pymcoll

    mpi = comm.mpi
    host_comm = mpi.Split_type(MPI.COMM_TYPE_SHARED)
    on_host = host_comm.Get_size()
    host_comm.Free()
    cores = os.cpu_count() or 1
    oversubscribed = bool(mpi.allreduce(on_host > cores, op=MPI.LOR))
    hosts = sorted(set(mpi.allgather(socket.gethostname())))
    lay = comm.layout
    major, minor = MPI.Get_version()
    header: dict[str, Any] = {
        "kind": "header",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "ranks": comm.size,
        "nodes": lay.nnodes,
        "node_size": lay.virtual_node_size,
        "layout": lay.describe().split("; rank")[0],
        "lanes": lay.lanes,
        "shm_active": lay.shm_active,
        "note": getattr(comm, "note", ""),
        "hosts": hosts,
        "ranks_per_host": int(mpi.allreduce(on_host, op=MPI.MAX)),
        "cores": cores,
        "oversubscribed": oversubscribed,
        "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "mpi": pymcoll.RUNTIME_MPI,
        "mpi_standard": f"{major}.{minor}",
        "mpi4py": mpi4py.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "pymcoll": pymcoll.__version__,
        "commit": pymcoll.COMMIT,
        "type": "float32",
        "reference": "mpi4py (the wrapped communicator's own collective)",
        "method": ("per size: probe, warm-up, then alternating blocks pymcoll, reference, ...; "
                   "a new value in every send block before each call (untimed), each call timed; "
                   "Barrier before each block; per block, time per call = max over ranks of block "
                   "time / iters (median_us, min_us, max_us over blocks); per rank, mean time per call "
                   "over all its timed calls (osu_avg_us, osu_min_us, osu_max_us over ranks); "
                   "one verified call per implementation and size"),
        "command": [sys.executable, *sys.argv],
    }
    header.update(settings)
    return header


RECORD_KEYS: dict[str, str] = {
    "size": "bytes of the call's largest buffer (nccl-tests); size_meaning per collective",
    "count": "elements of one rank's block (the count argument)",
    "iters": "calls per timed block", "blocks": "timed blocks per implementation",
    "median_us": "median over blocks of the slowest rank's time per call (the table's time)",
    "min_us": "least over blocks of the slowest rank's time per call",
    "max_us": "most over blocks of the slowest rank's time per call",
    "block_us": "the slowest rank's time per call in every block",
    "osu_avg_us": "each rank's mean time per call over its timed calls, averaged over ranks (OSU)",
    "osu_min_us": "least over ranks of that mean (OSU)", "osu_max_us": "most over ranks of that mean (OSU)",
    "algbw_GBps": "size / median time, 1 GB = 1e9 B", "busbw_GBps": "algbw_GBps x busbw_factor",
    "wrong": "elements that differed from numpy's result in the verified call, summed over ranks",
    "vs_ref": "pymcoll median / reference median at the same size (< 1: pymcoll is faster)",
    "mode": "plain (the blocking call) or persistent (X_init once, Start + Wait timed)",
    "timing": "barrier (a Barrier before every timed call, untimed; OSU) or back-to-back (none)",
    "traffic_bytes": "bytes the busiest rank must read plus write (a copy counts both); None: not defined",
    "mem_frac": ("from 64 KiB: time of a memcpy of traffic_bytes / 2 run on every rank at once / median "
                 "time (1: as fast as memcpy); None below or where traffic_bytes is None"),
    "reference_missing": "why the reference was not timed in this mode (its MPI lacks the form), or None",
    "buffers": "numpy (numpy.empty) or heap (pymcoll.alloc, the node's shared heap; both implementations)",
}


def heap_bytes_needed(max_size: int, local_ranks: int) -> int:
    """PYMCOLL_HEAP_SIZE for ``--heap`` runs up to `max_size` bytes with `local_ranks` per node.

    A rank holds a send and a receive buffer of at most `max_size` bytes each;
    another `max_size` and 16 MiB per rank leave room for the heap's
    fragmentation as sizes grow.
    """
    return local_ranks * (3 * max_size + (16 << 20))


# -- measuring --------------------------------------------------------------------

def _timed(call: Callable[[], None], stamp: Callable[[], None], count: int,
           sync: Optional[Callable[[], None]] = None) -> float:
    """Seconds spent inside `count` calls, each after a new stamp and, with `sync`, a
    synchronization (neither timed)."""
    clock = time.perf_counter
    total = 0.0
    for _ in range(count):
        stamp()
        if sync is not None:
            sync()
        t0 = clock()
        call()
        total += clock() - t0
    return total


def memcpy_seconds(mpi: Any, nbytes: int, reps: int = 5) -> float:
    """Seconds of a memcpy of `nbytes` run on every rank at once: each rank's fastest of `reps`
    (a Barrier before each), the slowest rank's. Collective over `mpi`."""
    from mpi4py import MPI

    src = np.ones(max(nbytes, 1), np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch
    best = float("inf")
    for _ in range(reps):
        mpi.Barrier()
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return float(mpi.allreduce(best, op=MPI.MAX))


def missing_methods(comm: Any, colls: Sequence[str]) -> list[str]:
    """mpi4py method names of `colls` that the class of `comm` does not define.

    pymcoll.Comm forwards what it lacks to the wrapped communicator, so an older build
    without a method would silently time the MPI against itself.
    """
    return [METHODS[c] for c in colls if getattr(type(comm), METHODS[c], None) is None]


def bench_collective(comm: Any, coll: str, sizes: Sequence[int], *, iters: Optional[int] = None,
                     warmup: Optional[int] = None, blocks: int = 10, root: int = 0,
                     dtype: Any = np.float32, op: str = "sum", reference: bool = True,
                     target_block_s: float = TARGET_BLOCK_S,
                     progress: Optional[Callable[[str, int, int, int], None]] = None,
                     starting: Optional[Callable[[str, int], None]] = None,
                     mode: str = "plain", back_to_back: bool = False, mem_frac: bool = True,
                     heap: bool = False) -> list[dict[str, Any]]:
    """Measure `coll` on pymcoll.Comm `comm` (against ``comm.mpi`` when `reference`) at `sizes`.

    Collective over `comm`: every rank calls it with the same arguments and
    gets the same records back. Args:
        coll: one of COLLECTIVES; 'barrier' ignores `sizes` (one size, 0).
        sizes: nccl-tests sizes in bytes (bench_cases.planned_sizes: rounded down to
            whole blocks, those without one element per block skipped).
        iters: calls per block; default min(default_iters(size), the calls
            that fit in `target_block_s` at the speed seen in the warm-up).
        warmup: untimed calls per implementation before the blocks (default:
            default_warmup(iters), fewer when two probe calls show that they
            would take longer than `target_block_s`).
        blocks: timed blocks per implementation, alternating pymcoll, mpi4py.
        root: the root of the rooted collectives.
        dtype, op: element type of every buffer; 'sum', 'prod', 'max' or 'min' for reductions.
        reference: also time the wrapped communicator's collective ('mpi4py').
        progress: called on every rank as progress(coll, size, index, total)
            after each size.
        starting: called on every rank as starting(coll, size) before each size.
        mode: 'plain' (the blocking call) or 'persistent' (X_init once per size on both
            sides, Start + Wait timed per call; the reference is left out, with its reason in
            ``reference_missing``, where the MPI lacks X_init).
        back_to_back: no Barrier between the timed calls of a block (a rank may run ahead
            into the next call, as in an application's loop); default: the MPI's Barrier
            before every timed call (untimed), as OSU's benchmarks time collectives.
        mem_frac: for sizes from MEM_FRAC_MIN, also time a memcpy of the busiest rank's traffic
            (rank_traffic / 2 bytes, every rank at once) and record mem_frac = its time /
            the median time (1: the collective moves its bytes as fast as memcpy does).
        heap: make every buffer with pymcoll.alloc (the node's shared heap; both sides use
            the same buffers) instead of numpy.empty. The heap must hold a rank's largest
            send and receive buffer (``PYMCOLL_HEAP_SIZE``; see :func:`heap_bytes_needed`).

    Returns one dict per size and implementation (``impl`` 'pymcoll' or
    'mpi4py'): coll, impl, size, count, type, redop, root, ranks, iters, warmup,
    blocks, block_us, median_us, min_us, max_us, osu_avg_us, osu_min_us, osu_max_us,
    busbw_factor, algbw_GBps, busbw_GBps (from the median), wrong and, on the pymcoll
    record, vs_ref (None without a reference), mode, timing, traffic_bytes, mem_frac;
    see RECORD_KEYS.
    """
    from mpi4py import MPI

    import pymcoll
    from .. import _native

    if coll not in COLLECTIVES:
        raise ValueError(f"coll={coll!r}: expected one of {', '.join(COLLECTIVES)}")
    for name, value, low in (("blocks", blocks, 1), ("iters", iters, 1), ("warmup", warmup, 0)):
        if value is not None and (not isinstance(value, int) or value < low):
            raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    if mode not in ("plain", "persistent"):
        raise ValueError(f"mode={mode!r}: expected 'plain' or 'persistent'")
    if not isinstance(root, int) or not 0 <= root < comm.size:
        raise ValueError(f"root={root!r}: expected a rank in 0..{comm.size - 1}")
    bad = [s for s in sizes if not isinstance(s, int) or s < 1]
    if bad:
        raise ValueError(f"sizes: expected byte counts >= 1, got {bad[:3]}")

    mpi = comm.mpi
    ranks = comm.size
    dtype = np.dtype(dtype)
    impls = IMPLS if reference else IMPLS[:1]
    targets = {"pymcoll": comm, "mpi4py": mpi}
    targets = {i: targets[i] for i in impls}
    todo = planned_sizes(coll, sizes, ranks, dtype.itemsize)
    factor = busbw_factor(coll, ranks)
    alloc = (lambda elements, dt: pymcoll.alloc(elements, dt, comm)) if heap else None
    # Blocking calls and persistent requests' Starts are trials.
    trial_calls = _native.lib.PMC_TRIAL_CALLS_PER_CLASS
    records: list[dict[str, Any]] = []
    for index, size in enumerate(todo):
        if starting:
            starting(coll, size)
        case = calls = None  # the last size's buffers go back (to the heap) before the next are made
        case = make_case(comm, coll, size, root=root, dtype=dtype, op=op, targets=targets, alloc=alloc)
        assert case is not None and case.size == size, (coll, size)  # planned_sizes made it fit
        calls, releases, missing = dict(case.calls), [], None
        here = impls
        if mode == "persistent":
            calls["pymcoll"], release = make_call(comm, METHODS[coll], case.args, mode)
            releases.append(release)
            if reference:
                ref, missing = reference_call(mpi, METHODS[coll], case.args, mode)
                if ref is None:
                    here = impls[:1]
                else:
                    calls["mpi4py"], release = ref
                    releases.append(release)
        sync = None if back_to_back else mpi.Barrier
        try:
            # Two probe calls bound the warm-up on a slow (oversubscribed) machine;
            # the warm-up, timed, then sizes the blocks. Ranks agree via MPI_MAX.
            cap = default_iters(case.size)
            probe = max(_timed(calls[impl], case.stamp, 2, sync) / 2 for impl in here)
            probe = mpi.allreduce(probe, op=MPI.MAX)
            if warmup is None:
                n_warm = max(2, min(default_warmup(iters or cap), int(target_block_s / max(probe, 1e-9))))
                # The first blocking calls of a large size try both copy paths (path trials):
                # they belong to the warm-up, not to a timed block.
                n_warm = max(n_warm, trial_calls)
            else:
                n_warm = warmup
            warm = [_timed(calls[impl], case.stamp, n_warm, sync) / max(n_warm, 1) for impl in here]
            per_call = mpi.allreduce(max(warm) if n_warm else probe, op=MPI.MAX)
            n_iters = iters or max(MIN_ITERS, min(cap, int(target_block_s / max(per_call, 1e-9))))
            times = np.zeros((len(here), blocks))
            for b in range(blocks):
                for j, impl in enumerate(here):
                    mpi.Barrier()
                    times[j, b] = _timed(calls[impl], case.stamp, n_iters, sync)
            wrong = np.array([case.verify(calls[impl], 17 * index + 5 * j)
                              for j, impl in enumerate(here)], dtype=np.int64)
        finally:
            for release in releases:
                release()
        # OSU's view: this rank's mean over all its timed calls, then least/mean/most over ranks.
        mine = times.sum(axis=1) / (blocks * n_iters) * 1e6
        osu_min, osu_max, osu_sum = np.empty_like(mine), np.empty_like(mine), np.empty_like(mine)
        mpi.Allreduce(mine, osu_min, op=MPI.MIN)
        mpi.Allreduce(mine, osu_max, op=MPI.MAX)
        mpi.Allreduce(mine, osu_sum, op=MPI.SUM)
        # nccl-tests' and docs/measure.md's view: a block is as slow as its slowest rank.
        mpi.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
        per_call_us = times / n_iters * 1e6
        mpi.Allreduce(MPI.IN_PLACE, wrong, op=MPI.SUM)
        medians = np.median(per_call_us, axis=1)
        traffic = rank_traffic(coll, case.size, ranks)
        copy_s = (memcpy_seconds(mpi, traffic // 2) if mem_frac and traffic and case.size >= MEM_FRAC_MIN
                  else None)
        for j, impl in enumerate(here):
            med = float(medians[j])
            algbw = case.size / (med * 1e-6) / 1e9 if med > 0 else 0.0
            records.append({
                "kind": "result",
                "coll": coll,
                "impl": impl,
                "size": case.size,
                "count": case.count,
                "type": case.type_name,
                "redop": case.redop,
                "root": case.root,
                "ranks": ranks,
                "iters": n_iters,
                "warmup": n_warm,
                "blocks": blocks,
                "block_us": [round(float(t), 4) for t in per_call_us[j]],
                "median_us": med,
                "min_us": float(per_call_us[j].min()),
                "max_us": float(per_call_us[j].max()),
                "osu_avg_us": float(osu_sum[j] / ranks),
                "osu_min_us": float(osu_min[j]),
                "osu_max_us": float(osu_max[j]),
                "busbw_factor": factor,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * factor,
                "wrong": int(wrong[j]),
                "vs_ref": (float(medians[0] / medians[1])
                           if impl == "pymcoll" and len(here) > 1 and medians[1] > 0 else None),
                "mode": mode,
                "timing": "back-to-back" if back_to_back else "barrier",
                "traffic_bytes": traffic,
                "mem_frac": copy_s / (med * 1e-6) if copy_s is not None and med > 0 else None,
                "reference_missing": missing,
                "buffers": "heap" if heap else "numpy",
            })
        if progress:
            progress(coll, size, index, len(todo))
    return records


def run_benchmark(comm: Any, colls: Sequence[str], sizes: Sequence[int],
                  **options: Any) -> list[dict[str, Any]]:
    """:func:`bench_collective` for every collective in `colls`, records concatenated."""
    records: list[dict[str, Any]] = []
    for coll in colls:
        records += bench_collective(comm, coll, sizes, **options)
    return records


# -- progress ---------------------------------------------------------------------

def progress_printer(prefix: str, after_s: float = 2.0) -> Callable[[str, int, int, int], None]:
    """A progress callback that prints to stderr on rank 0 once a run has lasted `after_s`."""
    from mpi4py import MPI

    start = time.monotonic()
    rank = MPI.COMM_WORLD.Get_rank()

    def report(coll: str, size: int, index: int, total: int) -> None:
        elapsed = time.monotonic() - start
        if rank == 0 and elapsed >= after_s:
            print(f"{prefix}: {coll} {size} B done ({index + 1}/{total}), {elapsed:.1f} s",
                  file=sys.stderr, flush=True)
    return report


def step_printer(prefix: str, total: int, rank: int, enabled: bool = True) -> Callable[[str, int], None]:
    """A `starting` callback: 'prefix: allreduce 4096 B (12/40), 3.1 s' on stderr, rank 0 only.

    Printed before each measurement, so a stalled run shows what it is stuck in.
    """
    start = time.monotonic()
    done = [0]

    def report(coll: str, size: int) -> None:
        done[0] += 1
        if rank == 0 and enabled:
            what = coll if coll == "barrier" else f"{coll} {size} B"
            print(f"{prefix}: {what} ({done[0]}/{total}), {time.monotonic() - start:.1f} s",
                  file=sys.stderr, flush=True)
    return report


# -- the command ------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``python -m pymcoll bench``."""
    what = parser.add_argument_group("what to measure")
    what.add_argument("--colls", default=DEFAULT_COLLS,
                      help=f"comma list of collectives, or all (default {DEFAULT_COLLS}); "
                           f"choices: {', '.join(COLLECTIVES)}")
    what.add_argument("-m", "--message-sizes", metavar="MIN:MAX", default=None,
                      help=f"sizes doubling from MIN to MAX, or one size (e.g. 8:16M, 1K, :64K); "
                           f"K/M/G suffixes (default {DEFAULT_MIN}:{DEFAULT_MAX})")
    what.add_argument("--min-bytes", default=None,
                      help=f"smallest size, a power of two (default {DEFAULT_MIN}); or use -m")
    what.add_argument("--max-bytes", default=None,
                      help=f"largest size, a power of two; K/M suffixes (default {DEFAULT_MAX}); or use -m")
    what.add_argument("--dtype", default="float32", type=str.lower, choices=DTYPES,
                      help="element type of every buffer (default float32)")
    what.add_argument("--op", default="sum", type=str.lower, choices=OPS,
                      help="reduction of reduce, allreduce, reduce_scatter(_block), scan, exscan "
                           "(default sum)")
    what.add_argument("--root", type=int, default=0,
                      help="root rank of bcast, gather(v), scatter(v), reduce (default 0)")
    what.add_argument("--vs", default="mpi", type=str.lower, choices=VS_CHOICES,
                      help="reference run side by side: mpi, the MPI's own collective through mpi4py "
                           "(default), or none (pymcoll alone, no vs_ref column)")
    what.add_argument("--node-size", type=int, default=None,
                      help="group consecutive ranks into virtual nodes of this size "
                           "(default: PYMCOLL_NODE_SIZE, else real nodes)")
    how_ = parser.add_argument_group("how calls are made and timed")
    how_.add_argument("--persistent", action="store_true",
                      help="time persistent calls: X_init once per size (both sides), Start + Wait per call")
    timing = how_.add_mutually_exclusive_group()
    timing.add_argument("--barrier", dest="barrier", action="store_true", default=True,
                        help="the MPI's Barrier before every timed call, untimed, as OSU's benchmarks time "
                             "collectives (the default)")
    timing.add_argument("--back-to-back", dest="barrier", action="store_false",
                        help="no Barrier between the timed calls of a block, so a rank may run ahead into "
                             "the next call, as in an application's loop")
    how_.add_argument("--heap", action="store_true",
                      help="every buffer from pymcoll.alloc (the node's shared heap), for both "
                           "implementations; PYMCOLL_HEAP_SIZE is raised to fit unless set")
    how_.add_argument("--no-mem-frac", action="store_true",
                      help="skip the memcpy that mem_frac is measured against (sizes from 64 KiB)")
    how = parser.add_argument_group("how long")
    how.add_argument("-i", "--iters", type=int, default=None,
                     help="calls per timed block (default: as many as fit in about "
                          f"{TARGET_BLOCK_S * 1000:g} ms, at most 2000, fewer for large sizes)")
    how.add_argument("-w", "--warmup", type=int, default=None,
                     help="untimed calls per implementation and size (default: a tenth of a block)")
    how.add_argument("--blocks", type=int, default=10,
                     help="timed blocks per implementation and size (default 10)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", default=None,
                     help="also write the header and one record per size and implementation here")
    out.add_argument("--plot", metavar="FILE.png", default=None,
                     help="also draw latency and bus bandwidth against size here (needs matplotlib)")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    launch = parser.add_argument_group("launch")
    launch.add_argument("-n", "--np", type=int, default=None,
                        help=f"ranks to start when not run under mpiexec (default {one_rank_per_core()} here: "
                             "one per core, at least 2)")
    launch.add_argument("--mpiexec", default=None,
                        help="mpiexec to start the ranks with (default: next to this Python, else PATH)")
    launch.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds before a self-started job is stopped (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)


def check_arguments(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """Validate the parsed options; returns (collectives, sizes). ValueError names the option.

    Also accepts the namespaces of perf/ scripts, which lack the newer options.
    """
    colls = parse_colls(args.colls)
    message_sizes = getattr(args, "message_sizes", None)
    min_bytes, max_bytes = getattr(args, "min_bytes", None), getattr(args, "max_bytes", None)
    if message_sizes is not None:
        if min_bytes is not None or max_bytes is not None:
            given = "--min-bytes" if min_bytes is not None else "--max-bytes"
            raise ValueError(f"-m/--message-sizes and {given} both give sizes; use one of them")
        sizes = doubling_sizes(*parse_message_sizes(message_sizes))
    else:
        sizes = power_of_two_sizes(parse_size(min_bytes or DEFAULT_MIN, "--min-bytes"),
                                   parse_size(max_bytes or DEFAULT_MAX, "--max-bytes"))
    for name in ("iters", "blocks", "np", "node_size"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value}: expected an integer >= 1")
    if getattr(args, "warmup", None) is not None and args.warmup < 0:
        raise ValueError(f"--warmup={args.warmup}: expected an integer >= 0")
    if getattr(args, "root", 0) < 0:
        raise ValueError(f"--root={args.root}: expected a rank >= 0")
    for option in ("json", "plot"):
        path = getattr(args, option, None)
        if path is not None and (not str(path).strip() or os.path.isdir(path)):
            raise ValueError(f"--{option}={path!r}: expected a file name, e.g. --{option} "
                             f"bench.{'json' if option == 'json' else 'png'}")
    if getattr(args, "timeout", 1.0) <= 0:
        raise ValueError(f"--timeout={args.timeout:g}: expected seconds > 0")
    return colls, sizes


def _fail(rank: int, message: str) -> int:
    """Print `message` on rank 0 (every rank reaches the same verdict) and return 2."""
    if rank == 0:
        print(f"pymcoll bench: {message}", file=sys.stderr, flush=True)
    return 2


def run(args: argparse.Namespace) -> int:
    """``python -m pymcoll bench``: returns 0, 1 if a result was wrong, 2 on bad options."""
    try:
        colls, sizes = check_arguments(args)
        if args.plot:
            from .bench_plot import check_matplotlib

            check_matplotlib()  # before the run, not after minutes of measuring
    except (ValueError, RuntimeError) as exc:
        print(f"pymcoll bench: {exc}", file=sys.stderr)
        return 2
    if not args.launched and not is_launched():
        argv = list(getattr(args, "_argv", None) or sys.argv[1:])
        program = python_command("pymcoll", *argv, "--launched")
        try:
            return run_under_mpiexec(args.np or one_rank_per_core(), program, timeout=args.timeout,
                                     mpiexec=args.mpiexec,
                                     hint="or measure fewer sizes (-m), collectives (--colls) or "
                                          "iterations (-i, --blocks)")
        except (FileNotFoundError, ValueError) as exc:
            print(f"pymcoll bench: {exc}", file=sys.stderr)
            return 2

    from mpi4py import MPI

    import pymcoll

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    ranks = world.Get_size()
    if args.np is not None and args.np != ranks and rank == 0:
        print(f"pymcoll bench: -n/--np={args.np} ignored: mpiexec started {ranks} ranks",
              file=sys.stderr)
    if args.root >= ranks:
        return _fail(rank, f"--root={args.root} is not a rank of the {ranks} started; use 0..{ranks - 1}")
    dtype = np.dtype(args.dtype)
    try:
        mpi_type(dtype)
    except ValueError as exc:
        return _fail(rank, str(exc))
    reference = args.vs != "none"
    heap = bool(getattr(args, "heap", False))
    if heap and "PYMCOLL_HEAP_SIZE" not in os.environ:
        # Read when the Comm below is made; every rank computes the same value.
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        local = node.Get_size()
        node.Free()
        os.environ["PYMCOLL_HEAP_SIZE"] = str(heap_bytes_needed(max(sizes), local))
    comm = pymcoll.Comm(world, node_size=args.node_size)
    try:
        missing = missing_methods(comm, colls)
        if missing:
            return _fail(rank, f"this pymcoll.Comm does not define {', '.join(missing)}; reinstall "
                               f"pymcoll or leave them out of --colls")
        header = describe_run(
            comm, tool=TOOL, colls=colls, sizes=sizes, iters=args.iters, warmup=args.warmup,
            blocks=args.blocks, root=args.root, type=dtype.name,
            mode="persistent" if args.persistent else "plain",
            timing="barrier" if args.barrier else "back-to-back",
            buffers="heap" if heap else "numpy",
            op=args.op if REDUCTIONS & set(colls) else None, vs=args.vs,
            reference=(f"{pymcoll.RUNTIME_MPI.split(chr(10))[0].strip()} through mpi4py "
                       f"(the wrapped communicator's own collective)" if reference else None),
            rooted=sorted(ROOTED & set(colls)), size_meaning={c: SIZE_MEANING[c] for c in colls},
            record_keys=RECORD_KEYS)
        if rank == 0:
            print(format_header(header), flush=True)
        total = sum(len(planned_sizes(c, sizes, ranks, dtype.itemsize)) for c in colls)
        starting = step_printer("pymcoll bench", total, rank, enabled=not args.quiet)
        records: list[dict[str, Any]] = []
        for coll in colls:
            try:
                recs = bench_collective(comm, coll, sizes, iters=args.iters, warmup=args.warmup,
                                        blocks=args.blocks, root=args.root, dtype=dtype, op=args.op,
                                        reference=reference, starting=starting,
                                        mode="persistent" if args.persistent else "plain",
                                        back_to_back=not args.barrier, mem_frac=not args.no_mem_frac,
                                        heap=heap)
            except Exception as exc:  # noqa: BLE001 - the other ranks wait in a collective: end the job
                print(f"pymcoll bench: rank {rank}: {coll}: {type(exc).__name__}: {exc}", file=sys.stderr,
                      flush=True)
                world.Abort(1)
                raise SystemExit(1) from exc  # Abort does not return; this keeps recs defined below
            records += recs
            if rank == 0:
                print("\n" + format_table(recs, coll, header), flush=True)
    finally:
        comm.Free()
    if rank != 0:
        return 0
    status = 0
    if args.json:
        try:
            write_json(args.json, header, records)
            print(f"\n# wrote {args.json}", flush=True)
        except OSError as exc:
            print(f"pymcoll bench: --json={args.json!r}: cannot write it ({exc}); choose another path",
                  file=sys.stderr)
            status = 2
    if args.plot:
        from .bench_plot import plot

        try:
            plot(header, records, args.plot)
            print(f"# wrote {args.plot}", flush=True)
        except (OSError, ValueError, RuntimeError) as exc:
            print(f"pymcoll bench: --plot={args.plot!r}: cannot draw it ({exc}); choose another path "
                  f"(e.g. out.png)", file=sys.stderr)
            status = 2
    wrong = sum(r["wrong"] for r in records)
    if wrong:
        print(f"pymcoll bench: {wrong} wrong elements in verified calls (see #wrong)", file=sys.stderr)
        return 1
    return status
