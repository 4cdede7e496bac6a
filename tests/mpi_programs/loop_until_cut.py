"""Ranks loop over Allreduce, Bcast and Alltoall, checking every result, until a
fault (a cut link, a killed host) stops the loop. Each rank prints "looping" after
its first round, then on the way out one line "raised NAME at T after N rounds"
(T: time.time()) or "wrong data ..." (never expected). Stops by itself after 120 s.

Usage: python -m mpi_programs.loop_until_cut
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
from mpi4py import MPI

import pymcoll


def main() -> None:
    comm = pymcoll.Comm(MPI.COMM_WORLD)
    n, me = comm.size, comm.rank
    host = socket.gethostname()
    vec = np.empty(1024, np.float64)
    out = np.empty(1024, np.float64)
    big = np.empty(1 << 16, np.float64)
    send = np.empty(256 * n, np.int32)
    recv = np.empty(256 * n, np.int32)
    rounds = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < 120:
            vec[:] = me + rounds
            comm.Allreduce(vec, out)
            if not (out == n * rounds + n * (n - 1) / 2).all():
                print(f"rank {me} on {host}: wrong data in Allreduce round {rounds}", flush=True)
                return
            root = rounds % n
            big[:] = rounds if me == root else -1
            comm.Bcast(big, root=root)
            if not (big == rounds).all():
                print(f"rank {me} on {host}: wrong data in Bcast round {rounds}", flush=True)
                return
            send[:] = np.repeat(np.arange(n, dtype=np.int32) + 1000 * me + rounds, 256)
            comm.Alltoall(send, recv)
            if not (recv == np.repeat(np.arange(n, dtype=np.int32) * 1000 + me + rounds, 256)).all():
                print(f"rank {me} on {host}: wrong data in Alltoall round {rounds}", flush=True)
                return
            rounds += 1
            if rounds == 1:
                print(f"rank {me} on {host}: looping", flush=True)
    except Exception as exc:  # the fault: report it, then leave without finalizing a broken job
        print(f"rank {me} on {host}: raised {type(exc).__name__} at {time.time():.3f} after {rounds} rounds: "
              f"{str(exc).splitlines()[0][:200]}", flush=True)
        # mpiexec ends a host's other ranks once one of them exits: give them time to report first.
        time.sleep(30)
        os._exit(3)
    print(f"rank {me} on {host}: no fault in 120 s", flush=True)


if __name__ == "__main__":
    main()
