"""Benchmark pymcoll's collectives side by side with the MPI's own.

For every collective and message size, pymcoll.Comm and the MPI collective
it wraps (the same communicator's ``.mpi``, called through mpi4py, so both
sides pay a Python call) run in alternating blocks: warm-up, then
A B A B ... (pymcoll, mpi4py). Before every call the send buffer gets a new
value (one byte per 4 KiB page); only the call itself is timed. A Barrier
precedes each block, and the time per call of a block is the slowest rank's
(MPI_MAX over ranks). Each size reports the median and the minimum over the
blocks, and the result of one call per implementation is verified in full.

Columns follow nccl-tests: size is the bytes each rank ends up with (for
Allgather the whole receive buffer), count the elements each rank sends,
algbw = size / time and busbw = algbw x (n-1)/n for Allgather, x 1 for
Bcast; vs_ref = pymcoll median / mpi median (below 1: pymcoll is faster).

Started without mpiexec, it starts itself under ``mpiexec -n NP``. Examples:

    python -m pymcoll bench
    python -m pymcoll bench --np 4 --node-size 2 --colls allgather --max-bytes 64K
    mpiexec -n 2 python -m pymcoll bench --json bench.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .launch import DEFAULT_TIMEOUT_S, default_np, is_launched, python_command, run_under_mpiexec

HELP = "benchmark Bcast, Allgather and Barrier against the MPI's own collectives (through mpi4py)"

COLLECTIVES: tuple[str, ...] = ("bcast", "allgather", "allreduce", "barrier")
TITLES = {"bcast": "Bcast", "allgather": "Allgather", "allreduce": "Allreduce (float32 SUM)", "barrier": "Barrier"}
IMPLS: tuple[str, ...] = ("pymcoll", "mpi4py")  # A, B of every A B A B ... sequence
DTYPE = np.uint8
TYPE_NAME = "uint8"
STAMP_STRIDE = 4096  # one new byte per page before every call
POISON = 255  # never produced by _pattern
MIN_ITERS = 3
TARGET_BLOCK_S = 0.025  # a block aims at about this long (iterations are capped by it)


def busbw_factor(coll: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth factor: Allgather (n-1)/n, Allreduce 2(n-1)/n, Bcast 1, Barrier 0."""
    if coll == "allgather":
        return (ranks - 1) / ranks if ranks else 0.0
    if coll == "bcast":
        return 1.0
    if coll == "allreduce":
        return 2 * (ranks - 1) / ranks if ranks else 0.0
    return 0.0


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
            raise ValueError(f"{name}={value} is not a power of two; use e.g. {lower} or {lower * 2}")
    if min_bytes > max_bytes:
        raise ValueError(f"--min-bytes={min_bytes} is larger than --max-bytes={max_bytes}; swap them")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def parse_colls(text: str) -> list[str]:
    """'bcast,allgather' -> ['bcast', 'allgather']; ValueError names --colls and the choices."""
    colls = [c.strip().lower() for c in str(text).split(",") if c.strip()]
    bad = [c for c in colls if c not in COLLECTIVES]
    if bad or not colls:
        raise ValueError(f"--colls={text!r}: unknown {', '.join(bad) or '(empty list)'}; "
                         f"choose a comma list of {', '.join(COLLECTIVES)}")
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
        "type": TYPE_NAME,
        "reference": "mpi4py (the wrapped communicator's own collective)",
        "method": ("per size: probe, warm-up, then alternating blocks pymcoll, mpi4py, ...; "
                   "a new value in the send buffer before each call (untimed), each call timed; "
                   "Barrier before each block; time per call = max over ranks of block time / iters; "
                   "median and min over blocks; one verified call per implementation and size"),
        "command": [sys.executable, *sys.argv],
    }
    header.update(settings)
    return header


