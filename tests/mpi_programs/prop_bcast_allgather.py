"""pymcoll's Barrier, Bcast, Allgather, Allreduce and Reduce under pymcoll.testing.

The implementation is wrapped so that each rank describes its buffers in its
own way (numpy array, [buf, MPI type], [buf, count, MPI type], torch tensor),
as MPI allows; the toolkit draws the cases, computes the reference and agrees
on verdicts. bfloat16, which only torch has, is checked separately.

Usage: python -m mpi_programs.prop_bcast_allgather [--examples N] [--max-bytes B]
"""

from __future__ import annotations

import argparse
import zlib
from typing import Any

import numpy as np
from mpi4py import MPI

import pymcoll
import pymcoll.testing as pt

from .common import CI, main
from .thresholds import thresholds

torch: Any = None  # imported in body() unless --torch off (the import costs ~3 s of CPU per rank)

FORMS = ("plain", "typed", "counted", "torch")


class FormAdapter:
    """pymcoll.Comm whose buffers arrive in a form chosen per rank and call."""

    def __init__(self, comm: pymcoll.Comm) -> None:
        self.comm = comm
        self.calls = 0

    def _form(self, arr: np.ndarray, per_rank: int) -> Any:
        self.calls += 1
        pick = FORMS[zlib.crc32(f"{self.comm.rank}/{self.calls}".encode()) % len(FORMS)]
        if pick == "typed":
            return [arr, pt.mpi_type(arr.dtype.name)]
        if pick == "counted":
            return [arr, per_rank, pt.mpi_type(arr.dtype.name)]
        if pick == "torch" and torch is not None:
            try:
                return torch.from_numpy(arr)  # shares memory with arr
            except TypeError:  # a dtype torch does not have
                return arr
        return arr

    def Barrier(self) -> None:  # noqa: N802
        self.comm.Barrier()

    def Bcast(self, buf: np.ndarray, root: int = 0) -> None:  # noqa: N802
        self.comm.Bcast(self._form(buf, buf.size), root)

    def Allgather(self, sendbuf: Any, recvbuf: np.ndarray) -> None:  # noqa: N802
        per = recvbuf.size // self.comm.size
        send = sendbuf if sendbuf is MPI.IN_PLACE else self._form(sendbuf, sendbuf.size)
        self.comm.Allgather(send, self._form(recvbuf, per))

    def Allreduce(self, sendbuf: Any, recvbuf: np.ndarray, op: Any = MPI.SUM) -> None:  # noqa: N802
        send = sendbuf if sendbuf is MPI.IN_PLACE else self._form(sendbuf, sendbuf.size)
        self.comm.Allreduce(send, self._form(recvbuf, recvbuf.size), op)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, root: int = 0) -> None:  # noqa: N802
        send = sendbuf if sendbuf is MPI.IN_PLACE else self._form(sendbuf, sendbuf.size)
        recv = None if recvbuf is None else self._form(recvbuf, recvbuf.size)
        self.comm.Reduce(send, recv, op, root)

    def Split(self, color: int = 0, key: int = 0) -> Any:  # noqa: N802
        sub = self.comm.Split(color, key)
        return FormAdapter(sub) if isinstance(sub, pymcoll.Comm) else None

    def Get_rank(self) -> int:  # noqa: N802
        return self.comm.rank

    def Free(self) -> None:  # noqa: N802
        self.comm.Free()


def check_half_reductions(comm: pymcoll.Comm) -> None:
    """float16 and bfloat16 torch tensors: Allreduce results within rounding of
    a float64 reference and the same bits on every rank; Reduce likewise."""
    rank, size = comm.rank, comm.size
    for dtype, eps in ((torch.float16, 2.0 ** -10), (torch.bfloat16, 2.0 ** -7)):
        for count in (1, 63, 20000, 100_001):
            def data(r: int) -> "torch.Tensor":
                g = np.random.default_rng([count, r, 7])
                return torch.from_numpy(g.standard_normal(count).astype(np.float32)).to(dtype)
            exact = sum(data(r).to(torch.float64) for r in range(size))
            bound = (size + 1) * eps * sum(data(r).to(torch.float64).abs() for r in range(size))
            out = torch.empty(count, dtype=dtype)
            comm.Allreduce(data(rank), out)
            err = (out.to(torch.float64) - exact).abs()
            assert bool((err <= bound + 1e-30).all()), f"{dtype} Allreduce count={count}: error {float(err.max())}"
            bits = comm.mpi.allgather(out.view(torch.int16).numpy().tobytes())
            assert len(set(bits)) == 1, f"{dtype} Allreduce count={count}: results differ across ranks"
            for root in range(size):
                red = torch.empty(count, dtype=dtype) if rank == root else None
                comm.Reduce(data(rank), red, root=root)
                if rank == root:
                    assert torch.equal(red, out), f"{dtype} Reduce root={root} differs from Allreduce"


def check_bfloat16(comm: pymcoll.Comm) -> None:
    """Every root and a few sizes around the chunk, bfloat16 torch tensors."""
    rank, size = comm.rank, comm.size
    for count in (0, 1, 7, 32768, 32769, 100_000):
        def bf(r: int) -> "torch.Tensor":
            g = np.random.default_rng([count, r])
            return torch.from_numpy(g.standard_normal(count).astype(np.float32)).to(torch.bfloat16)
        for root in range(size):
            t = bf(rank) if rank == root else torch.zeros(count, dtype=torch.bfloat16)
            comm.Bcast(t, root=root)
            assert torch.equal(t, bf(root)), f"bfloat16 Bcast count={count} root={root}"
        recv = torch.zeros(size * count, dtype=torch.bfloat16)
        comm.Allgather(bf(rank), recv)
        assert torch.equal(recv, torch.cat([bf(r) for r in range(size)])), f"bfloat16 Allgather count={count}"


def body() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=25 if CI else 80)
    ap.add_argument("--max-bytes", type=int, default=(256 << 10) if CI else (1 << 20))
    ap.add_argument("--torch", choices=("auto", "off"), default="auto",
                    help="torch tensors among the forms, and the float16/bfloat16 checks (auto: where torch is installed)")
    args = ap.parse_args()
    global torch
    if args.torch == "auto":
        try:
            import torch
        except ImportError:  # the torch extra is optional for users, installed in CI
            torch = None
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    layouts = ["world", "halves", "reversed"] if world.Get_size() > 1 else ["world"]
    report = pt.check(FormAdapter(comm), world, ["Barrier", "Bcast", "Allgather", "Allreduce", "Reduce"],
                      args.examples,
                      max_bytes=args.max_bytes, thresholds=thresholds(comm.layout), layouts=layouts,
                      deadline=120)
    if world.Get_rank() == 0:
        print(report, flush=True)
    assert report.ok, str(report)
    if torch is not None:
        check_bfloat16(comm)
        check_half_reductions(comm)
    if world.Get_rank() == 0:
        print(f"OK {comm.layout.describe()}, shm={comm.layout.shm_active}, torch forms "
              f"{'on' if torch is not None else 'off'}", flush=True)
    comm.Free()


if __name__ == "__main__":
    main(body)
