"""A one-rank node needs no segment: no warning, collectives through the core."""

from __future__ import annotations

import warnings

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def body() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        comm = pymcoll.Comm(MPI.COMM_WORLD)
    assert comm.layout.shm_active and comm.layout.local_size == 1
    buf = np.arange(10)
    comm.Bcast(buf)
    recv = np.zeros(10 * comm.size, buf.dtype)
    comm.Allgather(buf, recv)
    assert (recv == np.tile(buf, comm.size)).all()
    comm.Free()
    print("single ok", flush=True)


if __name__ == "__main__":
    main(body)
