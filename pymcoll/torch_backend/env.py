"""torch's env:// rendezvous variables, from MPI.

``dist.init_process_group`` reads RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT. Under ``mpiexec`` nobody sets them, so :func:`fill_from_mpi`
does: rank and size of MPI.COMM_WORLD, and rank 0's address and a free port
of rank 0, sent to every rank. Variables already set are kept; RANK or
WORLD_SIZE that disagree with MPI raise on every rank (a wrong WORLD_SIZE
would otherwise stall the rendezvous until torch's timeout).
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from mpi4py import MPI

VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class RendezvousEnvError(RuntimeError):
    """RANK or WORLD_SIZE in the environment disagree with MPI."""


def _free_port() -> int:
    """A TCP port free on this host right now (the store binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _routable_address() -> str:
    """An address of this host that other hosts can reach (best effort)."""
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addr = info[4][0]
            if not addr.startswith("127."):
                return addr
    except OSError:
        pass
    try:
        # Connecting a UDP socket sends nothing; it only picks the outgoing interface.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def _given(name: str) -> Optional[str]:
    value = os.environ.get(name, "")
    return value if value != "" else None  # an empty variable means unset


def mismatches(rank: int, size: int) -> list[str]:
    """RANK / WORLD_SIZE settings of this process that disagree with MPI, as sentences."""
    out = []
    for name, value in (("RANK", rank), ("WORLD_SIZE", size)):
        given = _given(name)
        if given is not None and given.strip() != str(value):
            out.append(f"{name}={given} but this process is MPI rank {rank} of {size}")
    return out


def fill_from_mpi(comm: MPI.Comm = MPI.COMM_WORLD) -> dict[str, str]:
    """Set the unset rendezvous variables from `comm`; return what was set.

    Collective over `comm` (an allgather and a bcast): every rank must call
    it. Raises :class:`RendezvousEnvError` on every rank when RANK or
    WORLD_SIZE of any rank disagree with MPI and more than one MPI rank runs
    (a single MPI rank may be one of many processes started by another
    launcher, such as torchrun, whose variables then stand).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    host = MPI.Get_processor_name()
    everyone = comm.allgather((host, mismatches(rank, size)))
    bad = [f"MPI rank {r}: {msg}" for r, (_, msgs) in enumerate(everyone) for msg in msgs]
    if bad and size > 1:
        raise RendezvousEnvError(
            "pymcoll backend: the environment disagrees with MPI (" + "; ".join(bad) + "). Unset RANK and "
            "WORLD_SIZE under mpiexec (pymcoll.torch sets them from MPI), or set them to the MPI rank and size")
    root_host = everyone[0][0]
    root = None
    if rank == 0:
        given = _given("MASTER_ADDR")
        # Only a job spanning hosts needs rank 0's outward address (looking it
        # up can wait on DNS); ranks on rank 0's host use the loopback
        # interface (the store listens on every interface).
        remote = any(h != host for h, _ in everyone)
        root = (given, given or (_routable_address() if remote else "127.0.0.1"),
                _given("MASTER_PORT") or str(_free_port()))
    given_addr, root_addr, port = comm.bcast(root, root=0)
    addr = "127.0.0.1" if host == root_host and given_addr is None else root_addr
    values = {"RANK": str(rank), "WORLD_SIZE": str(size), "MASTER_ADDR": addr, "MASTER_PORT": port}
    set_now = {}
    for name in VARIABLES:
        if _given(name) is None:
            os.environ[name] = set_now[name] = values[name]
    return set_now
