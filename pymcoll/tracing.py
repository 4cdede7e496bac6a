"""The collective trace of this process: settings and dumps.

Every collective appends a record to its communicator's ring in the C core
(always on; PYMCOLL_TRACE_RING records per communicator). With
``PYMCOLL_TRACE=DIR`` each rank writes ``DIR/rank<N>.json`` at exit and
``DIR/rank<N>.<event>.json`` on a timeout, SIGUSR1 or a fatal signal;
``python -m pymcoll trace analyze DIR`` reads them.
"""

from __future__ import annotations

import atexit
from typing import Optional

from . import config
from ._native import ffi, lib

_applied: dict[str, object] = {}


def setup(directory: Optional[str] = None, ring: Optional[int] = None, signals: Optional[bool] = None) -> None:
    """Apply trace settings; arguments left None come from the environment.

    Args:
        directory: where dumps go (default ``PYMCOLL_TRACE``; None there: no files).
        ring: records kept per communicator created from now on (default
            ``PYMCOLL_TRACE_RING``); 0 turns tracing off for them.
        signals: dump on SIGUSR1 and fatal signals, and signal the local
            ranks a timed-out wait was waiting for (default ``PYMCOLL_TRACE_SIGNALS``).
    """
    d = config.value("PYMCOLL_TRACE", directory)
    r = config.value("PYMCOLL_TRACE_RING", ring)
    s = config.value("PYMCOLL_TRACE_SIGNALS", signals)
    if not isinstance(r, int) or isinstance(r, bool) or r < 0:
        raise ValueError(f"ring: expected an integer >= 0 (0 = no trace), got {r!r}")
    d = config.parse_directory(str(d), "directory") if d else ""
    cfg = ffi.new("pmc_trace_config *")
    keep = ffi.new("char[]", d.encode())
    cfg.dir = keep
    cfg.ring_records = r
    cfg.signals = int(bool(s))
    rc = lib.pmc_trace_setup(cfg)
    if rc != lib.PMC_OK:
        what = "too long a path" if rc == lib.PMC_ERR_ARG else "cannot create or write it"
        raise ValueError(f"PYMCOLL_TRACE={d!r}: {what}; name a writable directory or unset PYMCOLL_TRACE")
    _applied.update(directory=d, ring=r, signals=bool(s))


def ensure_setup() -> None:
    """Apply the environment's settings once (before the first communicator)."""
    if not _applied:
        setup()


def directory() -> Optional[str]:
    """The directory dumps go to, or None."""
    d = ffi.string(lib.pmc_trace_dir()).decode()
    return d or None


def dump(reason: str = "request") -> str:
    """Write this rank's trace now (to DIR/rank<N>.json); returns DIR.

    Raises RuntimeError when no directory is set (set PYMCOLL_TRACE or call
    :func:`setup` with one) or the file cannot be written.
    """
    d = directory()
    if d is None:
        raise RuntimeError("pymcoll.tracing.dump(): no trace directory; set PYMCOLL_TRACE=DIR or call "
                           "pymcoll.tracing.setup(directory=DIR) first")
    if lib.pmc_trace_dump(reason.encode()) != lib.PMC_OK:
        raise RuntimeError(f"pymcoll.tracing.dump(): could not write to {d!r}")
    return d


def cost_ns(iterations: int = 1_000_000) -> float:
    """Mean cost in nanoseconds of recording one collective (enter and end,
    clock reads included), timed on a private ring."""
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations: expected an integer >= 1, got {iterations!r}")
    return float(lib.pmc_trace_cost_ns(iterations))


@atexit.register
def _dump_at_exit() -> None:
    # Runs before mpi4py's finalize (this module is imported after mpi4py);
    # the dump itself needs no MPI.
    if _applied and directory() is not None:
        lib.pmc_trace_dump(b"finalize")
