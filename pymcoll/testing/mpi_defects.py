"""Defects of MPI libraries that make the wrapped communicator's own call
abort on a valid case, so the comparison with it must be left out there.

A case listed here still runs on the implementation under test and is judged
by the oracle; only the byte-for-byte comparison with the wrapped
communicator is dropped, because calling it would end the job.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
from mpi4py import MPI

from .case import Case

# MPICH's Reduce_scatter switches to its pairwise algorithm for commutative
# operations from this many bytes in all (MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE).
MPICH_REDUCE_SCATTER_LONG = 512 << 10


@functools.lru_cache(maxsize=1)
def _is_mpich() -> bool:
    return MPI.Get_library_version().lstrip().startswith("MPICH")


def wrapped_defect(case: Case) -> Optional[str]:
    """Why the wrapped MPI cannot run `case`, or None when it can.

    The same on every rank (it depends on the case and the library only), so
    all ranks leave the wrapped call out together.
    """
    if (case.collective == "Reduce_scatter" and case.in_place and _is_mpich()
            and sum(case.counts) * np.dtype(case.dtype).itemsize >= MPICH_REDUCE_SCATTER_LONG
            and _block_overlaps_its_target(case.counts)):
        # Seen with MPICH 5.0.2: in place, the pairwise algorithm moves each
        # rank's block to the buffer's start with memcpy, and MPICH asserts
        # ("memcpy argument memory ranges overlap") when the block starts
        # before its own length: counts (5, 5, 262144) of int16 abort at rank 2.
        return ("MPICH's in-place Reduce_scatter aborts when a rank's block starts closer to the buffer's "
                f"start than its length and the vector holds {MPICH_REDUCE_SCATTER_LONG} bytes or more")
    return None


def _block_overlaps_its_target(counts: tuple) -> bool:
    """Whether some rank's block [start, start + count) overlaps [0, count)."""
    start = 0
    for count in counts:
        if 0 < start < count:
            return True
        start += count
    return False
