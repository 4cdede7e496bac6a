#!/usr/bin/env python3
"""Every collective of pymcoll.Comm against the MPI's own, 8 B to 16 MiB, in three modes.

Barrier, Bcast, Gather(v), Scatter(v), Allgather(v), Alltoall(v), Reduce, Allreduce,
Reduce_scatter_block, Reduce_scatter, Scan and Exscan of a ``pymcoll.Comm`` are timed
side by side with the same methods of the communicator it wraps (``comm.mpi``, called
through mpi4py, so both sides pay a Python call), following docs/measure.md: per size a
probe, a warm-up, then alternating blocks pymcoll, mpi4py, pymcoll, ... (a Barrier before
each); before every call one value per 4 KiB page (and per block) of the send buffer
changes (untimed); a block's time per call is the slowest rank's; median and min over the
blocks; vs_ref = pymcoll median / mpi4py median (< 1: pymcoll is faster). Once per size and
implementation the result is checked element by element on every rank against numpy, and
the ranks add up their wrong elements (#wrong).

Modes (--mode):
  plain        blocking calls, comm.X(...)
  persistent   req = comm.X_init(...) once per size, then req.Start(); req.Wait() per call
               (an MPI without MPI-4 persistent collectives: the reference is recorded
               as unavailable and pymcoll is timed alone)
  nonblocking  comm.IX(...).Wait() per call

Data: float32, MPI.SUM for the reductions, root 0; v-forms with equal counts (every
rank's count = the block, displacements contiguous). Sizes are powers of two of the
per-rank message ("size"): the broadcast message; the block each rank sends (Gather,
Allgather; the root gathers, every rank receives ranks x size), receives (Scatter,
Reduce_scatter(_block): each rank contributes ranks x size) or sends to each peer
(Alltoall); the vector of Reduce, Allreduce, Scan and Exscan.

Bandwidth (nccl-tests): algbw = S / time with S = size (Bcast, Reduce, Allreduce, Scan,
Exscan) or ranks x size (Gather, Scatter, Allgather, Alltoall, Reduce_scatter, and v-forms);
busbw = algbw x 2(n-1)/n (Allreduce), x (n-1)/n (Gather, Scatter, Allgather, Alltoall,
Reduce_scatter), x 1 (Bcast, Reduce, Scan, Exscan). mem_frac (sizes of 1 MiB and up) =
(recv_bytes / median time) / memcpy bandwidth, where recv_bytes is what the rank that receives
most gets in its receive buffer (its own block included) and the memcpy bandwidth is measured
at the start of the run with every rank copying at once (numpy copy of 1, 4 and 16 MiB; the
measured size nearest recv_bytes is used): the time of one memcpy of recv_bytes divided by
the collective's time.

Outputs, on rank 0: a table per collective on stdout; perf/results/collectives_<mode>
[_np<N>][_ns<K>][_<mpi>].json (a header record, then one record per collective, size and
implementation) and .png (one panel per collective: latency vs size, log-log, with vs_ref on
the right axis); with --summary a markdown table of worst/best vs_ref per size bucket.
Started without mpiexec, it starts itself under the mpiexec next to this Python. A full
run (16 collectives, 22 sizes) takes a few minutes per mode at 2 ranks. Examples:

    python perf/bench_collectives.py                               # plain, 2 ranks, 8 B-16 MiB
    python perf/bench_collectives.py --mode persistent --summary
    python perf/bench_collectives.py --mode all --np 4 --node-size 2
    python perf/bench_collectives.py --np 2 --max-bytes 64K --iters-scale 0.1 --out /tmp/smoke
    python perf/bench_collectives.py --colls allgatherv,alltoallv --min-bytes 1M
    python perf/bench_collectives.py --from-json perf/results/collectives_plain.json --summary
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import socket
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np
from mpi4py import MPI

from pymcoll.cli import bench, bench_cases, launch
# The collectives (in the order of the tables, with their mpi4py method names), their families and
# nccl-tests' bus bandwidth factors, as `python -m pymcoll bench` has them.
from pymcoll.cli.bench_cases import COLLECTIVES as COLLS
from pymcoll.cli.bench_cases import (METHODS, REDUCTIONS, ROOTED, TIMES_RANKS, busbw_factor, form_name, make_call,
                                      reference_call)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # perfutil, also under python -P
from perfutil import launch_self, plotter, source_state  # noqa: E402

RESULTS = os.path.join(HERE, "results")

MODES: tuple[str, ...] = ("plain", "persistent", "nonblocking")
IMPLS: tuple[str, ...] = ("pymcoll", "mpi4py")  # A, B of every A B A B ... sequence

DTYPE = np.float32
TYPE_NAME = "float32"
ELEM = 4  # bytes per element
MEMCPY_SIZES = (1 << 20, 4 << 20, 16 << 20)
MEM_FRAC_FROM = 1 << 20  # mem_frac is reported from this size up
WARM_CHUNKS = 3  # warm-up pieces per implementation (see time_blocks)
DEFAULT_MAX = "16M"
DEFAULT_TIMEOUT_S = 3600.0  # room for --mode all, and for oversubscribed runs
BUCKETS: tuple[tuple[str, int, float], ...] = (  # (label, smallest, largest) per-rank size
    ("≤ 4 KiB", 0, 4 << 10), ("8 KiB – 512 KiB", 8 << 10, 512 << 10), ("≥ 1 MiB", 1 << 20, math.inf))

SIZE_MEANING: dict[str, str] = {
    "barrier": "no data (size 0)",
    "bcast": "the message broadcast from the root",
    "gather": "the block each rank sends; the root receives ranks x size",
    "gatherv": "the block each rank sends (equal counts); the root receives ranks x size",
    "scatter": "the block each rank receives; the root sends ranks x size",
    "scatterv": "the block each rank receives (equal counts); the root sends ranks x size",
    "allgather": "the block each rank sends; every rank receives ranks x size",
    "allgatherv": "the block each rank sends (equal counts); every rank receives ranks x size",
    "alltoall": "the block each rank sends to each rank; both buffers hold ranks x size",
    "alltoallv": "the block each rank sends to each rank (equal counts); both buffers hold ranks x size",
    "reduce": "the vector each rank contributes; the root receives size",
    "allreduce": "the vector each rank contributes and receives",
    "reduce_scatter_block": "the block each rank receives; each rank contributes ranks x size",
    "reduce_scatter": "the block each rank receives (equal recvcounts); each rank contributes ranks x size",
    "scan": "the vector each rank contributes and receives",
    "exscan": "the vector each rank contributes and receives (rank 0's is not defined)",
}

DEFINITIONS: dict[str, str] = {
    "size": "bytes of the per-rank message, per collective in size_meaning",
    "times": ("us per call; a block's time per call is the slowest rank's (MPI_MAX of block time / "
              "iters); avg_us, median_us, min_us, max_us are over the blocks"),
    "algbw_GBps": "S / median time, S = size, or ranks x size for the collectives in bytes_times_ranks; 1 GB = 1e9 B",
    "busbw_GBps": ("algbw x factor (nccl-tests): Allreduce 2(n-1)/n; Gather(v), Scatter(v), Allgather(v), "
                   "Alltoall(v), Reduce_scatter(_block) (n-1)/n; Bcast, Reduce, Scan, Exscan 1"),
    "vs_ref": "pymcoll median / mpi4py median (< 1: pymcoll is faster); on the pymcoll record",
    "recv_bytes": ("bytes written into the receive buffer of the rank that receives most (the root for "
                   "Gather and Reduce), its own block included"),
    "mem_frac": ("for sizes >= 1 MiB: (recv_bytes / median time) / memcpy bandwidth = time of one memcpy "
                 "of recv_bytes / time of the collective; memcpy bandwidth measured at the start with all "
                 "ranks copying concurrently (bytes copied / time of the slowest rank), at the measured "
                 "size nearest recv_bytes"),
    "wrong": "elements that differed from numpy's result in the verified call, summed over ranks",
}


# -- options ---------------------------------------------------------------------------

def parse_list(text: str, choices: Sequence[str], option: str) -> list[str]:
    """'a,b' -> ['a', 'b'] (case-insensitive, 'all' = every choice); ValueError names `option`."""
    items = [c.strip().lower() for c in str(text).split(",") if c.strip()]
    if items == ["all"]:
        return list(choices)
    bad = [c for c in items if c not in choices]
    if bad or not items:
        raise ValueError(f"{option}={text!r}: unknown {', '.join(bad) or '(empty list)'}; "
                         f"choose a comma list of {', '.join(choices)} (or all)")
    return [c for c in choices if c in items]  # canonical order


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Options of this script (see --help); exits with status 2 on a bad one."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default="plain",
                   help="plain, persistent, nonblocking, a comma list of them, or all (default plain)")
    p.add_argument("--colls", default="all",
                   help="comma list of collectives (default all): " + ", ".join(COLLS))
    p.add_argument("--min-bytes", default="8", help="smallest per-rank message, a power of two (default 8)")
    p.add_argument("--max-bytes", default=DEFAULT_MAX,
                   help=f"largest per-rank message, a power of two; K/M suffixes (default {DEFAULT_MAX})")
    p.add_argument("--iters-scale", type=float, default=1.0,
                   help=f"scale the time per block (default {bench.TARGET_BLOCK_S * 1e3:g} ms) and the cap "
                        "on iterations per block; 0.1 for a quick look (default 1)")
    p.add_argument("--blocks", type=int, default=10, help="timed blocks per implementation (default 10)")
    p.add_argument("--np", type=int, default=2, help="ranks to start when not under mpiexec (default 2)")
    p.add_argument("--heap", action="store_true",
                   help="buffers from pymcoll.alloc (the shared heap) for both implementations: pymcoll's "
                        "direct path, peers memcpy straight from them (results get _heap in their name)")
    p.add_argument("--node-size", type=int, default=None,
                   help="virtual nodes of this many consecutive ranks (default: real nodes)")
    p.add_argument("--out", default=None,
                   help="path of the results without extension (with several modes, _<mode> is appended; "
                        "an existing directory gets the default file names); default "
                        "perf/results/collectives_<mode>[_npN][_nsK][_<mpi>]")
    p.add_argument("--summary", action="store_true",
                   help="also print a markdown table of worst/best vs_ref per size bucket (for perf/README.md)")
    p.add_argument("--from-json", metavar="PATH", default=None,
                   help="do not measure: print the tables (and --summary) of a results file; "
                        "with --out, also redraw its PNG there")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--mpiexec", default=None, help="mpiexec to start the ranks with (default: next to this Python)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds before a self-started job is stopped (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.modes = parse_list(args.mode, MODES, "--mode")
        args.coll_list = parse_list(args.colls, COLLS, "--colls")
        args.sizes = bench.power_of_two_sizes(bench.parse_size(args.min_bytes, "--min-bytes"),
                                              bench.parse_size(args.max_bytes, "--max-bytes"))
        for name in ("blocks", "np", "node_size"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')}={value}: expected an integer >= 1")
        if not args.iters_scale > 0:
            raise ValueError(f"--iters-scale={args.iters_scale}: expected a number > 0")
        if args.timeout <= 0:
            raise ValueError(f"--timeout={args.timeout}: expected seconds > 0")
    except ValueError as exc:
        p.error(str(exc))
    return args


# -- launching and describing the run ------------------------------------------------------

def mpi_identity() -> dict[str, str]:
    """Name and version of the MPI library, from MPI.Get_library_version(), and the file-name tag
    ('' for MPICH, whose results carry no suffix, 'openmpi' for Open MPI)."""
    text = MPI.Get_library_version().strip()
    first = text.splitlines()[0].strip() if text else "unknown"
    found = re.search(r"\d+(?:\.\d+)+", first)
    name = first[:found.start()] if found else first
    name = re.sub(r"(?i)\s*(version:?|v)\s*$", "", name.strip()).strip(" ,:") or first
    low = name.lower()
    tag = "openmpi" if "open mpi" in low else "" if low == "mpich" else re.sub(r"[^a-z0-9]+", "", low)
    return {"mpi_name": name, "mpi_version": found.group(0) if found else "unknown", "mpi_tag": tag,
            "mpi_library_version": text}


def cpu_ranges(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        elif out and "-" not in out[-1] and int(out[-1]) == c - 1:
            out[-1] = f"{out[-1]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def affinity_facts(mpi: MPI.Comm) -> dict[str, Any]:
    """Cores the job may use (the union of its ranks' sched_getaffinity sets per host) and
    whether a host runs more ranks than that. Collective over `mpi`.

    The union, not one rank's set: an mpiexec that binds each rank to one core leaves
    every rank a set of one CPU.
    """
    mine = (socket.gethostname(), sorted(os.sched_getaffinity(0)))
    every = mpi.allgather(mine)
    hosts: dict[str, tuple[set[int], int]] = {}
    for host, cpus in every:
        union, ranks = hosts.get(host, (set(), 0))
        hosts[host] = (union | set(cpus), ranks + 1)
    return {
        "cores": min(len(u) for u, _ in hosts.values()),
        "cpus_online": os.cpu_count(),
        "affinity_by_rank": [cpu_ranges(cpus) for _, cpus in every],
        "oversubscribed": any(ranks > len(u) for u, ranks in hosts.values()),
    }


def default_stem(mode: str, ranks: int, node_size: Optional[int], mpi_tag: str, heap: bool = False) -> str:
    """Result file name without extension: collectives_<mode>[_heap][_npN][_nsK][_<mpi>]
    (2 ranks on real nodes under MPICH: no suffix, as the other results)."""
    stem = f"collectives_{mode}" + ("_heap" if heap else "")
    if ranks != 2 or node_size:
        stem += f"_np{ranks}"
    if node_size:
        stem += f"_ns{node_size}"
    if mpi_tag:
        stem += f"_{mpi_tag}"
    return stem


def output_stem(args: argparse.Namespace, mode: str, ranks: int, mpi_tag: str) -> str:
    """Where the results of `mode` go (see --out)."""
    default = default_stem(mode, ranks, args.node_size, mpi_tag, args.heap)
    if args.out is None:
        return os.path.join(RESULTS, default)
    if os.path.isdir(args.out) or args.out.endswith(os.sep):
        return os.path.join(args.out, default)
    return args.out if len(args.modes) == 1 else f"{args.out}_{mode}"


def describe(comm: Any, args: argparse.Namespace, memcpy: list[dict[str, Any]]) -> dict[str, Any]:
    """The header record shared by every mode of this run. Collective over `comm`."""
    header = bench.describe_run(
        comm, benchmark="perf/bench_collectives.py", colls=list(args.coll_list), sizes=args.sizes,
        blocks=args.blocks, iters_scale=args.iters_scale,
        target_block_ms=round(bench.TARGET_BLOCK_S * args.iters_scale * 1e3, 3), root=0,
        buffers="pymcoll.alloc (shared heap), both implementations" if args.heap else "numpy arrays")
    header.update(mpi_identity())
    header.update(affinity_facts(comm.mpi))
    header.update(source_state())  # the checkout's commit and whether it has local changes
    header.update({
        "type": TYPE_NAME,
        "op": "SUM",
        "reference": "the wrapped communicator's own collective through mpi4py (comm.mpi)",
        "method": ("per size: 2 probe calls per implementation, warm-up, then alternating blocks "
                   "pymcoll, mpi4py, ... (a Barrier before each); before every call a new value in one "
                   "element per 4 KiB page and per block of the send buffer (untimed); each call timed "
                   "(I-form: IX + Wait; persistent: Start + Wait, the request made once per size); one "
                   "verified call per implementation and size, checked on every rank against numpy"),
        "size_meaning": {c: SIZE_MEANING[c] for c in args.coll_list},
        "bytes_times_ranks": sorted(TIMES_RANKS & set(args.coll_list)),
        "definitions": DEFINITIONS,
        "memcpy": memcpy,
    })
    return header


# -- one collective at one size ---------------------------------------------------------

def make_case(comm: Any, coll: str, size: int, root: int = 0,
              alloc: Optional[Callable[[int, np.dtype], np.ndarray]] = None) -> Optional[bench_cases.Case]:
    """The case of `coll` at per-rank message `size` (SIZE_MEANING; None when `size` holds no
    whole float32 element), built by `python -m pymcoll bench`'s case builder with no calls
    bound: make them from ``case.args``. ``case.size`` is this script's per-rank size.
    `comm` gives the rank and size (a pymcoll.Comm or mpi4py communicator); `alloc(elements,
    dtype)` makes the buffers (default: numpy.empty)."""
    count = size // ELEM
    if coll != "barrier" and count < 1:
        return None
    nbytes = bench_cases.case_size(coll, count, comm.size, ELEM)  # the CLI's size: the largest buffer
    case = bench_cases.make_case(comm, coll, nbytes, root=root, dtype=DTYPE, targets={}, alloc=alloc)
    return dataclasses.replace(case, size=size if coll != "barrier" else 0)


def missing_form(comm: Any, method: str, mode: str) -> Optional[str]:
    """Why pymcoll cannot be measured for `method` in `mode`, or None.

    pymcoll.Comm forwards every attribute it does not define to the wrapped mpi4py
    communicator, so an older build without, say, Gather_init would silently time
    MPI against itself: only methods defined on the class count.
    """
    name = form_name(method, mode)
    if getattr(type(comm), name, None) is None:
        return (f"pymcoll.Comm (build {getattr(sys.modules.get('pymcoll'), 'COMMIT', '?')}) does not define "
                f"{name}; the attribute would be forwarded to mpi4py")
    return None


def time_blocks(mpi: MPI.Comm, calls: dict[str, Callable[[], None]], stamp: Callable[[], None], *,
                cap: int, min_iters: int, target_s: float, blocks: int) -> tuple[np.ndarray, int, int]:
    """Alternating timed blocks of every call in `calls` (the method of bench.bench_collective).

    Returns (time per call in us, shape (len(calls), blocks), slowest rank per block;
    iterations per block; warm-up calls per implementation). Collective over `mpi`.
    """
    names = list(calls)
    # Two probe calls bound the warm-up; the warm-up, timed, sizes the blocks so that each
    # lasts about target_s (at most `cap` calls, at least `min_iters`). Ranks agree via MAX.
    probe = max(bench._timed(calls[i], stamp, 2) / 2 for i in names)
    probe = mpi.allreduce(probe, op=MPI.MAX)
    n_warm = max(2, min(bench.default_warmup(cap), int(target_s / max(probe, 1e-9))))
    # The warm-up runs in WARM_CHUNKS pieces and each implementation's per-call estimate is
    # the median piece: one preemption on a shared machine then cannot shrink every block
    # of the size to a handful of calls.
    piece = max(1, n_warm // WARM_CHUNKS)
    n_warm = piece * WARM_CHUNKS
    warm = max(float(np.median([bench._timed(calls[i], stamp, piece) / piece for _ in range(WARM_CHUNKS)]))
               for i in names)
    per_call = mpi.allreduce(warm, op=MPI.MAX)
    n_iters = max(min_iters, min(cap, int(target_s / max(per_call, 1e-9))))
    times = np.zeros((len(names), blocks))
    for b in range(blocks):
        for j, name in enumerate(names):
            mpi.Barrier()
            times[j, b] = bench._timed(calls[name], stamp, n_iters)
    mpi.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    return times / n_iters * 1e6, n_iters, n_warm


def measure_case(comm: Any, coll: str, size: int, mode: str, args: argparse.Namespace,
                 seed: int) -> list[dict[str, Any]]:
    """Time and verify `coll` at `size` in `mode` on pymcoll and the reference; the two
    result records (every rank gets the same). Collective over `comm`."""
    mpi = comm.mpi
    n = comm.size

    def heap_alloc(elements: int, dtype: np.dtype) -> np.ndarray:
        import pymcoll

        return pymcoll.alloc(elements, dtype, comm)
    case = make_case(comm, coll, size, alloc=heap_alloc if args.heap else None)
    if case is None:
        return []
    method = METHODS[coll]
    releases: list[Callable[[], None]] = []
    try:
        calls: dict[str, Callable[[], None]] = {}
        calls["pymcoll"], release = make_call(comm, method, case.args, mode)
        releases.append(release)
        ref, reason = reference_call(mpi, method, case.args, mode)
        if ref is not None:
            calls["mpi4py"], release = ref
            releases.append(release)
        scale = args.iters_scale
        cap = max(1, int(bench.default_iters(max(case.send_bytes, case.recv_bytes, 1)) * scale))
        per_call_us, n_iters, n_warm = time_blocks(
            mpi, calls, case.stamp, cap=cap, min_iters=max(1, min(bench.MIN_ITERS, cap)),
            target_s=bench.TARGET_BLOCK_S * scale, blocks=args.blocks)
        # One verified call per implementation, checked on every rank; the ranks agree on the
        # verdict by exchanging their counts (kept per rank to show where a result went wrong).
        local = []
        for j, impl in enumerate(calls):
            local.append(case.verify(calls[impl], seed + 5 * j))
        by_rank = mpi.allgather(local)
    finally:
        for release in releases:
            release()

    common = {"kind": "result", "coll": coll, "method": method, "mode": mode, "size": case.size,
              "count": case.count, "type": TYPE_NAME if coll != "barrier" else None,
              "op": "SUM" if coll in REDUCTIONS else None, "root": case.root, "ranks": n,
              "send_bytes": case.send_bytes, "recv_bytes": case.recv_bytes}
    nbytes = case.size * (n if coll in TIMES_RANKS else 1)
    medians = {impl: float(np.median(per_call_us[j])) for j, impl in enumerate(calls)}
    records = []
    for j, impl in enumerate(calls):
        t = per_call_us[j]
        med = medians[impl]
        algbw = nbytes / (med * 1e-6) / 1e9 if med > 0 and nbytes else 0.0
        records.append({**common, "impl": impl, "available": True, "iters": n_iters, "warmup": n_warm,
                        "blocks": args.blocks, "block_us": [round(float(x), 4) for x in t],
                        "avg_us": float(t.mean()), "median_us": med, "min_us": float(t.min()),
                        "max_us": float(t.max()), "algbw_GBps": algbw,
                        "busbw_GBps": algbw * busbw_factor(coll, n),
                        "wrong": int(sum(row[j] for row in by_rank)),
                        "wrong_by_rank": [int(row[j]) for row in by_rank],
                        "vs_ref": (med / medians["mpi4py"] if impl == "pymcoll" and "mpi4py" in medians
                                   and medians["mpi4py"] > 0 else None),
                        "mem_frac": None})
    if "mpi4py" not in calls:
        records.append({**common, "impl": "mpi4py", "available": False, "reason": reason})
    return records


def run_mode(comm: Any, mode: str, args: argparse.Namespace,
             progress: Callable[[str, int, int, int], None]) -> list[dict[str, Any]]:
    """Every collective of --colls at every size of --sizes in `mode`. After an error in a
    collective (agreed by all ranks) its remaining sizes are skipped. Collective over `comm`."""
    records: list[dict[str, Any]] = []
    for c_index, coll in enumerate(args.coll_list):
        missing = missing_form(comm, METHODS[coll], mode)
        if missing:
            records.append({"kind": "skipped", "coll": coll, "method": METHODS[coll], "mode": mode,
                            "reason": missing})
            if comm.rank == 0:
                print(f"bench_collectives: {mode} {METHODS[coll]} skipped: {missing}", file=sys.stderr)
            continue
        sizes = [0] if coll == "barrier" else args.sizes
        for index, size in enumerate(sizes):
            error = None
            try:
                recs = measure_case(comm, coll, size, mode, args, seed=1 + 7 * c_index + 31 * index)
            except Exception as exc:  # noqa: BLE001 - recorded, agreed over ranks, reported
                error, recs = f"{type(exc).__name__}: {exc}", []
            errors = comm.mpi.allgather(error)
            if any(errors):
                records.append({"kind": "error", "coll": coll, "method": METHODS[coll], "mode": mode,
                                "size": size, "errors": {str(r): e for r, e in enumerate(errors) if e}})
                if comm.rank == 0:
                    print(f"bench_collectives: {mode} {METHODS[coll]} {size} B failed: "
                          f"{next(e for e in errors if e)}; skipping its larger sizes", file=sys.stderr)
                break
            records += recs
            progress(f"{mode} {METHODS[coll]}", size, index, len(sizes))
    return records


# -- memcpy baseline ---------------------------------------------------------------------

def memcpy_times(mpi: MPI.Comm, nbytes: int, target_s: float, blocks: int) -> tuple[list[float], int]:
    """Seconds per numpy copy of `nbytes` on this rank, one per block, with every rank copying
    at once (a Barrier before each block); and the copies per block. Collective over `mpi`."""
    src = np.ones(nbytes, np.uint8)  # written, so that its pages exist before timing
    dst = np.zeros(nbytes, np.uint8)
    view = src[::4096]

    def copy() -> None:
        np.copyto(dst, src)

    def stamp() -> None:
        view[...] = (view[0] + 1) % 251
    probe = mpi.allreduce(bench._timed(copy, stamp, 3) / 3, op=MPI.MAX)
    iters = max(1, min(200, int(target_s / max(probe, 1e-9))))
    bench._timed(copy, stamp, iters)  # warm-up
    times = []
    for _ in range(blocks):
        mpi.Barrier()
        times.append(bench._timed(copy, stamp, iters) / iters)
    return times, iters


def measure_memcpy(mpi: MPI.Comm, args: argparse.Namespace) -> list[dict[str, Any]]:
    """numpy copy bandwidth at MEMCPY_SIZES with every rank copying at the same time.

    A rank's time per copy is its median over the blocks; the bandwidth is bytes copied /
    the slowest rank's time (as a collective's time is the slowest rank's). Collective over `mpi`.
    """
    out = []
    for nbytes in MEMCPY_SIZES:
        times, iters = memcpy_times(mpi, nbytes, bench.TARGET_BLOCK_S * args.iters_scale, args.blocks)
        medians = mpi.allgather(float(np.median(times)))
        out.append({"bytes": nbytes, "iters": iters, "blocks": args.blocks,
                    "median_us_by_rank": [round(t * 1e6, 3) for t in medians],
                    "bandwidth_GBps": nbytes / max(medians) / 1e9,
                    "bandwidth_by_rank_GBps": [round(nbytes / t / 1e9, 3) for t in medians]})
    return out


def add_mem_frac(records: list[dict[str, Any]], memcpy: Sequence[dict[str, Any]]) -> None:
    """Set mem_frac (DEFINITIONS) on the timed records of MEM_FRAC_FROM bytes and up."""
    if not memcpy:
        return
    for r in records:
        if r.get("kind") != "result" or not r.get("available") or r["size"] < MEM_FRAC_FROM:
            continue
        nearest = min(memcpy, key=lambda m: abs(math.log2(m["bytes"]) - math.log2(r["recv_bytes"])))
        copy_s = r["recv_bytes"] / (nearest["bandwidth_GBps"] * 1e9)
        r["mem_frac"] = copy_s / (r["median_us"] * 1e-6) if r["median_us"] > 0 else None
        r["memcpy_bytes"] = nearest["bytes"]


# -- reporting ---------------------------------------------------------------------------

def rows_of(records: Sequence[dict[str, Any]], coll: str) -> list[dict[str, Any]]:
    """One row per size of `coll`: its pymcoll record ('p') and reference record ('m', or None)."""
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "result" and r["coll"] == coll:
            by_size.setdefault(r["size"], {})[r["impl"]] = r
    return [{"size": s, "p": pair["pymcoll"], "m": pair.get("mpi4py")}
            for s, pair in sorted(by_size.items()) if "pymcoll" in pair]


def format_table(records: Sequence[dict[str, Any]], coll: str, header: dict[str, Any], mode: str) -> str:
    """OSU-style latency table of `coll` with nccl-tests' busbw, vs_ref, mem_frac and #wrong."""
    title = (f"# {METHODS[coll]} ({mode}; {header['ranks']} ranks; {TYPE_NAME}"
             + (", MPI.SUM" if coll in REDUCTIONS else "") + (", root 0" if coll in ROOTED else "")
             + f"): size = {SIZE_MEANING[coll]}")
    skipped = next((r["reason"] for r in records if r.get("kind") == "skipped" and r["coll"] == coll), None)
    if skipped:
        return f"{title}\n# not measured: {skipped}"
    rows = rows_of(records, coll)
    ref_off = next((r["m"].get("reason") for r in rows if r["m"] and not r["m"].get("available")), None)
    blocks = rows[0]["p"]["blocks"] if rows else 0
    columns = ("# Size", "Avg(us)", "Min(us)", "Median(us)", "Ref Median(us)", "vs_ref",
               "busbw(GB/s)", "mem_frac", "#wrong", "Iterations")
    cells = []
    for row in rows:
        p, m = row["p"], row["m"]
        ref_ok = m is not None and m.get("available")
        cells.append((
            str(row["size"]), f"{p['avg_us']:.2f}", f"{p['min_us']:.2f}", f"{p['median_us']:.2f}",
            f"{m['median_us']:.2f}" if ref_ok else "n/a",
            f"{p['vs_ref']:.2f}" if p.get("vs_ref") is not None else "n/a",
            f"{p['busbw_GBps']:.3f}" if coll != "barrier" else "-",
            f"{p['mem_frac']:.2f}" if p.get("mem_frac") is not None else "-",
            str(p["wrong"]), str(p["iters"]),
        ))
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = [title,
             f"# pymcoll avg/min/median over {blocks} blocks, us per call (slowest rank); reference = "
             f"{header.get('mpi_name', 'MPI')} {header.get('mpi_version', '')} through mpi4py"
             + (f" -- unavailable ({ref_off})" if ref_off else ""),
             columns[0].ljust(widths[0]) + "  " + "  ".join(c.rjust(w) for c, w in zip(columns[1:], widths[1:]))]
    lines += [x[0].ljust(widths[0]) + "  " + "  ".join(c.rjust(w) for c, w in zip(x[1:], widths[1:]))
              for x in cells]
    if not cells:
        lines.append("# (no sizes measured)")
    ref_wrong = sum(r["m"]["wrong"] for r in rows if r["m"] and r["m"].get("available"))
    if ref_wrong:
        lines.append(f"# the reference (mpi4py) had {ref_wrong} wrong elements in its verified calls")
    for e in records:
        if e.get("kind") == "error" and e["coll"] == coll:
            lines.append(f"# ERROR at size {e['size']}: " + "; ".join(f"rank {k}: {v}" for k, v in e["errors"].items()))
    return "\n".join(lines)


def commit_label(header: dict[str, Any]) -> str:
    """'build 1ee5869, checkout 41be337 (dirty)': the installed pymcoll that was measured
    (pymcoll.COMMIT) and the checkout this script ran from, once when they agree."""
    build = (header.get("commit") or "?")[:7]
    source = header.get("source_commit")
    dirty = " (dirty)" if header.get("source_dirty") else ""
    if not source:
        return f"build {build}"
    if build.startswith(source[:7]) or source.startswith(build):
        return f"{source}{dirty}"
    return f"build {build}, checkout {source}{dirty}"


def format_summary(header: dict[str, Any], records: Sequence[dict[str, Any]], mode: str) -> str:
    """Markdown table for perf/README.md: per collective and size bucket, the worst (largest)
    and best (smallest) vs_ref, and the wrong elements over all sizes."""
    lines = [(f"{header['ranks']} ranks, mode `{mode}`, {header.get('mpi_name', 'MPI')} "
              f"{header.get('mpi_version', '')}, pymcoll {commit_label(header)}, {header['date'][:10]}; "
              f"{header['cores']} cores, oversubscribed {'yes' if header['oversubscribed'] else 'no'}. "
              f"Cells: worst / best vs_ref (pymcoll median / MPI median; < 1 pymcoll is faster)."),
             "",
             "| collective | " + " | ".join(label for label, _, _ in BUCKETS) + " | #wrong |",
             "|---|" + "---:|" * (len(BUCKETS) + 1)]
    for coll in header["colls"]:
        rows = rows_of(records, coll)
        if any(r.get("kind") == "skipped" and r["coll"] == coll for r in records):
            lines.append(f"| {METHODS[coll]} | " + " | ".join("not in this build" for _ in BUCKETS) + " | – |")
            continue
        if not rows and not any(e.get("coll") == coll for e in records if e.get("kind") == "error"):
            continue
        cells = []
        for _, low, high in BUCKETS:
            ratios = [r["p"]["vs_ref"] for r in rows if low <= r["size"] <= high and r["p"].get("vs_ref") is not None]
            timed = [r for r in rows if low <= r["size"] <= high]
            if ratios:
                cells.append(f"{max(ratios):.2f} / {min(ratios):.2f}")
            else:
                cells.append("n/a" if timed else "–")
        wrong = sum(r["p"]["wrong"] for r in rows)
        errors = any(e.get("kind") == "error" and e["coll"] == coll for e in records)
        cells.append(str(wrong) + (" (error)" if errors else ""))
        lines.append(f"| {METHODS[coll]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@plotter("bench_collectives", dpi=100, rect=(0, 0, 1, 0.97))
def plot(plt: Any, header: dict[str, Any], records: Sequence[dict[str, Any]], mode: str) -> Any:
    """PNG with one panel per collective: median (and min) latency vs size, log-log, for both
    implementations, vs_ref on the right axis; Barrier as two bars. Written to the path given
    last; False (saying why on stderr) without matplotlib or without a measured collective."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    colls = [c for c in header["colls"] if rows_of(records, c)]
    if not colls:
        print(f"no plot for mode {mode}: no collective was measured", file=sys.stderr)
        return None
    ncols = min(4, len(colls))
    nrows = math.ceil(len(colls) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.5 * nrows + 0.6), squeeze=False)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for ax in axes.flat[len(colls):]:
        ax.set_visible(False)
    for ax, coll in zip(axes.flat, colls):
        rows = rows_of(records, coll)
        ref = [r for r in rows if r["m"] is not None and r["m"].get("available")]
        if coll == "barrier":
            p = rows[0]["p"]
            labels, values = ["pymcoll"], [p["median_us"]]
            if ref:
                labels.append("mpi4py")
                values.append(ref[0]["m"]["median_us"])
            ax.bar(labels, values, color=["tab:blue", "tab:orange"][:len(values)])
            ax.set_ylabel("median us per call")
            ratio = f", vs_ref {p['vs_ref']:.2f}" if p.get("vs_ref") is not None else ""
            ax.set_title(f"Barrier{ratio}", fontsize=9)
            continue
        sizes = [r["size"] for r in rows]
        ax.loglog(sizes, [r["p"]["median_us"] for r in rows], "o-", ms=3, color="tab:blue", label="pymcoll median")
        ax.loglog(sizes, [r["p"]["min_us"] for r in rows], ".", color="tab:blue", alpha=0.4, label="pymcoll min")
        if ref:
            ax.loglog([r["size"] for r in ref], [r["m"]["median_us"] for r in ref], "s-", ms=3,
                      color="tab:orange", label="mpi4py median")
        ax.set_xscale("log", base=2)
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(METHODS[coll] + ("" if ref else " (reference n/a)"), fontsize=9)
        ax.tick_params(labelsize=7)
        ratios = [(r["size"], r["p"]["vs_ref"]) for r in rows if r["p"].get("vs_ref") is not None]
        if ratios:
            rax = ax.twinx()
            rax.plot([s for s, _ in ratios], [v for _, v in ratios], "d--", ms=3, color="tab:green",
                     label="vs_ref (right)")
            rax.axhline(1.0, color="tab:green", lw=0.8, alpha=0.5)
            top = max(v for _, v in ratios)
            if top / max(min(v for _, v in ratios), 1e-9) > 8:
                rax.set_yscale("log", base=2)
                rax.yaxis.set_major_formatter(plain)
            else:
                rax.set_ylim(0, max(1.2, top) * 1.15)
            rax.tick_params(labelsize=7, colors="tab:green")
        if coll == next(c for c in colls if c != "barrier"):  # one legend, in the first curve panel
            handles, labels = ax.get_legend_handles_labels()
            if ratios:
                more = rax.get_legend_handles_labels()
                handles, labels = handles + more[0], labels + more[1]
            ax.legend(handles, labels, fontsize=6, loc="upper left", framealpha=0.85)
    for ax in axes[-1]:
        if ax.get_visible():
            ax.set_xlabel("per-rank message (bytes)", fontsize=8)
    for ax in axes[:, 0]:
        if ax.get_visible() and not ax.get_ylabel():
            ax.set_ylabel("us per call", fontsize=8)
    fig.suptitle(f"pymcoll {header['pymcoll']} ({commit_label(header)}) vs {header.get('mpi_name', 'MPI')} "
                 f"{header.get('mpi_version', '')}, mode {mode}: us per call (slowest rank), vs_ref on the right "
                 f"axis (< 1: pymcoll faster); {header['ranks']} ranks"
                 + (f", virtual nodes of {header['node_size']}" if header.get("node_size") else "")
                 + f", {header['cores']} cores, oversubscribed {'yes' if header['oversubscribed'] else 'no'}, "
                 f"{header['date'][:10]}", fontsize=9)
    return fig


def format_run_header(header: dict[str, Any]) -> str:
    """The '#' lines above the tables: bench's header, then affinity, source, sizes and memcpy."""
    sizes = header.get("sizes") or [0]
    parts = [f"{m['bytes'] >> 20} MiB {m['bandwidth_GBps']:.1f} GB/s" for m in header.get("memcpy", [])]
    return "\n".join([
        bench.format_header(header).replace("# pymcoll bench", "# bench_collectives"),
        (f"# affinity by rank: {' | '.join(header.get('affinity_by_rank', []))}; checkout "
         f"{header.get('source_commit')}{' (dirty)' if header.get('source_dirty') else ''}; sizes "
         f"{sizes[0]}-{sizes[-1]} B; iters-scale {header.get('iters_scale', 1):g}"),
        "# memcpy (numpy copy, all ranks at once, slowest rank): " + (", ".join(parts) or "not measured"),
    ])


def report(header: dict[str, Any], records: list[dict[str, Any]], mode: str, stem: Optional[str],
           args: argparse.Namespace) -> None:
    """Print the tables (and summary) of `mode`; write its JSON and PNG to `stem` (None: print only)."""
    print(f"\n# ===== mode {mode} =====")
    for coll in header["colls"]:
        print("\n" + format_table(records, coll, header, mode))
    if args.summary:
        print("\n" + format_summary(header, records, mode))
    if stem is None:
        return
    if not args.from_json:
        bench.write_json(stem + ".json", header, records)
        print(f"\n# wrote {stem}.json")
    if not args.no_plot and plot(header, records, mode, stem + ".png"):
        print(f"# wrote {stem}.png")


def from_json(args: argparse.Namespace) -> int:
    """--from-json: the tables (and summary, and with --out the PNG) of a results file."""
    with open(args.from_json) as f:
        data = json.load(f)
    header, records = data[0], data[1:]
    mode = header.get("mode", "plain")
    print(format_run_header(header))
    report(header, records, mode, args.out, args)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark (starting mpiexec if needed); returns the exit status: 0, 1 when a
    pymcoll result was wrong or a collective failed, 2 on bad options, 124 on timeout."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.from_json:
        return from_json(args)
    if not args.launched and not launch.is_launched():
        return launch_self(__file__, args.np, argv, mpiexec=args.mpiexec, timeout=args.timeout,
                           hint="raise --timeout or measure fewer sizes (--max-bytes), collectives (--colls) "
                                "or modes")

    import pymcoll

    world = MPI.COMM_WORLD
    rank, ranks = world.Get_rank(), world.Get_size()
    if ranks != args.np and rank == 0 and any(a == "--np" or a.startswith("--np=") for a in argv):
        print(f"note: mpiexec started {ranks} ranks; --np={args.np} ignored", file=sys.stderr)
    if args.heap and "PYMCOLL_HEAP_SIZE" not in os.environ:
        # Each rank's share holds the largest case's two buffers (ranks x size each),
        # with room for the previous case's while the garbage collector lags.
        os.environ["PYMCOLL_HEAP_SIZE"] = str(ranks * 4 * ranks * max(args.sizes))
    comm = pymcoll.Comm(world, node_size=args.node_size)
    failed = False
    try:
        memcpy = measure_memcpy(world, args)
        base = describe(comm, args, memcpy)
        if rank == 0:
            print(format_run_header(base), flush=True)
        progress = bench.progress_printer("bench_collectives")
        for mode in args.modes:
            header = {**base, "mode": mode}
            records = run_mode(comm, mode, args, progress)
            add_mem_frac(records, memcpy)
            failed |= any(r.get("kind") == "error" or (r.get("impl") == "pymcoll" and r.get("wrong"))
                          for r in records)
            if rank == 0:
                report(header, records, mode, output_stem(args, mode, ranks, base["mpi_tag"]), args)
                sys.stdout.flush()
    finally:
        comm.Free()
    if failed and rank == 0:
        print("bench_collectives: some pymcoll results were wrong or a collective failed (see #wrong, ERROR)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
