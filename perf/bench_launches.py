#!/usr/bin/env python3
"""`python -m pymcoll bench` launched several times, merged into one result.

A launch's state (where the kernel put its buffers, which pages are huge)
moves large-message times by 10-50% between launches while blocks within one
launch agree, so acceptance ratios are taken as the median over launches of
each launch's side-by-side ratio. Every option after ``--`` goes to the bench
command unchanged; ``--json`` and ``--plot`` name the merged outputs.

    python perf/bench_launches.py --launches 3 --json perf/results/large_np2.json \\
        --plot perf/results/large_np2.png -- -n 2 --colls all -m 1M:64M

Merged record fields: median_us (median of the launches' medians), vs_ref and
mem_frac (medians of the launches' values), launch_median_us, launch_vs_ref,
launch_mem_frac (one per launch), wrong (summed); the header gains launches
and the per-launch commands.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Optional, Sequence

from pymcoll.cli.bench_table import format_header, format_table, write_json


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


def merge(docs: list[list[dict[str, Any]]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, records) of several launches' JSON documents ([header, *records] each)."""
    header = {**docs[0][0], "launches": len(docs)}
    keyed = [{(r["coll"], r["size"], r["impl"]): r for r in d[1:] if r.get("kind") == "result"} for d in docs]
    everywhere = set.intersection(*[set(k) for k in keyed])
    missing = set.union(*[set(k) for k in keyed]) - everywhere
    if missing:
        raise ValueError(f"the launches measured different points, e.g. {sorted(missing)[:3]}; "
                         f"run them with the same options")
    records = []
    for key, first in keyed[0].items():
        runs = [k[key] for k in keyed]
        rec = {**first, "wrong": sum(r["wrong"] for r in runs)}
        rec["launch_median_us"] = [r["median_us"] for r in runs]
        rec["median_us"] = _median(rec["launch_median_us"])
        rec["min_us"] = min(r["min_us"] for r in runs)
        rec["max_us"] = max(r["max_us"] for r in runs)
        rec["block_us"] = [b for r in runs for b in r["block_us"]]
        for name in ("vs_ref", "mem_frac"):
            rec[f"launch_{name}"] = [r.get(name) for r in runs]
            rec[name] = _median(rec[f"launch_{name}"])
        med = rec["median_us"]
        rec["algbw_GBps"] = rec["size"] / (med * 1e-6) / 1e9 if med else 0.0
        rec["busbw_GBps"] = rec["algbw_GBps"] * rec["busbw_factor"]
        records.append(rec)
    return header, records


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=3, help="bench launches to merge (default 3)")
    ap.add_argument("--json", required=True, help="merged result file")
    ap.add_argument("--plot", default=None, help="PNG of the merged result")
    ap.add_argument("--keep", default=None, help="directory for each launch's own JSON (default: a temporary one)")
    args = ap.parse_args(own)
    if args.launches < 1:
        ap.error(f"--launches={args.launches}: expected at least 1")
    if any(a in ("--json", "--plot") or a.startswith(("--json=", "--plot=")) for a in bench_args):
        ap.error("give --json and --plot before '--': they name the merged result")
    workdir = args.keep or tempfile.mkdtemp(prefix="pymcoll-launches-")
    os.makedirs(workdir, exist_ok=True)
    docs, commands = [], []
    for i in range(args.launches):
        out = os.path.join(workdir, f"launch{i + 1}.json")
        cmd = [sys.executable, "-m", "pymcoll", "bench", *bench_args, "-q", "--json", out]
        commands.append(shlex.join(cmd[1:]))
        print(f"launch {i + 1}/{args.launches}: {shlex.join(cmd[1:])}", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if proc.returncode not in (0, 1):
            print(f"launch {i + 1} failed with status {proc.returncode}", file=sys.stderr)
            return proc.returncode
        with open(out, encoding="utf-8") as f:
            docs.append(json.load(f))
    header, records = merge(docs)
    header["launch_commands"] = commands
    write_json(args.json, header, records)
    print(format_header(header))
    print(f"# merged: median over {args.launches} launches of each launch's median and ratio")
    for coll in dict.fromkeys(r["coll"] for r in records):
        print("\n" + format_table(records, coll, header))
    if args.plot:
        from pymcoll.cli.bench_plot import plot

        plot(header, records, args.plot)
        print(f"# wrote {args.json} and {args.plot}")
    wrong = sum(r["wrong"] for r in records)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
