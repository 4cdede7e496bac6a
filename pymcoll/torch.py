"""The torch.distributed backend "pymcoll".

Importing this module registers the backend; then, under ``mpiexec``::

    import torch.distributed as dist
    import pymcoll.torch  # noqa: F401 - registers "pymcoll", sets the rendezvous variables

    dist.init_process_group("pymcoll")      # rank and size from MPI
    t = torch.ones(4)
    dist.all_reduce(t)

Run with ``mpiexec -n 4 python train.py``; no environment is needed.

Rendezvous. torch's default ``env://`` rendezvous reads RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. The import fills in the unset ones from MPI:
RANK and WORLD_SIZE from MPI.COMM_WORLD, MASTER_ADDR (127.0.0.1 for ranks on
rank 0's host, else rank 0's address) and MASTER_PORT (a free port of rank
0) sent by rank 0. Set ones are kept. RANK or WORLD_SIZE that disagree with
MPI raise :class:`RendezvousEnvError` on every rank at import (under a
multi-rank MPI launch) or ``ValueError`` at ``init_process_group("pymcoll")``
(a single MPI rank, e.g. one process of torchrun). The import is collective
over MPI.COMM_WORLD: every rank must import this module. Other backends can
use the same variables: ``import pymcoll.torch`` then
``dist.init_process_group("gloo")`` works under mpiexec too.

Operations (CPU tensors, ``async_op=True`` everywhere): all_reduce,
broadcast, reduce, all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, all_to_all_single (with splits), all_to_all, gather,
scatter, barrier, send/recv/isend/irecv (also from any source),
all_reduce_coalesced and all_gather_coalesced; sparse COO tensors in
all_reduce (SUM, AVG); ``new_group(ranks, backend="pymcoll")`` subgroups; DDP.
Dtypes: bool, uint8, int8, int16, int32, int64, uint16/32/64, float16,
bfloat16, float32, float64, complex64, complex128. Reduce ops: SUM, PRODUCT,
MIN, MAX, BAND, BOR, BXOR, and AVG (SUM, then divide by the group size, for
floating and complex tensors); on bool tensors SUM/MAX/BOR mean "any",
PRODUCT/MIN/BAND "all", BXOR "odd count". Non-contiguous tensors work
through a contiguous copy.

What the backend cannot do raises before any data moves, naming the
operation: device (CUDA, meta) tensors, sparse tensors outside all_reduce,
other dtypes, PREMUL_SUM, AVG on integers, bitwise ops on floating tensors,
MIN/MAX on complex ones, tensor lists or split sizes that do not fit the group
(ValueError naming the argument), and monitored_barrier (NotImplementedError;
torch keeps it to gloo). The group stays usable afterwards. A deadline that
passes or a peer that dies raises torch.distributed.DistBackendError ("Timed
out", as torch's backends say) that is also pymcoll's TimeoutError.

Deadlines: the group's collectives use torch's ``timeout=`` of
``init_process_group``/``new_group`` as pymcoll's deadline, unless
PYMCOLL_TIMEOUT is set (it then wins). Async works: ``wait()`` completes the
operation; ``get_future()`` hands it to a completer thread of the group (with
MPI_THREAD_MULTIPLE, mpi4py's default) so DDP's reducer overlaps
communication with the backward pass.
"""

from __future__ import annotations

import torch  # noqa: F401 - the real torch: imports are absolute
import torch.distributed as dist

from .torch_backend import env as _env
from .torch_backend.env import RendezvousEnvError
from .torch_backend.group import BACKEND_NAME, ProcessGroupPymcoll, create
from .torch_backend.work import Work

__all__ = ["BACKEND_NAME", "ProcessGroupPymcoll", "RendezvousEnvError", "Work", "register", "rendezvous_env"]

rendezvous_env = _env.fill_from_mpi  # also callable again, e.g. after a test changed the environment


def register() -> None:
    """Register the "pymcoll" backend with torch.distributed (done at import)."""
    # extended_api: the creator gets the group's global ranks and timeout;
    # devices as a list (torch iterates over a string's characters).
    dist.Backend.register_backend(BACKEND_NAME, create, extended_api=True, devices=["cpu"])


register()
_env.fill_from_mpi()
