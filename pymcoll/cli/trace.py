"""Analyze the collective traces of a job, or export them as a timeline.

Run the job with PYMCOLL_TRACE=DIR: every rank writes its collectives to
DIR/rank<N>.json at finalize, and DIR/rank<N>.<event>.json on a timeout or a
signal (send SIGUSR1 to a hung rank to record where it is). Then:

    python -m pymcoll trace analyze DIR          # the problem in words, then the tables
    python -m pymcoll trace analyze DIR --json   # everything as one JSON object
    python -m pymcoll trace export DIR out.json  # open in chrome://tracing or https://ui.perfetto.dev

analyze names the first collective that did not complete and the ranks that
held it up (and what they were doing instead), ranks that called a different
collective or skipped one, and ranks that arrive last again and again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Optional

from ..trace import TraceError, TraceSet, TraceWarning, analyze, export_chrome, load_dumps

HELP = "analyze the collective trace dumps of a job (PYMCOLL_TRACE=DIR) or export them for chrome://tracing"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the subcommands of ``python -m pymcoll trace``."""
    sub = parser.add_subparsers(dest="trace_command", metavar="<subcommand>", title="subcommands", required=True)
    analyze = sub.add_parser("analyze", help="name hangs, mismatched calls and stragglers; print summary tables")
    analyze.add_argument("dir", metavar="DIR", help="the directory PYMCOLL_TRACE named")
    analyze.add_argument("--json", action="store_true", help="print the whole report as one JSON object")
    export = sub.add_parser("export", help="write a Chrome trace (Trace Event Format) of the dumps")
    export.add_argument("dir", metavar="DIR", help="the directory PYMCOLL_TRACE named")
    export.add_argument("out", metavar="OUT.json", help="the trace file to write")


def _load(directory: str) -> Optional[TraceSet]:
    """The merged dumps of `directory`, skipped files reported on stderr; None (after a message) if none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)  # printed below, once each
        try:
            trace = load_dumps(directory)
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return None
    for problem in trace.problems:
        print(f"warning: {problem}", file=sys.stderr)
    return trace


def _analyze(args: argparse.Namespace) -> int:
    trace = _load(args.dir)
    if trace is None:
        return 1
    report = analyze(trace)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.paragraph)
        print()
        print(report.table())
    return 0


def _export(args: argparse.Namespace) -> int:
    trace = _load(args.dir)
    if trace is None:
        return 1
    try:
        count = export_chrome(trace, args.out)
    except OSError as exc:
        print(f"error: cannot write OUT.json {args.out}: {exc.strerror or exc}; name a writable path",
              file=sys.stderr)
        return 1
    print(f"wrote {count} events for {len(trace.ranks)} ranks to {args.out}")
    print("open it in chrome://tracing (Load) or at https://ui.perfetto.dev (Open trace file)")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``trace analyze`` or ``trace export``; 1 when DIR holds no dumps or OUT cannot be written."""
    try:
        return _analyze(args) if args.trace_command == "analyze" else _export(args)
    except BrokenPipeError:
        # Output piped into `head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
