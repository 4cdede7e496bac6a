"""Calls that run in the wrapped MPI communicator (device buffers, a
user-defined op), in blocking, non-blocking and persistent forms, between two
calls of the core; the trace dump (PYMCOLL_TRACE) must number and record them
all. Prints "external ok" on each rank."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import pymcoll


class DeviceArray:
    """Host memory presented through the CUDA array interface, as device
    memory is: pymcoll cannot tell, so the call goes to MPI."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.__cuda_array_interface__ = {"version": 3, "data": (array.ctypes.data, False),
                                         "typestr": array.dtype.str, "shape": array.shape, "strides": None}


def main() -> None:
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    n, me = comm.size, comm.rank
    comm.Allreduce(np.ones(4), np.zeros(4))                       # 1: core
    send, recv = DeviceArray(np.full(4, me + 1.0)), DeviceArray(np.zeros(4))
    comm.Allreduce(send, recv)                                     # 2: mpi, blocking
    assert (recv.array == n * (n + 1) / 2).all(), recv.array
    buf = DeviceArray(np.arange(3.0) if me == 0 else np.zeros(3))
    comm.Ibcast(buf, root=0).Wait()                                # 3: mpi, non-blocking
    assert (buf.array == np.arange(3.0)).all(), buf.array
    req = comm.Allreduce_init(send, recv)
    for _ in range(2):                                             # 4, 5: mpi, persistent
        req.Start()
        req.Wait()
    req.Free()
    add = MPI.Op.Create(lambda a, b, t: np.add(np.frombuffer(a, "f8"), np.frombuffer(b, "f8"),
                                               out=np.frombuffer(b, "f8")), commute=True)
    out = np.zeros(2)
    comm.Allreduce(np.full(2, 2.0), out, op=add)                   # 6: mpi (user-defined op)
    add.Free()
    assert (out == 2.0 * n).all(), out
    comm.Bcast(np.zeros(8), root=0)                                # 7: core
    print("external ok", flush=True)


if __name__ == "__main__":
    main()
