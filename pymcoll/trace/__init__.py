"""Reading, analyzing and exporting the collective traces pymcoll's core dumps.

Run a job with ``PYMCOLL_TRACE=DIR``: every process records its collectives in
a ring per communicator and writes them to ``DIR/rank<N>.json`` at finalize,
and to ``DIR/rank<N>.<event>.json`` on a timeout or a signal (``kill -USR1``
a hung rank to see where it is). Then::

    python -m pymcoll trace analyze DIR          # what went wrong, in one paragraph, and tables
    python -m pymcoll trace export DIR out.json  # a timeline for chrome://tracing or ui.perfetto.dev

or from Python::

    from pymcoll.trace import analyze, export_chrome, load_dumps
    dumps = load_dumps("DIR")
    print(analyze(dumps).paragraph)
    export_chrome(dumps, "out.json")

These modules use the standard library only; they read dumps without MPI.
"""

from __future__ import annotations

from .analyze import Report, analyze, analyze_dir
from .chrome import chrome_trace, export_chrome
from .dumps import TraceError, TraceSet, TraceWarning, load_dumps, merge_dumps

__all__ = ["load_dumps", "merge_dumps", "analyze", "analyze_dir", "export_chrome", "chrome_trace", "Report",
           "TraceSet", "TraceError", "TraceWarning"]
