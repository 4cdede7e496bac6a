"""pymcoll.Comm's buffer methods on CPU torch tensors: each result equals
the numpy one, in place too; tensors given new memory in place between
calls (resize_, set_) are followed, not served from an earlier call's
pointers; tensors the fast paths leave alone (requiring grad, bfloat16,
not contiguous) still get mpi4py's meaning or a clear error.

Usage: python -m mpi_programs.torch_tensors
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

import pymcoll

from .common import main


def body() -> None:
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size

    def data(n: int, dtype: torch.dtype = torch.float32, r: int = rank) -> torch.Tensor:
        return (torch.arange(n, dtype=torch.float64) * (r + 1) + r).to(dtype)

    for n in (0, 1, 7, 1000, 70_000):
        for dtype in (torch.float32, torch.int64, torch.float64):
            # Allreduce, twice with the same tensors (the second may not reuse the first's pointers).
            out = torch.empty(n, dtype=dtype)
            for _ in range(2):
                comm.Allreduce(data(n, dtype), out, op=MPI.SUM)
                assert torch.equal(out, sum(data(n, dtype, r) for r in range(size))), (n, dtype)
            x = data(n, dtype)
            comm.Allreduce(MPI.IN_PLACE, x, op=MPI.MAX)
            assert torch.equal(x, data(n, dtype, size - 1)), (n, dtype)
            # Bcast, Allgather, Alltoall, Reduce, Gather, Scatter, Reduce_scatter_block, Scan.
            b = data(n, dtype) if rank == 0 else torch.zeros(n, dtype=dtype)
            comm.Bcast(b, root=0)
            assert torch.equal(b, data(n, dtype, 0))
            g = torch.empty(n * size, dtype=dtype)
            comm.Allgather(data(n, dtype), g)
            assert torch.equal(g, torch.cat([data(n, dtype, r) for r in range(size)]))
            a = torch.empty(n * size, dtype=dtype)
            comm.Alltoall(torch.cat([data(n, dtype) + 10 * j for j in range(size)]), a)
            assert torch.equal(a, torch.cat([data(n, dtype, r) + 10 * rank for r in range(size)]))
            red = torch.empty(n, dtype=dtype) if rank == size - 1 else None
            comm.Reduce(data(n, dtype), red, op=MPI.SUM, root=size - 1)
            if rank == size - 1:
                assert torch.equal(red, sum(data(n, dtype, r) for r in range(size)))
            gat = torch.empty(n * size, dtype=dtype) if rank == 0 else None
            comm.Gather(data(n, dtype), gat, root=0)
            if rank == 0:
                assert torch.equal(gat, torch.cat([data(n, dtype, r) for r in range(size)]))
            sc = torch.empty(n, dtype=dtype)
            comm.Scatter(torch.cat([data(n, dtype, r) for r in range(size)]) if rank == 0 else None, sc, root=0)
            assert torch.equal(sc, data(n, dtype))
            rsb = torch.empty(n, dtype=dtype)
            comm.Reduce_scatter_block(torch.cat([data(n, dtype) + j for j in range(size)]), rsb, op=MPI.SUM)
            assert torch.equal(rsb, sum(data(n, dtype, r) for r in range(size)) + size * rank)
            scan = torch.empty(n, dtype=dtype)
            comm.Scan(data(n, dtype), scan, op=MPI.SUM)
            assert torch.equal(scan, sum(data(n, dtype, r) for r in range(rank + 1)))

    # The same tensor objects with new memory in between: resize_ (a tensor numpy never viewed)
    # and set_.
    src, out = data(8), torch.empty(8)
    comm.Allreduce(src, out)
    src.resize_(50_000).copy_(data(50_000))
    out.resize_(50_000)
    comm.Allreduce(src, out)
    assert torch.equal(out, sum(data(50_000, torch.float32, r) for r in range(size)))
    g8 = torch.empty(8 * size)
    comm.Allgather(data(8), g8)
    g8.set_(torch.empty(50_000 * size).untyped_storage())
    comm.Allgather(src, g8)
    assert torch.equal(g8, torch.cat([data(50_000, torch.float32, r) for r in range(size)]))
    b8 = data(8) if rank == 0 else torch.zeros(8)
    comm.Bcast(b8, root=0)
    b8.set_(data(9000).untyped_storage() if rank == 0 else torch.zeros(9000).untyped_storage())
    comm.Bcast(b8, root=0)
    assert torch.equal(b8, data(9000, torch.float32, 0))

    # Left to the general path, same meaning: requiring grad, bfloat16; not contiguous is refused.
    w = data(100).requires_grad_(True)
    res = torch.empty(100)
    comm.Allreduce(w, res)
    assert torch.equal(res, sum(data(100, torch.float32, r) for r in range(size)))
    bf = torch.empty(64, dtype=torch.bfloat16)
    comm.Allreduce(torch.full((64,), rank + 1, dtype=torch.bfloat16), bf)  # small integers: exact in bfloat16
    assert torch.equal(bf, torch.full((64,), size * (size + 1) // 2, dtype=torch.bfloat16)), bf
    strided = torch.empty(200)[::2]
    try:
        comm.Allreduce(data(100), strided)
    except BufferError as exc:
        assert "contiguous" in str(exc), str(exc)
    else:
        raise AssertionError("a strided receive tensor was accepted")
    comm.Barrier()
    # numpy arrays next to tensors in one call.
    mixed = np.empty(100, np.float32)
    comm.Allreduce(data(100), mixed)
    assert np.array_equal(mixed, sum(data(100, torch.float32, r) for r in range(size)).numpy())
    comm.Barrier()
    if rank == 0:
        print(f"torch_tensors: {size} ranks ok", flush=True)
    comm.Free()


if __name__ == "__main__":
    main(body)
