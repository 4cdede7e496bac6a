"""pymcoll: node-aware collectives for MPI jobs.

Wrap an mpi4py communicator and call its collectives as usual::

    from mpi4py import MPI
    import pymcoll
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    comm.Allgather(send, recv)
"""

from ._native import BUILD_MPI, RUNTIME_MPI  # noqa: F401 - loads mpi4py first, checks the MPI
from ._buildinfo import COMMIT
from .comm import Comm
from .errors import CommBrokenError, Error, PeerFailedError, SegmentError, TimeoutError
from .heap import alloc, heap_usage
from .layout import Layout
from .requests import Prequest, Request

__version__ = "0.1.0"

__all__ = [
    "Comm", "Layout", "alloc", "heap_usage", "Request", "Prequest", "Error", "TimeoutError", "PeerFailedError", "CommBrokenError",
    "SegmentError", "COMMIT", "__version__",
]
