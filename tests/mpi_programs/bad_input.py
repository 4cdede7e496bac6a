"""Every bad call raises, before any data moves, the exception class mpi4py
raises for the same mistake, with a message naming the argument; the
communicator keeps working afterwards.

Usage: python -m mpi_programs.bad_input
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def still_works(comm: pymcoll.Comm) -> None:
    comm.Barrier()
    buf = np.arange(100, dtype=np.int64) if comm.rank == 0 else np.zeros(100, np.int64)
    comm.Bcast(buf, root=0)
    assert (buf == np.arange(100)).all()
    recv = np.zeros(3 * comm.size, np.int16)
    comm.Allgather(np.full(3, comm.rank, np.int16), recv)
    assert (recv.reshape(-1, 3) == np.arange(comm.size)[:, None]).all()


def expect(comm: pymcoll.Comm, exc: type, words: str, call) -> None:
    try:
        call()
    except exc as e:
        msg = str(e) if not isinstance(e, MPI.Exception) else e.Get_error_string()
        assert words.lower() in msg.lower(), f"message {msg!r} does not mention {words!r}"
    else:
        raise AssertionError(f"expected {exc.__name__} mentioning {words!r}")
    still_works(comm)


def body() -> None:
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    size = comm.size
    a = np.zeros(10)
    ro = np.zeros(size * 4)
    ro.flags.writeable = False

    expect(comm, BufferError, "buf: buffer is not contiguous", lambda: comm.Bcast(a[::2]))
    expect(comm, BufferError, "recvbuf: buffer is read-only", lambda: comm.Allgather(np.zeros(4), ro))
    expect(comm, BufferError, "recvbuf: buffer is not contiguous",
           lambda: comm.Allgather(np.zeros(4), np.zeros(size * 8)[::2]))
    expect(comm, BufferError, "sendbuf: buffer is not contiguous",
           lambda: comm.Allgather(np.zeros(8)[::2], np.zeros(size * 4)))
    expect(comm, ValueError, "recvbuf", lambda: comm.Allgather(np.zeros(3), np.zeros(size * 3 + 1)))
    expect(comm, ValueError, "recvbuf", lambda: comm.Allgather(np.zeros(3, np.float32), np.zeros(size * 3)))
    expect(comm, ValueError, "buf: count=5", lambda: comm.Bcast([np.zeros(3), 5, MPI.DOUBLE]))
    expect(comm, ValueError, "recvbuf: count=5 per rank",
           lambda: comm.Allgather([np.zeros(5), 5, MPI.DOUBLE], [np.zeros(5 * size - 1), 5, MPI.DOUBLE]))
    expect(comm, MPI.Exception, "root", lambda: comm.Bcast(a, root=size))
    expect(comm, MPI.Exception, "root", lambda: comm.Bcast(a, root=-1))
    expect(comm, TypeError, "root", lambda: comm.Bcast(a, root="0"))
    expect(comm, TypeError, "buf", lambda: comm.Bcast("text"))
    expect(comm, TypeError, "buf", lambda: comm.Bcast(12))
    expect(comm, TypeError, "buf: buffer holds Python objects", lambda: comm.Bcast(np.array([object()] * 3)))
    expect(comm, TypeError, "recvbuf", lambda: comm.Allgather(np.zeros(2), None))
    expect(comm, ValueError, "buf: negative count -1", lambda: comm.Bcast([a, -1, MPI.DOUBLE]))

    f8, c8 = np.ones(4), np.ones(4, np.complex64)
    expect(comm, MPI.Exception, "op", lambda: comm.Allreduce(c8, np.zeros(4, np.complex64), op=MPI.MAX))
    expect(comm, MPI.Exception, "op", lambda: comm.Allreduce(f8, np.zeros(4), op=MPI.BAND))
    expect(comm, ValueError, "recvbuf: holds 24 bytes but Allreduce delivers 32",
           lambda: comm.Allreduce(f8, np.zeros(3)))
    expect(comm, ValueError, "element type differs", lambda: comm.Allreduce(f8, np.zeros(4, np.int64)))
    expect(comm, BufferError, "recvbuf: buffer is read-only", lambda: comm.Allreduce(f8, ro[:4]))
    rec = np.dtype([("a", "i4"), ("b", "f4")])
    expect(comm, TypeError, "element type", lambda: comm.Allreduce(np.zeros(2, rec), np.zeros(2, rec)))
    expect(comm, MPI.Exception, "root", lambda: comm.Reduce(f8, np.zeros(4), root=size))
    if size > 1:
        expect(comm, ValueError, "only the root", lambda: comm.Reduce(MPI.IN_PLACE, np.zeros(4), root=(comm.rank + 1) % size)
               if comm.rank != 0 else comm.Reduce(MPI.IN_PLACE, np.zeros(4), root=1))
    # A user-defined op runs in the wrapped communicator, on every rank alike.
    def add(a, b, t):
        inout = np.frombuffer(b, "f8")
        inout += np.frombuffer(a, "f8")

    my_sum = MPI.Op.Create(add, commute=True)
    out = np.zeros(3)
    comm.Allreduce(np.full(3, -float(comm.rank + 1)), out, op=my_sum)
    assert (out == -size * (size + 1) / 2).all(), out
    my_sum.Free()

    expect(comm, TypeError, "comm", lambda: pymcoll.Comm(42))
    expect(comm, ValueError, "comm", lambda: pymcoll.Comm(MPI.COMM_NULL))
    expect(comm, ValueError, "node_size", lambda: pymcoll.Comm(world, node_size=0))
    expect(comm, ValueError, "lanes", lambda: pymcoll.Comm(world, lanes=-2))
    expect(comm, ValueError, "timeout", lambda: pymcoll.Comm(world, timeout=-1))
    expect(comm, ValueError, "wait", lambda: pymcoll.Comm(world, wait="spin"))

    # Datatype layouts that are not contiguous are packed, not rejected.
    vec = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
    src = np.arange(8, dtype=np.float64) if comm.rank == 0 else np.zeros(8)
    comm.Bcast([src, 1, vec], root=0)
    expect_vals = np.where(np.arange(8) % 2 == 0, np.arange(8), 0.0) if comm.rank else np.arange(8)
    assert (src == expect_vals).all(), src
    vec.Free()

    dup = comm.Dup()
    dup.Free()
    expect(comm, pymcoll.CommBrokenError, "freed", lambda: dup.Barrier())
    comm.Free()
    print(f"rank {world.Get_rank()} bad input ok", flush=True)


if __name__ == "__main__":
    main(body)
