"""pymcoll: node-aware collectives for MPI jobs.

Wrap an mpi4py communicator and call its collectives as usual::

    from mpi4py import MPI
    import pymcoll
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    comm.Allgather(send, recv)

The names below load on first use: ``import pymcoll.ftar`` or
``import pymcoll.trace`` never loads MPI, while ``pymcoll.Comm`` loads mpi4py
first and then the C core built against the same MPI.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._buildinfo import COMMIT

__version__ = "0.1.0"

# Public name -> the module that defines it.
_LAZY = {
    "Comm": "comm", "Layout": "layout", "alloc": "heap", "heap_usage": "heap", "Request": "requests",
    "Prequest": "requests", "Error": "errors", "TimeoutError": "errors", "PeerFailedError": "errors",
    "CommBrokenError": "errors", "SegmentError": "errors", "BUILD_MPI": "_native", "RUNTIME_MPI": "_native",
    "single_copy_min": "tuning", "stream_min": "tuning",
}

__all__ = [
    "Comm", "Layout", "alloc", "heap_usage", "Request", "Prequest", "Error", "TimeoutError", "PeerFailedError",
    "CommBrokenError", "SegmentError", "COMMIT", "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pymcoll' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
