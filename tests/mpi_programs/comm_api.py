"""pymcoll.Comm as a drop-in: layout, derived communicators, forwarding,
context manager and Free.

Usage: python -m mpi_programs.comm_api [NODE_SIZE]
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def allgather_ok(comm: pymcoll.Comm) -> None:
    recv = np.zeros(5 * comm.size, np.int32)
    comm.Allgather(np.full(5, comm.rank, np.int32), recv)
    assert (recv.reshape(-1, 5) == np.arange(comm.size)[:, None]).all()


def repeated_v_calls_see_changes(comm: pymcoll.Comm) -> None:
    """A loop over the same arrays reuses the prepared call; counts changed in
    place, a new datatype object and strided displacements must still be seen."""
    size, rank = comm.size, comm.rank
    big = 5000  # int32 elements: 20 KB blocks take the single-copy path
    send = np.arange(size * (big + 3), dtype=np.int32) + 1000 * rank
    recv = np.full(size * big, -1, np.int32)
    counts, displs = [big] * size, [i * (big + 3) for i in range(size)]  # even stride with gaps
    rcounts, rdispls = [big] * size, [i * big for i in range(size)]
    for step in range(3):
        if step == 1:
            counts[:] = rcounts[:] = [7] * size  # changed in place: same list objects
            rdispls[:] = [i * 7 for i in range(size)]
        recv[:] = -1
        comm.Alltoallv([send, counts, displs, MPI.INT32_T], [recv, rcounts, rdispls, MPI.INT32_T])
        for j in range(size):
            want = np.arange(rcounts[j], dtype=np.int32) + rank * (big + 3) + 1000 * j
            assert (recv[rdispls[j]:rdispls[j] + rcounts[j]] == want).all(), (step, j)
        root = step % size
        out = np.full(counts[rank], -1, np.int32)
        comm.Scatterv([send, counts, displs, MPI.INT32_T], out, root)
        want = np.arange(counts[rank], dtype=np.int32) + rank * (big + 3) + 1000 * root
        assert (out == want).all(), ("Scatterv", step)
    # Another datatype object over the same array: the element size changes.
    as_bytes = [send, [4 * c for c in counts], [4 * d for d in displs], MPI.BYTE]
    recv[:] = -1
    comm.Alltoallv(as_bytes, [recv, rcounts, rdispls, MPI.INT32_T])
    assert (recv[rdispls[0]:rdispls[0] + rcounts[0]] == np.arange(7, dtype=np.int32) + rank * (big + 3)).all()


def same_v_spec_object_sees_changes(comm: pymcoll.Comm) -> None:
    """Scatterv and Gatherv called again with the very same spec list and arrays (a data
    loader's loop): counts changed in place, another array put in the list, another
    datatype object and a dtype view must each be seen, not the last call's; counts put in
    the list as a numpy array must neither raise nor be misread."""
    size, rank = comm.size, comm.rank
    base = np.arange(size * 8, dtype=np.int32) + 100
    other = np.arange(size * 8, dtype=np.int32) + 5000
    counts, displs = [4] * size, [8 * i for i in range(size)]
    spec = [base, counts, displs, MPI.INT32_T]
    outs = {n: np.full(n, -1, np.int32) for n in (2, 4)}  # one receive array per block size, reused
    mines = {n: np.zeros(n, np.int32) for n in (2, 4)}
    gathered = np.full(size * 8, -1, np.int32)
    gspec = [gathered, counts, displs, MPI.INT32_T]
    for root in range(size):
        for step in range(7):
            if step == 2:
                counts[:] = [2] * size  # in place: the same list objects
            elif step == 3:
                spec[0] = other  # another array in the same list
            elif step == 4:
                spec[3] = MPI.INT32_T.Dup()  # another datatype object, the same type
            elif step == 5:
                spec[0], counts[:] = base, [4] * size
            elif step == 6:
                spec[1] = np.array(counts)  # equal counts, now an array (compares elementwise)
            src, out, mine = spec[0], outs[counts[rank]], mines[counts[rank]]
            out[:] = -1
            comm.Scatterv(spec if rank == root else None, out, root)
            assert (out == src[displs[rank]:displs[rank] + counts[rank]]).all(), ("Scatterv", root, step)
            gathered[:] = -1
            mine[:] = 10 * rank + step
            comm.Gatherv(mine, gspec if rank == root else None, root)
            if rank == root:
                for j in range(size):
                    assert (gathered[displs[j]:displs[j] + counts[j]] == 10 * j + step).all(), ("Gatherv", step)
                    assert (gathered[displs[j] + counts[j]:displs[j] + 8] == -1).all(), ("Gatherv past", step)
            if step == 4:
                spec[3].Free()
                spec[3] = MPI.INT32_T
        spec[1] = counts
        counts[:] = [4] * size
        spec[0] = base


def body() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else None
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = pymcoll.Comm(world, node_size=k)
    lay = comm.layout
    assert comm.mpi is world and comm.rank == rank and comm.Get_size() == size
    cyclic = os.environ.get("PYMCOLL_NODE_LAYOUT") == "cyclic"
    if k and cyclic:
        nn = -(-size // k)
        assert lay.node_of == tuple(r % nn for r in range(size)), lay
        assert lay.local_of == tuple(r // nn for r in range(size)), lay
        assert lay.nnodes == nn and lay.consecutive == (nn == 1 or size <= nn)
        assert lay.lanes == size // nn
    elif k:
        assert lay.node_of == tuple(r // k for r in range(size)), lay
        assert lay.local_of == tuple(r % k for r in range(size)), lay
        assert lay.nnodes == -(-size // k) and lay.consecutive
        assert lay.lanes == min(k, size - (lay.nnodes - 1) * k)
    else:
        assert lay.nnodes == 1 and lay.local_rank == rank and lay.lanes == size
    assert lay.node_ranks() == tuple(r for r in range(size) if lay.node_of[r] == lay.node)
    assert lay.lane == (lay.local_rank if lay.local_rank < lay.lanes else -1)

    capped = pymcoll.Comm(world, node_size=k, lanes=1)
    assert capped.layout.lanes == 1
    capped.Free()

    # Forwarded attributes: the pickle-based API and anything else of mpi4py.
    assert comm.allreduce(1) == size
    assert comm.Get_topology() == world.Get_topology()
    assert isinstance(comm.Get_name(), str)
    assert comm.is_intra and comm.topology == world.topology
    # A name the wrapped object's class lacks raises mpi4py's AttributeError, a private one Comm's;
    # attributes set on the wrapper stay the wrapper's.
    for missing in ("Get_coords", "_no_such_attribute"):
        try:
            getattr(comm, missing)
        except AttributeError:
            pass
        else:
            raise AssertionError(f"{missing} did not raise AttributeError")
    comm.user_tag = 7
    assert comm.user_tag == 7 and not hasattr(world, "user_tag")
    # A Cartesian communicator's own attributes are forwarded through a wrapper of it.
    cart_mpi = world.Create_cart([size], periods=[True])
    cart = pymcoll.Comm(cart_mpi)
    assert cart.coords == [rank] and cart.dims == [size] and cart.Get_cart_rank([rank]) == rank
    assert cart.Shift(0, 1) == ((rank - 1) % size, (rank + 1) % size)
    cart.Free()

    dup = comm.Dup()
    assert isinstance(dup, pymcoll.Comm) and dup.mpi != world
    allgather_ok(dup)
    dup.Free()
    assert dup.mpi == MPI.COMM_NULL

    half = comm.Split(color=rank % 2, key=-rank)
    assert isinstance(half, pymcoll.Comm)
    allgather_ok(half)
    half.Free()

    none = comm.Split(color=MPI.UNDEFINED if rank == 0 else 0)
    if rank == 0:
        assert none == MPI.COMM_NULL
    else:
        allgather_ok(none)
        none.Free()

    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    allgather_ok(shared)
    shared.Free()

    group = world.Get_group().Incl(list(range(0, size, 2)))
    sub = comm.Create(group)
    if rank % 2 == 0:
        assert isinstance(sub, pymcoll.Comm)
        allgather_ok(sub)
        sub.Free()
        sub2 = comm.Create_group(group)
        allgather_ok(sub2)
        sub2.Free()
    else:
        assert sub == MPI.COMM_NULL
    group.Free()

    with pymcoll.Comm(world.Dup(), node_size=k) as scoped:
        allgather_ok(scoped)
        inner = scoped.mpi
    assert inner == MPI.COMM_NULL  # the wrapped communicator was freed on exit

    repeated_v_calls_see_changes(comm)
    same_v_spec_object_sees_changes(comm)

    wrapped_again = pymcoll.Comm(comm)
    assert wrapped_again.mpi is world
    wrapped_again.Free()
    assert "pymcoll.Comm" in repr(comm)
    comm.Free()
    assert world.Get_size() == size  # COMM_WORLD is never freed
    print(f"rank {rank} comm api ok", flush=True)


if __name__ == "__main__":
    main(body)