def format_header(header: dict[str, Any]) -> str:
    """The '#' lines printed above the tables."""
    node = f"virtual nodes of {header['node_size']}" if header.get("node_size") else "real nodes"
    lines = [
        f"# pymcoll bench  {header['date']}",
        f"# ranks {header['ranks']} on {len(header['hosts'])} host(s), {header['nodes']} node(s) ({node}), "
        f"{header['lanes']} lane(s); cores {header['cores']}; "
        f"oversubscribed {'yes' if header['oversubscribed'] else 'no'}; load average at start "
        f"{'/'.join(str(x) for x in header['loadavg']) if header.get('loadavg') else 'unknown'}",
        f"# MPI {' '.join(header['mpi'].split())} (standard {header['mpi_standard']}), "
        f"mpi4py {header['mpi4py']}, "
        f"numpy {header['numpy']}, Python {header['python']}",
        f"# pymcoll {header['pymcoll']} commit {header['commit']}; node segment "
        f"{'in use' if header['shm_active'] else 'not used: ' + (header['note'] or 'off')}",
    ]
    if "blocks" in header:
        lines.append(f"# timing: {header['blocks']} blocks per implementation, iterations per block "
                     f"{'fixed at ' + str(header['iters']) if header.get('iters') else 'scaled with size'}, "
                     f"type {header['type']}; times in microseconds per call, max over ranks")
    return "\n".join(lines)


# -- measuring --------------------------------------------------------------------

def _pattern(count: int, seed: int) -> np.ndarray:
    """Bytes in 0..250 that depend on position and seed (never POISON)."""
    return ((np.arange(count, dtype=np.int64) * 7 + seed) % 251).astype(DTYPE)


@dataclass
class _Case:
    """One collective at one size: the two calls, the stamp and the check."""

    size: int  # bytes each rank ends with (nccl-tests' size)
    count: int  # elements each rank sends
    root: Optional[int]
    calls: dict[str, Callable[[], None]]
    stamp: Callable[[], None]
    verify: Callable[[Callable[[], None], int], int]  # (call, seed) -> wrong elements here
    type_name: str = TYPE_NAME


def _make_case(comm: Any, coll: str, size: int, root: int) -> Optional[_Case]:
    mpi = comm.mpi
    n = comm.size
    rank = comm.rank
    counter = [0]

    def stamper(buf: np.ndarray) -> Callable[[], None]:
        view = buf[::STAMP_STRIDE]

        def stamp() -> None:
            counter[0] += 1
            view[:] = 1 + counter[0] % 250
        return stamp

    if coll == "barrier":
        def verify_barrier(call: Callable[[], None], seed: int) -> int:
            call()
            return 0
        return _Case(0, 0, None, {"pymcoll": comm.Barrier, "mpi4py": mpi.Barrier},
                     lambda: None, verify_barrier)

    if coll == "bcast":
        buf = np.zeros(size, DTYPE)
        is_root = rank == root

        def verify_bcast(call: Callable[[], None], seed: int) -> int:
            expected = _pattern(size, seed)
            buf[:] = expected if is_root else POISON
            call()
            return int(np.count_nonzero(buf != expected))
        return _Case(size, size, root,
                     {"pymcoll": lambda: comm.Bcast(buf, root), "mpi4py": lambda: mpi.Bcast(buf, root)},
                     stamper(buf) if is_root else (lambda: None), verify_bcast)

    if coll == "allgather":
        count = size // n
        if count == 0:
            return None
        send = np.zeros(count, DTYPE)
        recv = np.zeros(count * n, DTYPE)

        def verify_allgather(call: Callable[[], None], seed: int) -> int:
            send[:] = _pattern(count, seed + 13 * rank)
            recv[:] = POISON
            call()
            expected = np.concatenate([_pattern(count, seed + 13 * r) for r in range(n)])
            return int(np.count_nonzero(recv != expected))
        return _Case(count * n, count, None,
                     {"pymcoll": lambda: comm.Allgather(send, recv),
                      "mpi4py": lambda: mpi.Allgather(send, recv)},
                     stamper(send), verify_allgather)

    if coll == "allreduce":
        count = size // 4
        if count == 0:
            return None
        send = np.zeros(count, np.float32)
        recv = np.zeros(count, np.float32)

        def verify_allreduce(call: Callable[[], None], seed: int) -> int:
            # Small integers: the float32 sum is exact in any order.
            send[:] = _pattern(count, seed + 13 * rank)
            recv[:] = -1.0
            call()
            expected = sum(_pattern(count, seed + 13 * r).astype(np.float32) for r in range(n))
            return int(np.count_nonzero(recv != expected))
        return _Case(count * 4, count, None,
                     {"pymcoll": lambda: comm.Allreduce(send, recv),
                      "mpi4py": lambda: mpi.Allreduce(send, recv)},
                     stamper(send), verify_allreduce, "float32")

    raise ValueError(f"coll={coll!r}: expected one of {', '.join(COLLECTIVES)}")


