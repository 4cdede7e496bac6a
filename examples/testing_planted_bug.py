"""Find a bug in a collective with pymcoll.testing.

MyComm below wraps an mpi4py communicator and gets Allreduce subtly wrong:
above 1 KiB it reduces float64 data in float32. Run it on a few ranks:

    mpiexec -n 3 python examples/testing_planted_bug.py

pymcoll.testing draws the same examples on every rank, agrees on each
verdict, shrinks the failure to a minimal case and prints a call that
reproduces it. The same check passes for the plain mpi4py communicator.
"""

import numpy as np
from mpi4py import MPI

import pymcoll.testing


class MyComm:
    """An Allreduce with a precision bug; everything else is mpi4py's."""

    def __init__(self, comm):
        self.comm = comm

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM):  # noqa: N802 - mpi4py's name
        recv = np.asarray(recvbuf)
        send = recv.copy() if sendbuf is MPI.IN_PLACE else np.asarray(sendbuf)
        if recv.dtype == np.float64 and recv.nbytes > 1024:
            narrow = np.empty(recv.size, np.float32)
            self.comm.Allreduce(send.astype(np.float32), narrow, op)
            recv[:] = narrow
        else:
            self.comm.Allreduce(sendbuf, recvbuf, op)


world = MPI.COMM_WORLD
for name, impl in (("mpi4py", world.Dup()), ("MyComm", MyComm(world.Dup()))):
    report = pymcoll.testing.check(impl, world, ["Allreduce"], max_examples=100, thresholds=[1024])
    if world.rank == 0:
        print(f"--- {name}")
        print(report)
