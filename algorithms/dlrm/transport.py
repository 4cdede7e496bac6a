"""The collectives the embedding exchange runs on, behind one small interface.

:class:`PymcollTransport` runs them on pymcoll's Alltoallv and Allreduce;
:class:`TorchDistributedTransport` on a torch.distributed process group
(``all_to_all_single``, ``all_reduce``; gloo, for instance), so that the same
exchange can be compared on both in one run. Buffers are 1-D numpy arrays;
counts are in elements.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import numpy as np


class Transport(Protocol):
    """What the exchange needs from a communicator."""

    rank: int
    size: int
    name: str

    def alltoallv(self, send: np.ndarray, send_counts: Sequence[int], recv_counts: Sequence[int]) -> np.ndarray:
        """Block i of `send` (send_counts[i] elements) goes to rank i; returns
        the blocks received, in rank order (recv_counts[i] from rank i)."""
        ...

    def allreduce_sum(self, x: np.ndarray) -> None:
        """Sums `x` over the ranks, in place."""
        ...


def _displacements(counts: Sequence[int]) -> list[int]:
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += int(c)
    return out


class PymcollTransport:
    """The exchange on a :class:`pymcoll.Comm` (or an mpi4py communicator, wrapped with
    ``pymcoll.Comm(comm, wait=wait)``)."""

    name = "pymcoll"

    def __init__(self, comm: Any = None, wait: Optional[str] = None) -> None:
        import pymcoll
        from mpi4py import MPI

        if comm is None:
            comm = MPI.COMM_WORLD
        # wait="sleep" when the exchange runs on a thread that shares its CPU with compute.
        self.comm = comm if isinstance(comm, pymcoll.Comm) else pymcoll.Comm(comm, wait=wait)
        self._mpi = MPI
        self.rank, self.size = self.comm.rank, self.comm.size

    def alltoallv(self, send: np.ndarray, send_counts: Sequence[int], recv_counts: Sequence[int]) -> np.ndarray:
        send = np.ascontiguousarray(send)
        recv = np.empty(int(sum(recv_counts)), send.dtype)
        # Bytes, so that one datatype serves every element type.
        item = send.dtype.itemsize
        sc = [int(c) * item for c in send_counts]
        rc = [int(c) * item for c in recv_counts]
        byte = self._mpi.BYTE
        self.comm.Alltoallv([send.view(np.uint8), sc, _displacements(sc), byte],
                            [recv.view(np.uint8), rc, _displacements(rc), byte])
        return recv

    def allreduce_sum(self, x: np.ndarray) -> None:
        self.comm.Allreduce(self._mpi.IN_PLACE, x, op=self._mpi.SUM)


class TorchDistributedTransport:
    """The exchange on torch.distributed: an initialized process group of a
    CPU backend (gloo, or pymcoll's "pymcoll"); `group` None is the default group."""

    def __init__(self, group: Optional[Any] = None) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("TorchDistributedTransport: call torch.distributed.init_process_group(...) first "
                               "(for example with the 'gloo' backend)")
        self._dist, self.group = dist, group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.name = str(dist.get_backend(group))

    def alltoallv(self, send: np.ndarray, send_counts: Sequence[int], recv_counts: Sequence[int]) -> np.ndarray:
        import torch

        send = np.ascontiguousarray(send)
        recv = np.empty(int(sum(recv_counts)), send.dtype)
        self._dist.all_to_all_single(torch.from_numpy(recv), torch.from_numpy(send),
                                     output_split_sizes=[int(c) for c in recv_counts],
                                     input_split_sizes=[int(c) for c in send_counts], group=self.group)
        return recv

    def allreduce_sum(self, x: np.ndarray) -> None:
        import torch

        self._dist.all_reduce(torch.from_numpy(x), group=self.group)
