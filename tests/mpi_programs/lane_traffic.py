"""The lanes carry the traffic between nodes together: every lane of every
node sends its share, ranks past the lanes send nothing, and the single-
leader variant sends no lane messages at all (Alltoall's: on lane 0 only).

Each case runs one collective on a fresh communicator over virtual nodes and
reads every rank's lane counters (messages, bytes) before and after; rank 0
checks the per-lane tallies against what the algorithm must send.

Usage: python -m mpi_programs.lane_traffic   (under mpiexec, PYMCOLL_NODE_SIZE set)
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import main


def traffic(comm: pymcoll.Comm, run) -> list[tuple[int, int, int, int]]:
    """Per rank (node, local rank, messages, bytes) sent on lanes during run()."""
    m0, b0 = comm.lane_traffic()
    run()
    m1, b1 = comm.lane_traffic()
    lay = comm.layout
    return MPI.COMM_WORLD.allgather((lay.node, lay.local_rank, m1 - m0, b1 - b0))


def check(name: str, rows: list, lanes: int, nnodes: int, expect_msgs, expect_bytes=None) -> None:
    for node, local, msgs, nbytes in rows:
        if local >= lanes:
            assert msgs == 0 and nbytes == 0, f"{name}: rank past the lanes (node {node}, local {local}) sent {msgs}"
            continue
        want = expect_msgs(node, local)
        assert msgs == want, f"{name}: lane {local} of node {node} sent {msgs} messages, expected {want}"
        if expect_bytes is not None:
            wb = expect_bytes(node, local)
            assert nbytes == wb, f"{name}: lane {local} of node {node} sent {nbytes} bytes, expected {wb}"
    per_lane = [sum(r[2] for r in rows if r[1] == k) for k in range(lanes)]
    assert all(p > 0 for p in per_lane) or nnodes == 1, f"{name}: idle lanes {per_lane}"


def body() -> None:
    world = MPI.COMM_WORLD
    comm = pymcoll.Comm(world)
    lay = comm.layout
    L, N, size = lay.lanes, lay.nnodes, lay.size
    assert N > 1 and L > 1, f"needs several nodes with several ranks each, got {lay}"
    counts = [0] * N
    for node, _, _, _ in world.allgather((lay.node, 0, 0, 0)):
        counts[node] += 1

    # Large Allgather: the L-lane ring; lane k carries 1/L of every other node's block.
    block = 1 << 17
    send = np.full(block, comm.rank % 251, np.uint8)
    recv = np.empty(block * size, np.uint8)
    rows = traffic(comm, lambda: comm.Allgather(send, recv))

    def ring_bytes(node: int, k: int) -> int:
        total = 0
        for t in range(N - 1):
            m = (node - t) % N
            nb = counts[m] * block
            total += nb * (k + 1) // L - nb * k // L
        return total

    check("Allgather (ring)", rows, L, N, lambda node, k: N - 1, ring_bytes)

    # Large Allreduce: every lane runs a ring reduce-scatter and allgather on its part.
    vec = np.ones(1 << 18, np.float32)
    out = np.empty_like(vec)
    rows = traffic(comm, lambda: comm.Allreduce(vec, out))
    assert float(out[0]) == size, out[:4]
    check("Allreduce (ring)", rows, L, N, lambda node, k: 2 * (N - 1))

    # Large Bcast goes through L concurrent lane broadcasts (MPI's own, not
    # counted); the tree for small ones sends point to point on every lane
    # whose child exists.
    small = np.arange(64, dtype=np.uint8) if comm.rank == 0 else np.zeros(64, np.uint8)
    rows = traffic(comm, lambda: comm.Bcast(small, root=0))
    assert (small == np.arange(64, dtype=np.uint8)).all()
    sent = sum(r[2] for r in rows)
    assert sent == N - 1, f"Bcast tree: {sent} messages for {N} nodes"

    # Alltoall(v): lane (j-1) mod L carries the message to the node j ahead,
    # everything the node's ranks send there, in one message when it fits.
    node_of = world.allgather(lay.node)

    def pair_bytes(r: int, q: int) -> int:
        return 8 * ((3 * r + q) % 5)

    def a2a_msgs(node: int, k: int) -> int:
        return sum(1 for j in range(1, N) if (j - 1) % L == k)

    def a2a_bytes(per_pair) -> callable:
        def want(node: int, k: int) -> int:
            return sum(per_pair(r, q) for j in range(1, N) if (j - 1) % L == k
                       for r in range(size) if node_of[r] == node
                       for q in range(size) if node_of[q] == (node + j) % N)
        return want

    a_send = np.full(64 * size, comm.rank % 251, np.uint8)
    a_recv = np.empty_like(a_send)
    rows = traffic(comm, lambda: comm.Alltoall(a_send, a_recv))
    assert (a_recv.reshape(size, 64) == (np.arange(size) % 251)[:, None]).all()
    check("Alltoall", rows, L, N, a2a_msgs, a2a_bytes(lambda r, q: 64))
    scounts = [pair_bytes(comm.rank, q) for q in range(size)]
    rcounts = [pair_bytes(r, comm.rank) for r in range(size)]
    v_send = np.full(sum(scounts), comm.rank, np.uint8)
    v_recv = np.empty(sum(rcounts), np.uint8)
    rows = traffic(comm, lambda: comm.Alltoallv([v_send, scounts], [v_recv, rcounts]))
    assert (v_recv == np.repeat(np.arange(size), rcounts)).all()
    check("Alltoallv", rows, L, N, a2a_msgs, a2a_bytes(pair_bytes))

    # The single-leader variant leaves the lanes idle.
    comm.Free()
    os.environ["PYMCOLL_ALLGATHER_ALGORITHM"] = "leader"
    leader = pymcoll.Comm(world)
    rows = traffic(leader, lambda: leader.Allgather(send, recv))
    assert sum(r[2] for r in rows) == 0, rows
    leader.Free()
    # ... and for Alltoall it is the same exchange on lane 0 alone.
    os.environ["PYMCOLL_ALLTOALL_ALGORITHM"] = "leader"
    leader = pymcoll.Comm(world)
    rows = traffic(leader, lambda: leader.Alltoall(a_send, a_recv))
    assert (a_recv.reshape(size, 64) == (np.arange(size) % 251)[:, None]).all()
    for node, local, msgs, _ in rows:
        assert msgs == (N - 1 if local == 0 else 0), f"single-leader Alltoall: {rows}"
    leader.Free()
    if world.rank == 0:
        print(f"OK lanes carry traffic: {N} nodes, {L} lanes", flush=True)


if __name__ == "__main__":
    main(body)
