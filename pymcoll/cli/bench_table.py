"""The text and JSON output of ``python -m pymcoll bench``: run header, tables, records."""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

from .bench_cases import SIZE_MEANING, TITLES

# Implementation names as records carry them -> as the tables print them.
IMPL_LABELS = {"pymcoll": "pymcoll", "mpi4py": "mpi"}

OSU_COLUMNS = ("Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations")
NCCL_COLUMNS = ("time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong")
COLUMNS_HEAD = ("Size", "count", "type", "redop", "root", "impl")

COLUMN_NOTES = (
    ("# columns: Size = bytes of the largest buffer of the call (nccl-tests), per collective in its table; "
     "count = elements per rank's block;"),
    ("#   Avg/Min/Max Latency(us) = each rank's mean time per call over its timed calls, averaged / least / "
     "most over the ranks (OSU); Iterations = timed calls per rank;"),
    ("#   time(us) = median over the blocks of the slowest rank's time per call; algbw = Size / time, "
     "busbw = algbw x the collective's factor (nccl-tests; 1 GB = 1e9 B);"),
    ("#   #wrong = elements that differed from numpy's result in one verified call per size and "
     "implementation, summed over ranks"),
)
RATIO_NOTE = "#   vs_ref = pymcoll time / reference time, same size (< 1: pymcoll is faster)"
MEM_NOTE = ("#   mem_frac = memcpy time of half the busiest rank's read + write bytes, every rank at once, "
            "/ time (from 64 KiB)")


def mpi_short_name(text: Optional[str]) -> str:
    """'MPICH Version:   5.0.2' -> 'MPICH 5.0.2'; Open MPI's long string -> its first part."""
    if not text:
        return "MPI"
    first = str(text).strip().splitlines()[0].split(",")[0]
    return " ".join(first.replace("Version:", "").split())


def format_header(header: dict[str, Any]) -> str:
    """The '#' lines printed above the tables: what ran, where, and how it was timed."""
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
    if "vs" in header:
        lines.append("# reference: " + (
            f"{mpi_short_name(header.get('mpi'))}'s own collectives through mpi4py on the communicator "
            f"pymcoll wraps (--vs mpi)" if header["vs"] == "mpi" else "none, pymcoll alone (--vs none)"))
    if "blocks" in header:
        what = f"type {header['type']}"
        if header.get("op"):
            what += f", reductions {header['op']}"
        lines.append(f"# timing: {header['blocks']} blocks per implementation, iterations per block "
                     f"{'fixed at ' + str(header['iters']) if header.get('iters') else 'scaled with size'}, "
                     f"{what}; times in microseconds per call"
                     + (f"; {header['mode']} calls" if header.get("mode") else "")
                     + ("; buffers from pymcoll.alloc (shared heap)" if header.get("buffers") == "heap" else "")
                     + ("; the MPI's Barrier before every timed call" if header.get("timing") == "barrier" else
                        "; calls back to back within a block" if header.get("timing") == "back-to-back" else ""))
    if header.get("tool") == "python -m pymcoll bench":
        lines += COLUMN_NOTES
        if header.get("vs", "mpi") != "none":
            lines.append(RATIO_NOTE)
        lines.append(MEM_NOTE)
    return "\n".join(lines)


def paired_rows(records: Sequence[dict[str, Any]], coll: str) -> list[dict[str, Any]]:
    """Rows of `coll` with both implementations: one per size, the pymcoll and mpi4py records joined.

    Keys: size, count, type, root, pymcoll_us, mpi_us (medians), min_pymcoll_us, min_mpi_us
    (minima over blocks), algbw_GBps, busbw_GBps (pymcoll's), vs_ref, wrong (both), iters.
    """
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


def _results(records: Sequence[dict[str, Any]], coll: str) -> list[dict[str, Any]]:
    """`coll`'s result records by size, pymcoll first within a size."""
    mine = [r for r in records if r.get("kind") == "result" and r.get("coll") == coll]
    order = {"pymcoll": 0}
    return sorted(mine, key=lambda r: (r["size"], order.get(r["impl"], 1), r["impl"]))


def _us(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(value: float) -> str:
    """A ratio with two decimals, and two significant digits below 0.1, so that a call
    hundreds of times faster than the reference does not print as 0.00."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def format_table(records: Sequence[dict[str, Any]], coll: str,
                 header: Optional[dict[str, Any]] = None) -> str:
    """The table of `coll`: a title, then one row per size and implementation.

    Columns: Size count type redop root impl, OSU's latency columns, nccl-tests' time algbw
    busbw #wrong, and vs_ref on the pymcoll row when a reference ran (see COLUMN_NOTES).
    `header` (describe_run's record) adds the MPI's name to the title.
    """
    rows = _results(records, coll)
    ratio = any(r["impl"] != "pymcoll" for r in rows) or (
        not rows and (header or {}).get("vs", "mpi") != "none")
    mem = any(r.get("mem_frac") is not None for r in rows)
    columns = COLUMNS_HEAD + OSU_COLUMNS + NCCL_COLUMNS + (("vs_ref",) if ratio else ()) + (("mem_frac",) if mem else ())
    cells = []
    for r in rows:
        bw = coll != "barrier"
        runs = r.get("iters", 0) * r.get("blocks", 0)
        row = [
            str(r["size"]), str(r["count"]), r.get("type") or "-", r.get("redop") or "-",
            "-" if r.get("root") is None else str(r["root"]), IMPL_LABELS.get(r["impl"], r["impl"]),
            _us(r.get("osu_avg_us")), _us(r.get("osu_min_us")), _us(r.get("osu_max_us")), str(runs),
            _us(r["median_us"]),
            f"{r['algbw_GBps']:.3f}" if bw else "-", f"{r['busbw_GBps']:.3f}" if bw else "-",
            str(r["wrong"]),
        ]
        if ratio:
            row.append(_ratio(r["vs_ref"]) if r.get("vs_ref") is not None else "-")
        if mem:
            row.append(f"{r['mem_frac']:.2f}" if r.get("mem_frac") is not None else "-")
        cells.append(row)
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
              for i, c in enumerate(columns)]
    widths[0] += 2  # room for the '# ' that starts the column line

    first = rows[0] if rows else {}
    ranks = first.get("ranks") or (header or {}).get("ranks")
    blocks = first.get("blocks") or (header or {}).get("blocks")
    what = [TITLES.get(coll, coll)]
    if ranks:
        what.append(f"{ranks} ranks")
    if first.get("type"):
        what.append(first["type"] + (f" {first['redop']}" if first.get("redop") else ""))
    if ratio:
        name = mpi_short_name((header or {}).get("mpi")) if header else "the MPI"
        what.append(f"reference {name} through mpi4py")
    else:
        what.append("no reference")
    if blocks:
        what.append(f"{blocks} blocks per implementation")
    if first.get("mode") == "persistent":
        what.append("persistent calls")
    if first.get("timing") == "back-to-back":
        what.append("back to back")
    if first.get("reference_missing"):
        what.append(f"reference not timed: {first['reference_missing']}")
    lines = ["# " + ", ".join(what)]
    if coll != "barrier":
        factor = first.get("busbw_factor")
        lines.append(f"# Size = {SIZE_MEANING.get(coll, 'bytes')}"
                     + (f"; busbw = algbw x {factor:.3g}" if factor is not None else ""))
    lines.append("# " + "  ".join(c.rjust(w) for c, w in zip(columns, widths))[2:])
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    if not cells:
        lines.append("# (no sizes measured: every size is smaller than one element per rank's block)")
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
