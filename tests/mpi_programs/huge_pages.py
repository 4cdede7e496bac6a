"""Buffers exposed for single copy go onto huge pages on their second exposure.

Each rank's send buffer lies in plain malloc'd memory on 4 KiB pages (as a
torch CPU tensor's does; numpy asks for huge pages itself from 4 MiB).
Reduce_scatter_block and Allgather (of a leading part) with single copy forced expose them: the
first call only notes them, the second collapses their whole 2 MiB pages (or,
where the kernel refuses, counts one refusal), later calls change nothing.
Every result is checked, and the send buffers keep their contents.

Usage: python -m mpi_programs.huge_pages [--off]   (under mpiexec, PYMCOLL_COPY=cma)
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main, report_cases

HUGE = 2 << 20
_libc = ctypes.CDLL(None, use_errno=True)


def kernel_collapses() -> bool:
    """Whether this kernel collapses private anonymous memory into huge pages on request."""
    buf = Aligned(HUGE)
    try:
        buf.array(np.uint8)[:] = 1
        return _libc.madvise(ctypes.c_void_p(buf.address), ctypes.c_size_t(HUGE), 25) == 0  # MADV_COLLAPSE
    finally:
        buf.free()


class Aligned:
    """`nbytes` of malloc'd memory on a 2 MiB boundary (4 KiB pages until collapsed)."""

    def __init__(self, nbytes: int) -> None:
        raw = ctypes.c_void_p(0)
        if _libc.posix_memalign(ctypes.byref(raw), ctypes.c_size_t(HUGE), ctypes.c_size_t(nbytes)) != 0:
            raise MemoryError(f"posix_memalign of {nbytes} bytes failed")
        self.address, self.nbytes = int(raw.value), nbytes

    def array(self, dtype) -> np.ndarray:
        return np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.address)).view(dtype)

    def free(self) -> None:
        _libc.free(ctypes.c_void_p(self.address))


def body() -> None:
    off = "--off" in sys.argv[1:]
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    n, rank = comm.Get_size(), comm.Get_rank()
    collapses = kernel_collapses()
    count = (6 << 20) // 4  # 6 MiB of float32 per send buffer: three whole huge pages, split by 2 and 3
    bufs = [Aligned(count * 4) for _ in range(2)]
    send = bufs[0].array(np.float32)
    gathered = bufs[1].array(np.float32)
    send[:] = np.arange(count, dtype=np.float32) % 1024 + rank
    keep = send.copy()
    block = count // n
    recv = np.empty(block, np.float32)
    bad: list[str] = []
    ran = 0
    expect_sum = (np.arange(count, dtype=np.float32) % 1024) * n + n * (n - 1) / 2
    seen = []
    for call in range(4):
        comm.Reduce_scatter_block(send, recv)
        ran += 1
        if not np.array_equal(recv, expect_sum[rank * block:(rank + 1) * block]):
            bad.append(f"rank {rank}: Reduce_scatter_block call {call} wrong")
        comm.Allgather(send[:block], gathered[:block * n])
        ran += 1
        want = np.concatenate([keep[:block] - rank + r for r in range(n)])
        if not np.array_equal(gathered[:block * n], want):
            bad.append(f"rank {rank}: Allgather call {call} wrong")
        seen.append(comm.huge_pages())
    if not np.array_equal(send, keep):
        bad.append(f"rank {rank}: the send buffer changed")
    first, second, last = seen[0], seen[1], seen[-1]
    if off or not comm.layout.cma_ok or n == 1:
        if last != {"collapses": 0, "bytes": 0, "failures": 0}:
            bad.append(f"rank {rank}: nothing may be collapsed here, got {last}")
    else:
        if first["collapses"] or first["failures"]:
            bad.append(f"rank {rank}: collapsed on the first exposure: {first}")
        tried = second["collapses"] + second["failures"]
        if tried < 1:
            bad.append(f"rank {rank}: nothing collapsed on the second exposure: {second}")
        if collapses and not (second["collapses"] >= 1 and second["failures"] == 0
                              and second["bytes"] >= 2 * HUGE and second["bytes"] % HUGE == 0):
            bad.append(f"rank {rank}: the kernel collapses, yet {second}")
        if not collapses and second["collapses"]:
            bad.append(f"rank {rank}: the kernel refuses, yet {second}")
        if last != second:
            bad.append(f"rank {rank}: later calls collapsed again: {second} -> {last}")
    report_cases(rank, n, ran, [line for r in world.allgather(bad) for line in r])
    comm.Free()
    for b in bufs:
        b.free()


if __name__ == "__main__":
    main(body)
