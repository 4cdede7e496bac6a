"""The shared heap's pages come from the segment's directory as arrays are
allocated, not when the communicator is made: with a heap far larger than
the directory, the communicator is made, arrays that fit are allocated and
carry collectives, one that does not fit raises MemoryError naming the
directory, and the communicator keeps working.

Usage: python -m mpi_programs.heap_room DIRECTORY_BYTES
(run with PYMCOLL_SHM_DIR on a tmpfs of DIRECTORY_BYTES and PYMCOLL_HEAP_SIZE
larger than that)
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def body() -> None:
    room = int(sys.argv[1])
    shm_dir = os.environ["PYMCOLL_SHM_DIR"]
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    assert comm.layout.shm_active, comm.note
    share = pymcoll.heap_usage(comm)[0]
    assert share * size > room, (share, room)

    # Arrays that fit: the direct path reads them.
    n = room // (8 * size * 8)  # x and out take half the room over all ranks
    x = pymcoll.alloc(n, np.float64, comm)
    x[:] = rank + 1
    out = pymcoll.alloc(n * size, np.float64, comm)
    comm.Allgather(x, out)
    assert np.array_equal(out, np.repeat(np.arange(1, size + 1, dtype=np.float64), n)), out[::n]

    # More than the directory holds: an error on every rank, not a SIGBUS.
    comm.Barrier()
    try:
        pymcoll.alloc(room, np.uint8, comm)
    except MemoryError as exc:
        assert shm_dir in str(exc) and "no room" in str(exc), str(exc)
    else:
        raise AssertionError(f"rank {rank}: an array of {room} bytes fit in a directory of {room} bytes")

    # Nothing broken: the arrays already there still carry a collective.
    x[:] = 10 * (rank + 1)
    comm.Allgather(x, out)
    assert np.array_equal(out, np.repeat(10 * np.arange(1, size + 1, dtype=np.float64), n)), out[::n]
    comm.Barrier()
    if rank == 0:
        print(f"heap_room: {size} ranks, share {share} bytes each in a directory of {room}: ok", flush=True)


if __name__ == "__main__":
    main(body)