def _timed(call: Callable[[], None], stamp: Callable[[], None], count: int) -> float:
    """Seconds spent inside `count` calls, each after a new stamp (not timed)."""
    clock = time.perf_counter
    total = 0.0
    for _ in range(count):
        stamp()
        t0 = clock()
        call()
        total += clock() - t0
    return total


def bench_collective(comm: Any, coll: str, sizes: Sequence[int], *, iters: Optional[int] = None,
                     warmup: Optional[int] = None, blocks: int = 10, root: int = 0,
                     target_block_s: float = TARGET_BLOCK_S,
                     progress: Optional[Callable[[str, int, int, int], None]] = None,
                     ) -> list[dict[str, Any]]:
    """Measure `coll` on pymcoll.Comm `comm` against ``comm.mpi`` at every size in `sizes`.

    Collective over `comm`: every rank calls it with the same arguments and
    gets the same records back. Args:
        coll: 'bcast', 'allgather' or 'barrier' (which ignores `sizes`: one size, 0).
        sizes: bytes each rank ends with (Allgather: the whole receive buffer;
            sizes below the rank count are skipped, others rounded down to a
            multiple of it).
        iters: calls per block; default min(default_iters(size), the calls
            that fit in `target_block_s` at the speed seen in the warm-up).
        warmup: untimed calls per implementation before the blocks (default:
            default_warmup(iters), fewer when two probe calls show that they
            would take longer than `target_block_s`).
        blocks: timed blocks per implementation, alternating pymcoll, mpi4py.
        root: the root of Bcast.
        progress: called on every rank as progress(coll, size, index, total)
            after each size.

    Returns one dict per size and implementation (``impl`` 'pymcoll' or
    'mpi4py'): size, count, type, root, ranks, iters, warmup, blocks,
    block_us (time per call of every block), median_us, min_us, max_us,
    algbw_GBps, busbw_GBps (from the median), wrong (elements that differed in
    the verified call, summed over ranks) and, on the pymcoll record, vs_ref
    (pymcoll median / mpi4py median).
    """
    from mpi4py import MPI

    if coll not in COLLECTIVES:
        raise ValueError(f"coll={coll!r}: expected one of {', '.join(COLLECTIVES)}")
    for name, value, low in (("blocks", blocks, 1), ("iters", iters, 1), ("warmup", warmup, 0)):
        if value is not None and (not isinstance(value, int) or value < low):
            raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    if not isinstance(root, int) or not 0 <= root < comm.size:
        raise ValueError(f"root={root!r}: expected a rank in 0..{comm.size - 1}")
    bad = [s for s in sizes if not isinstance(s, int) or s < 1]
    if bad:
        raise ValueError(f"sizes: expected byte counts >= 1, got {bad[:3]}")

    mpi = comm.mpi
    ranks = comm.size
    todo = [0] if coll == "barrier" else list(sizes)
    records: list[dict[str, Any]] = []
    for index, size in enumerate(todo):
        case = _make_case(comm, coll, size, root)
        if case is None:
            if progress:
                progress(coll, size, index, len(todo))
            continue
        # Two probe calls bound the warm-up on a slow (oversubscribed) machine;
        # the warm-up, timed, then sizes the blocks. Ranks agree via MPI_MAX.
        cap = default_iters(case.size)
        probe = max(_timed(case.calls[impl], case.stamp, 2) / 2 for impl in IMPLS)
        probe = mpi.allreduce(probe, op=MPI.MAX)
        if warmup is None:
            n_warm = max(2, min(default_warmup(iters or cap), int(target_block_s / max(probe, 1e-9))))
        else:
            n_warm = warmup
        warm = [_timed(case.calls[impl], case.stamp, n_warm) / max(n_warm, 1) for impl in IMPLS]
        per_call = mpi.allreduce(max(warm) if n_warm else probe, op=MPI.MAX)
        n_iters = iters or max(MIN_ITERS, min(cap, int(target_block_s / max(per_call, 1e-9))))
        times = np.zeros((len(IMPLS), blocks))
        for b in range(blocks):
            for j, impl in enumerate(IMPLS):
                mpi.Barrier()
                times[j, b] = _timed(case.calls[impl], case.stamp, n_iters)
        mpi.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
        per_call_us = times / n_iters * 1e6
        wrong = np.array([case.verify(case.calls[impl], 17 * index + 5 * j)
                          for j, impl in enumerate(IMPLS)], dtype=np.int64)
        mpi.Allreduce(MPI.IN_PLACE, wrong, op=MPI.SUM)
        medians = np.median(per_call_us, axis=1)
        for j, impl in enumerate(IMPLS):
            med = float(medians[j])
            algbw = case.size / (med * 1e-6) / 1e9 if med > 0 else 0.0
            records.append({
                "kind": "result",
                "coll": coll,
                "impl": impl,
                "size": case.size,
                "count": case.count,
                "type": case.type_name if coll != "barrier" else None,
                "root": case.root,
                "ranks": ranks,
                "iters": n_iters,
                "warmup": n_warm,
                "blocks": blocks,
                "block_us": [round(float(t), 4) for t in per_call_us[j]],
                "median_us": med,
                "min_us": float(per_call_us[j].min()),
                "max_us": float(per_call_us[j].max()),
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * busbw_factor(coll, ranks),
                "wrong": int(wrong[j]),
                "vs_ref": float(medians[0] / medians[1]) if impl == "pymcoll" and medians[1] > 0 else None,
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


# -- reporting --------------------------------------------------------------------

def paired_rows(records: Sequence[dict[str, Any]], coll: str) -> list[dict[str, Any]]:
    """Table rows of `coll`: one per size, joining the pymcoll and mpi4py records."""
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "result" and r["coll"] == coll:
            by_size.setdefault(r["size"], {})[r["impl"]] = r
    rows = []
    for size in sorted(by_size):
        pair = by_size[size]
        if "pymcoll" not in pair or "mpi4py" not in pair:
            continue
        p, m = pair["pymcoll"], pair["mpi4py"]
        rows.append({
            "size": size, "count": p["count"], "type": p["type"], "root": p["root"],
            "pymcoll_us": p["median_us"], "mpi_us": m["median_us"],
            "min_pymcoll_us": p["min_us"], "min_mpi_us": m["min_us"],
            "algbw_GBps": p["algbw_GBps"], "busbw_GBps": p["busbw_GBps"],
            "vs_ref": p["vs_ref"], "wrong": p["wrong"] + m["wrong"], "iters": p["iters"],
        })
    return rows


COLUMNS = ("size", "count", "type", "root", "pymcoll(us)", "mpi(us)", "min_pymcoll", "min_mpi",
           "algbw(GB/s)", "busbw(GB/s)", "vs_ref", "#wrong", "iters")


def format_table(records: Sequence[dict[str, Any]], coll: str) -> str:
    """The nccl-tests/OSU style table of `coll` (see the module docstring for the columns)."""
    rows = paired_rows(records, coll)
    blocks = next((r["blocks"] for r in records if r.get("coll") == coll and "blocks" in r), 0)
    cells = []
    for r in rows:
        bw = coll != "barrier"
        cells.append((
            str(r["size"]), str(r["count"]), r["type"] or "-",
            "-" if r["root"] is None else str(r["root"]),
            f"{r['pymcoll_us']:.2f}", f"{r['mpi_us']:.2f}",
            f"{r['min_pymcoll_us']:.2f}", f"{r['min_mpi_us']:.2f}",
            f"{r['algbw_GBps']:.3f}" if bw else "-", f"{r['busbw_GBps']:.3f}" if bw else "-",
            f"{r['vs_ref']:.2f}" if r["vs_ref"] is not None else "-",
            str(r["wrong"]), str(r["iters"]),
        ))
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
              for i, c in enumerate(COLUMNS)]
    widths[0] += 1  # room for the '#' that starts the column line
    title = (f"# {TITLES[coll]}: median / min over {blocks} blocks per implementation; "
             f"vs_ref = pymcoll / mpi median (< 1 is faster)")
    lines = [title, "#" + "  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths))[1:]]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    if not cells:
        lines.append("# (no sizes measured)")
    return "\n".join(lines)


def write_json(path: str, header: dict[str, Any], records: Sequence[dict[str, Any]]) -> None:
    """Write [header, *records] as JSON to `path` (atomically, via path + '.tmp')."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump([header, *records], f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


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


# -- the command ------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``python -m pymcoll bench``."""
    parser.add_argument("--colls", default="bcast,allgather,barrier",
                        help="comma list of collectives: bcast, allgather, barrier (default: all)")
    parser.add_argument("--min-bytes", default="8", help="smallest size, a power of two (default 8)")
    parser.add_argument("--max-bytes", default="1M",
                        help="largest size, a power of two; K/M suffixes (default 1M)")
    parser.add_argument("--iters", type=int, default=None,
                        help="calls per timed block (default: scales down with size, "
                             f"a block lasting about {TARGET_BLOCK_S * 1000:g} ms)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed calls per implementation and size (default: a tenth of a block)")
    parser.add_argument("--blocks", type=int, default=10,
                        help="timed blocks per implementation and size (default 10)")
    parser.add_argument("--root", type=int, default=0, help="root rank of Bcast (default 0)")
    parser.add_argument("--node-size", type=int, default=None,
                        help="group consecutive ranks into virtual nodes of this size "
                             "(default: PYMCOLL_NODE_SIZE, else real nodes)")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the header and one record per size and implementation here")
    parser.add_argument("--np", type=int, default=None,
                        help=f"ranks to start when not run under mpiexec (default {default_np()}: "
                             "min(CPUs, 4), at least 2)")
    parser.add_argument("--mpiexec", default=None,
                        help="mpiexec to start the ranks with (default: next to this Python, else PATH)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds before a self-started job is stopped (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)


def check_arguments(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """Validate the parsed options; returns (collectives, sizes). ValueError names the option."""
    colls = parse_colls(args.colls)
    sizes = power_of_two_sizes(parse_size(args.min_bytes, "--min-bytes"),
                               parse_size(args.max_bytes, "--max-bytes"))
    for name in ("iters", "blocks", "np", "node_size"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value}: expected an integer >= 1")
    if args.warmup is not None and args.warmup < 0:
        raise ValueError(f"--warmup={args.warmup}: expected an integer >= 0")
    if args.root < 0:
        raise ValueError(f"--root={args.root}: expected a rank >= 0")
    return colls, sizes


def run(args: argparse.Namespace) -> int:
    """``python -m pymcoll bench``: returns 0, 1 if a result was wrong, 2 on bad options."""
    try:
        colls, sizes = check_arguments(args)
    except ValueError as exc:
        print(f"pymcoll bench: {exc}", file=sys.stderr)
        return 2
    if not args.launched and not is_launched():
        argv = list(getattr(args, "_argv", None) or sys.argv[1:])
        program = python_command("pymcoll", *argv, "--launched")
        try:
            return run_under_mpiexec(args.np or default_np(), program, timeout=args.timeout,
                                     mpiexec=args.mpiexec)
        except (FileNotFoundError, ValueError) as exc:
            print(f"pymcoll bench: {exc}", file=sys.stderr)
            return 2

    from mpi4py import MPI

    import pymcoll

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if args.np is not None and args.np != world.Get_size() and rank == 0:
        print(f"pymcoll bench: --np={args.np} ignored: mpiexec started {world.Get_size()} ranks",
              file=sys.stderr)
    if args.root >= world.Get_size():
        if rank == 0:
            print(f"pymcoll bench: --root={args.root} is not a rank of the {world.Get_size()} started; "
                  f"use 0..{world.Get_size() - 1}", file=sys.stderr)
        return 2
    comm = pymcoll.Comm(world, node_size=args.node_size)
    try:
        header = describe_run(comm, tool="python -m pymcoll bench", colls=colls, sizes=sizes,
                              iters=args.iters, warmup=args.warmup, blocks=args.blocks, root=args.root)
        if rank == 0:
            print(format_header(header), flush=True)
        progress = progress_printer("pymcoll bench")
        records: list[dict[str, Any]] = []
        for coll in colls:
            recs = bench_collective(comm, coll, sizes, iters=args.iters, warmup=args.warmup,
                                    blocks=args.blocks, root=args.root, progress=progress)
            records += recs
            if rank == 0:
                print("\n" + format_table(recs, coll), flush=True)
        wrong = sum(r["wrong"] for r in records)
        if rank == 0:
            if args.json:
                write_json(args.json, header, records)
                print(f"\n# wrote {args.json}")
            if wrong:
                print(f"pymcoll bench: {wrong} wrong elements in verified calls (see #wrong)",
                      file=sys.stderr)
        return 1 if wrong else 0
    finally:
        comm.Free()
