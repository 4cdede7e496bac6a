#!/usr/bin/env python3
"""Cost model of lanes, single-leader and MPI collectives across test-bed hosts, checked against
perf/bench_lanes.py's runs on the same hosts (perf/results/lanes_np*_hosts*.json).

1. Measures the terms on the hosts themselves (pymcoll's multi-host test bed: network
   namespaces joined by tbf-limited veths, each host owning its CPUs), for each configuration
   of the runs (K hosts, P ranks on each, one link rate):
   - TCP's CPU per byte: one-way times of MPI messages between two hosts on unlimited links,
     fitted from 8 KiB to 512 KiB;
   - on the rated links: a one-way small message between hosts (alpha_net), an exchange round
     in which every host sends and receives at once (alpha_x_one with one rank per host,
     alpha_x_all with every rank), an MPI message between two ranks of one host
     (alpha_mpi_local), a node step (a pymcoll Barrier of one host's ranks, alpha_node), a
     copy and a float32 sum on the host's CPU, a Python call of an empty collective;
   - the one-way times at every size on the rated link, to check the link's model (tc's token
     bucket: pymcoll.testing.cluster.TBF_BURST).
2. Predicts each collective of perf/bench_lanes.py for each implementation (HostModel): the
   steps on the critical path, TCP's and the copies' CPU, and the wait for the busiest link
   direction's bucket, its bytes taken from the algorithm's message schedule.
3. Fits the five latency terms per configuration to the measured times (least squares of the
   log ratio; the byte terms stay as measured) and prints predicted / measured for every point
   with both sets of terms, the share within 25%, and how far the launches of a point differ.

  python perf/cost_model_hosts.py                  # measure every configuration, compare, fit
  python perf/cost_model_hosts.py --params perf/results/cost_model_hosts.json   # reuse the terms
  python perf/cost_model_hosts.py --runs /tmp/set   # another set of runs (writes /tmp/set/cost_model_hosts.json)

Writes perf/results/cost_model_hosts.{json,png}. Needs root (the test bed; docs/cluster.md).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # perfutil, also under python -P
from cost_model import best_of, pingpong  # noqa: E402  (the virtual-node model's measurements)
from perfutil import plotter, run_record, write_results  # noqa: E402

from pymcoll.config import OPTIONS  # noqa: E402

RESULTS = HERE / "results"
COLLS = ("bcast", "scatter", "gather", "allgather", "reduce", "allreduce", "alltoall", "alltoallv")
IMPLS = ("lanes", "leader", "mpi4py")


# -- measuring (runs on the hosts, under mpiexec) ----------------------------------------
def _one_way(world: Any, pairs: dict[int, int], m: int, reps: int) -> Optional[float]:
    """One-way seconds of m bytes between each rank and its partner in `pairs` (ranks not in
    `pairs` wait in a Barrier); the median over the active ranks, on every rank."""
    partner = pairs.get(world.rank)
    run = pingpong(world, partner, np.zeros(max(m, 1), np.uint8), reps)
    world.Barrier()
    t = best_of(run, 5) / reps / 2 if partner is not None else None
    world.Barrier()
    vals = [v for v in world.allgather(t) if v is not None]
    return float(np.median(vals)) if vals else None


def _shift(world: Any, P: int, lanes: int, reps: int = 400) -> float:
    """Seconds per round of 8 B exchanges in which local rank k < `lanes` of every host sends to
    local rank k of the next host and receives from the previous one (the others wait)."""
    me, R = world.rank, world.size
    k = me % P
    send, recv = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    nxt, prv = (me + P) % R, (me - P) % R

    def run() -> None:
        if k < lanes:
            for _ in range(reps):
                world.Sendrecv(send, nxt, 0, recv, prv, 0)

    from mpi4py import MPI
    world.Barrier()
    t = best_of(run, 5) / reps
    return float(world.allreduce(t if k < lanes else 0.0, op=MPI.MAX))


def measure(link_only: bool) -> dict[str, Any]:
    """Every term of the model on the hosts this job runs on (ranks in host order); with
    `link_only`, only the one-way times between two hosts (to check the link's model)."""
    from mpi4py import MPI

    import pymcoll
    world = MPI.COMM_WORLD
    host = world.Split_type(MPI.COMM_TYPE_SHARED)
    P, R, host_rank = host.size, world.size, host.rank
    N = R // P
    assert N >= 2 and N * P == R, "the measurement needs 2 or more hosts of equal rank counts"
    # The link: one pair across two hosts (ranks are in host order), the other ranks idle.
    sizes = [8 << (2 * i) for i in range(9)]  # 8 B .. 512 KiB
    one_way = []
    for m in sizes:
        reps = max(5, min(400, int(2e6 // max(m, 1))))
        one_way.append(_one_way(world, {0: P, P: 0}, m, reps))
    if link_only:
        host.Free()
        return {"one_way": {"sizes": sizes, "seconds": one_way}}
    alpha_net = float(np.median(one_way[:3]))
    # Exchange rounds: every host sends one message to the next host and receives one from the
    # previous at once (a round of the lanes' and the leaders' exchanges); with one rank per
    # host, then with every rank of every host (each with its peer lane).
    alpha_x_one = _shift(world, P, lanes=1)
    alpha_x_all = _shift(world, P, lanes=P)
    # Two ranks of one host (MPI's shared memory), the rest idle.
    alpha_mpi_local = _one_way(world, {0: 1, 1: 0}, 8, 400) if P >= 2 else 0.0
    # A node step: a Barrier of the host's ranks through pymcoll's segment.
    node = pymcoll.Comm(host)  # takes `host` over: freed with it
    reps = 300
    node.Barrier()
    alpha_node = float(np.median(world.allgather(best_of(lambda: [node.Barrier() for _ in range(reps)], 3) / reps)))
    node.Free()
    # Copies and sums, one rank per host busy (the rest in a Barrier), as a root's node does.
    busy = host_rank == 0
    src = np.ones(4 << 20, np.uint8)
    dst = np.empty_like(src)
    a = np.ones(1 << 20, np.float32)
    b = np.ones_like(a)
    world.Barrier()
    beta_shm = best_of(lambda: np.copyto(dst, src), 5) / src.nbytes if busy else None
    gamma = best_of(lambda: np.add(a, b, out=a), 5) / a.nbytes if busy else None
    world.Barrier()
    beta_shm = float(np.median([v for v in world.allgather(beta_shm) if v is not None]))
    gamma = float(np.median([v for v in world.allgather(gamma) if v is not None]))
    solo = pymcoll.Comm(MPI.COMM_SELF)
    one = np.zeros(1, np.float32)
    reps = 2000
    alpha_call = float(np.median(world.allgather(best_of(lambda: [solo.Bcast(one, root=0) for _ in range(reps)], 3)
                                                 / reps)))
    solo.Free()
    return {"hosts": N, "per_host": P, "alpha_net": alpha_net,
            "alpha_x_one": alpha_x_one, "alpha_x_all": alpha_x_all, "alpha_mpi_local": alpha_mpi_local, "alpha_node": alpha_node,
            "beta_shm": beta_shm, "gamma": gamma, "alpha_call": alpha_call,
            "one_way": {"sizes": sizes, "seconds": one_way}}


# -- the model ---------------------------------------------------------------------------
def lg(x: float, radix: float) -> int:
    """Rounds of a tree or exchange of `radix` over x participants."""
    return 0 if x <= 1 else math.ceil(math.log(x) / math.log(radix) - 1e-9)


def busiest_link(messages: list[tuple[int, int, float]], per_host: int) -> float:
    """Bytes on the busiest link direction (a host's way out or in) of a message schedule
    [(from rank, to rank, bytes)], ranks numbered host by host."""
    out: dict[int, float] = {}
    into: dict[int, float] = {}
    for src, dst, nbytes in messages:
        a, b = src // per_host, dst // per_host
        if a != b:
            out[a] = out.get(a, 0.0) + nbytes
            into[b] = into.get(b, 0.0) + nbytes
    return max([0.0, *out.values(), *into.values()])


def binomial_scatter(n: int, root: int, m: float) -> list[tuple[int, int, float]]:
    """MPICH's binomial Scatter (Gather: the same edges reversed): ranks relative to the root;
    relative rank r hands each child r + mask the blocks of the child's subtree."""
    msgs = []
    for rel in range(n):
        mask = 1
        while mask < n and not rel & mask:
            mask <<= 1
        # rel received its subtree from rel - mask (rel 0: the root, all blocks); it sends the
        # upper halves below its mask
        low = mask >> 1
        while low >= 1:
            child = rel + low
            if child < n:
                msgs.append(((rel + root) % n, (child + root) % n, min(low, n - child) * m))
            low >>= 1
    return msgs


def allgather_schedule(n: int, m: float) -> list[tuple[int, int, float]]:
    """MPICH's Allgather by total size (n * m): recursive doubling (a power of two below
    512 KiB), Bruck (below 80 KiB), else a ring."""
    msgs: list[tuple[int, int, float]] = []
    if n & (n - 1) == 0 and n * m < 512 * 1024:
        dist = 1
        while dist < n:
            msgs += [(r, r ^ dist, dist * m) for r in range(n)]
            dist <<= 1
    elif n * m < 80 * 1024:
        dist = 1
        while dist < n:
            msgs += [(r, (r - dist) % n, min(dist, n - dist) * m) for r in range(n)]
            dist <<= 1
    else:
        msgs = [(r, (r + 1) % n, m) for r in range(n) for _ in range(n - 1)]
    return msgs


def rabenseifner(n: int, m: float, root: Optional[int]) -> list[tuple[int, int, float]]:
    """MPICH's reduce-scatter + gather (Reduce, `root`) or + allgather (Allreduce, root None):
    ranks past the largest power of two fold into their odd neighbours; recursive halving
    among the rest (partner at distance 1 first), then the reverse to new rank 0 (Reduce, which
    then sends the result to the root) or to everyone (Allreduce), then the folded ranks get
    the result back."""
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    msgs = [(r, r + 1, m) for r in range(0, 2 * rem, 2)]

    def rank_of(new: int) -> int:
        return 2 * new + 1 if new < rem else new + rem

    size, mask = m, 1
    while mask < pof2:  # reduce-scatter: exchange half of what is left
        size /= 2
        msgs += [(rank_of(v), rank_of(v ^ mask), size) for v in range(pof2)]
        mask <<= 1
    mask >>= 1
    while mask >= 1:  # the way back, doubling what moves
        if root is None:
            msgs += [(rank_of(v), rank_of(v ^ mask), size) for v in range(pof2)]
        else:
            msgs += [(rank_of(v), rank_of(v ^ mask), size) for v in range(pof2) if v & mask and v < 2 * mask]
        size *= 2
        mask >>= 1
    if root is not None and rank_of(0) != root:
        msgs.append((rank_of(0), root, m))
    if root is None:
        msgs += [(r + 1, r, m) for r in range(0, 2 * rem, 2)]
    return msgs


class HostModel:
    """Seconds per call of each collective in a loop of calls, on N hosts of P ranks whose links
    run at `rate_bps` through a token bucket of `burst` bytes, each host with `cpus` CPUs.

    A call costs T0, its time with a link of unlimited rate, plus the wait for the link's bucket.
    T0 adds up the steps on the critical path, each priced by the measured step it is made of:
    a one-way message between hosts (alpha_net: a tree's edge), an exchange round in which
    every host sends and receives at once (alpha_x_one with one rank per host taking part,
    alpha_x_all with every lane), an MPI message between two ranks of a host (alpha_mpi_local),
    a node step (alpha_node); then TCP's CPU per byte sent, copies and sums, the ranks of a host
    sharing its CPUs. The busiest link direction carries B bytes per call; the bucket refills
    while the link idles for the rest of the call (at most `burst` bytes), so the wait is
    max(0, B/r - min(T0, burst/r)). m is bytes per rank as perf/bench_lanes.py counts them.
    """

    def __init__(self, p: dict[str, Any], rate_bps: Optional[float], burst: float, cpus: int) -> None:
        self.an, self.al, self.ano = p["alpha_net"], p["alpha_mpi_local"], p["alpha_node"]
        self.ax1, self.axl = p["alpha_x_one"], p["alpha_x_all"]
        self.bc, self.bsh, self.g, self.call = p["beta_tcp"], p["beta_shm"], p["gamma"], p["alpha_call"]
        self.N, self.P, self.cpus = int(p["hosts"]), int(p["per_host"]), cpus
        self.r = rate_bps / 8 if rate_bps else math.inf  # bytes per second
        self.burst = burst

    def wait(self, B: float, T0: float) -> float:
        """Time a call waits for the bucket of its busiest link direction (B bytes per call)."""
        if not math.isfinite(self.r):
            return 0.0
        return max(0.0, B / self.r - min(T0, self.burst / self.r))

    def copies(self, per_rank_bytes: float) -> float:
        """A step in which each of a host's ranks copies per_rank_bytes, on the host's CPUs."""
        return per_rank_bytes * self.bsh * self.P / min(self.P, self.cpus)

    def exchange(self, lanes: int) -> float:
        """An exchange round between hosts with `lanes` ranks of each host taking part."""
        return self.axl if lanes > 1 else self.ax1

    def runs_ahead(self, node_bytes: float) -> bool:
        """Whether a lanes' tree call of `node_bytes` in the node buffer takes a slot of the node's
        ring (pmc_node_ring_claim: the data area over 8 slots where a host's ranks share CPUs, over
        2 otherwise), so that the ranks of a loop run calls ahead of each other."""
        slots = 8 if self.P > self.cpus else 2
        return self.P > 1 and node_bytes <= (SHM_DATA_BYTES // slots) & ~63

    def predict(self, impl: str, coll: str, m: float, small_max: float = 64 << 10) -> float:
        """Seconds per call of `coll` in implementation `impl` (lanes, leader, mpi4py), m bytes per rank."""
        T0, B = getattr(self, impl)(coll, float(m), small_max)
        return self.call + T0 + self.wait(B, T0)

    # pymcoll's lanes: L = P lanes, lane k of a host talking to lane k of the others
    def lanes(self, coll: str, m: float, small_max: float) -> tuple[float, float]:
        N, P = self.N, self.P
        L, R = P, P + 1
        an, ano, bc = self.an, self.ano, self.bc
        # When the calls run ahead, a loop costs per call what its busiest host spends on one. The
        # tree's first node step then overlaps the call before where another host is the busier
        # one: Bcast's root host hands the message to one lane, the receiving host takes it in and
        # spreads it; Gather's other hosts gather their blocks, the root's host takes all of them
        # in. Scatter's root host does the most in both: it hands out every block and sends them.
        if coll == "bcast":  # (L+1)-ary tree of whole messages
            rounds = lg(N, R)
            first = 0.0 if self.runs_ahead(m) else ano
            return first + rounds * (an + ano + m * bc) + m * self.bsh + self.copies(m), min(L, N - 1) * m
        if coll in ("scatter", "gather"):  # the same tree, carrying its subtrees' blocks
            moved = (N - 1) * P * m
            first = 0.0 if coll == "gather" and self.runs_ahead(N * P * m) else ano
            return (first + lg(N, R) * (an + ano) + moved * bc + N * P * m * self.bsh + self.copies(m)), moved
        if coll == "allgather":
            moved = (N - 1) * P * m
            if P * m <= small_max:  # Bruck over hosts, radix L+1
                rounds, lanes = lg(N, R), min(L, N - 1)
            else:  # rings of lanes
                rounds, lanes = N - 1, L
            return (ano + self.copies(m) + rounds * (self.exchange(lanes) + ano) + moved * bc
                    + self.copies(N * P * m)), moved
        if coll in ("reduce", "allreduce"):
            node_reduce = 2 * ano + self.copies(m) + (P - 1) * m * self.g / min(P, self.cpus)
            out = self.copies(m) if coll == "allreduce" else m * self.bsh
            if m <= small_max:  # recursive exchange of the hosts' partials, radix up to L+1
                rounds, q = lg(N, R), min(R, N)
                return (node_reduce + rounds * (self.exchange(q - 1) + ano + (q - 1) * m * bc
                                                + q * m * self.g / min(L, self.cpus)) + out), (q - 1) * m
            # rings of lanes: reduce-scatter, then allgather (Allreduce) or the slices to the root
            steps = 2 * (N - 1) if coll == "allreduce" else N
            B = 2 * (N - 1) / N * m
            return (node_reduce + steps * (self.exchange(L) + ano) + B * bc + (N - 1) / N * m * self.g
                    + out), B
        if coll in ("alltoall", "alltoallv"):
            return self._pairwise(coll, m, L)
        raise ValueError(coll)

    def _pairwise(self, coll: str, m: float, lanes: int) -> tuple[float, float]:
        """The lanes' pairwise exchange of host messages on `lanes` lanes."""
        N, P, ano = self.N, self.P, self.ano
        moved = (N - 1) * P * P * m  # what a host sends to the others
        counts = ano if coll == "alltoallv" else 0.0
        if m >= 2048:  # blocks this large go rank to rank, every rank's (N-1)P remote messages posted at
            # once (as MPICH's scattered Alltoall below), the blocks within the host through the node
            return counts + ano + (N - 1) * P * self.axl / 2 + moved * self.bc + self.copies(P * m), moved
        phases = math.ceil((N - 1) / lanes)
        return (counts + phases * (2 * ano + self.exchange(min(lanes, N - 1))) + moved * self.bc
                + self.copies(2 * N * P * m)), moved

    # pymcoll with one leader per host; Scatter and Gather are the MPI's
    def leader(self, coll: str, m: float, small_max: float) -> tuple[float, float]:
        N, P = self.N, self.P
        an, ano, bc = self.an, self.ano, self.bc
        if coll in ("scatter", "gather"):
            return self.mpi4py(coll, m, small_max)
        if coll == "bcast":  # the leaders' MPI Bcast (binomial), then the host's
            rounds = lg(N, 2)
            return rounds * (an + m * bc) + ano + self.copies(m), rounds * m
        if coll == "allgather":  # host blocks to the leader, the leaders' MPI Allgatherv, back out
            moved = (N - 1) * P * m
            return (2 * ano + self.copies(m) + lg(N, 2) * self.ax1 + moved * bc
                    + self.copies(N * P * m)), moved
        if coll in ("reduce", "allreduce"):  # host partials; the leaders' MPI Iallgather / Igather
            node_reduce = 2 * ano + self.copies(m) + (P - 1) * m * self.g
            moved = (N - 1) * m
            if coll == "reduce":  # the other leaders send and go on: the root's leader's receives,
                # then (the root not its host's leader) a broadcast in the root's host hands it over
                hand_off = ano + self.copies(m) if P > 1 else 0.0
                return node_reduce + (N - 1) * an + moved * bc + (N - 1) * m * self.g + hand_off, moved
            return (node_reduce + lg(N, 2) * self.ax1 + moved * bc + (N - 1) * m * self.g + ano
                    + self.copies(m)), moved
        if coll in ("alltoall", "alltoallv"):  # the lanes' exchange on lane 0 alone
            return self._pairwise(coll, m, 1)
        raise ValueError(coll)

    # MPICH 5.0.2 as the PyPI wheel selects (its built-in selection tables, printed by `strings`
    # on libmpi.so): node-aware compositions for Bcast, Reduce and Allreduce (the node's part in
    # shared memory, one step like a node step; the hosts' part among one leader per host), flat
    # algorithms over all N*P ranks (ranks in host order) for the rest.
    def mpi4py(self, coll: str, m: float, small_max: float) -> tuple[float, float]:
        N, P = self.N, self.P
        n = N * P
        an, al, ano, bc = self.an, self.al, self.ano, self.bc
        node_reduce = ano + (P - 1) * m * self.g / min(P, self.cpus)
        if coll == "bcast":  # fewer than 8 ranks: root to its host's leader, leaders' binomial, hosts
            rounds = lg(N, 2)
            return al + rounds * (an + m * bc) + ano + self.copies(m), rounds * m
        if coll in ("scatter", "gather"):  # binomial tree from the root (the bench's: the last rank)
            local = lg(P, 2)
            B = busiest_link(binomial_scatter(n, n - 1, m), P)
            if coll == "scatter":
                return lg(N, 2) * an + local * al + B * bc + self.copies(m) + n * m * self.bsh, B
            # senders go on after an eager send: the root's receives bound a call
            return lg(N, 2) * an + B * bc + n * m * self.bsh, B
        if coll == "allgather":  # flat: recursive doubling, Bruck or ring by total size
            local = lg(P, 2)
            B = busiest_link(allgather_schedule(n, m), P)
            remote = lg(n, 2) - local
            return local * al + remote * self.axl + B * bc + self.copies(N * P * m), B
        pof2 = 1 << (N.bit_length() - 1)  # among the hosts' leaders
        fold = 2 * an if pof2 < N else 0.0  # leaders past a power of two fold in and out
        if coll == "reduce":
            if m <= 2048:  # the other hosts reduce to their leaders, the leaders' binomial tree to the
                # root's host (its leader adds its own input), then that host's ranks to the root
                moved = lg(N, 2) * m
                return 2 * node_reduce + lg(N, 2) * (an + m * self.g) + moved * bc, moved
            # every host reduces to its leader, the leaders to the first host's leader, which then
            # sends the result to the root (the bench's root is on the last host)
            if m / 4 < pof2:
                msgs = [(h, 0, m) for h in range(1, N)]
                inter = lg(N, 2) * (an + m * self.g)
            else:  # reduce-scatter + gather among the leaders
                msgs = rabenseifner(N, m, 0)
                inter = fold + 2 * lg(pof2, 2) * an + m * self.g
            msgs = msgs + [(0, N - 1, m)]
            B = busiest_link(msgs, 1)
            return node_reduce + inter + an + B * bc, B
        if coll == "allreduce":  # the hosts' partials, the leaders' Allreduce, each host's Bcast
            if m <= 8 or m / 4 < pof2:  # recursive doubling among the leaders
                B = m * (lg(pof2, 2) + (1 if pof2 < N else 0))
                inter = fold + lg(pof2, 2) * (self.ax1 + m * self.g) + B * bc
            else:  # reduce-scatter + allgather among the leaders
                B = busiest_link(rabenseifner(N, m, None), 1)
                inter = fold + 2 * lg(pof2, 2) * self.ax1 + B * bc + m * self.g
            return node_reduce + inter + ano + self.copies(m), B
        if coll in ("alltoall", "alltoallv"):
            moved = (N - 1) * P * P * m
            if n >= 8 and m <= 256 and coll == "alltoall":  # Bruck: lg n rounds, most across hosts
                return lg(n, 2) * self.axl + moved * bc + self.copies(2 * n * m), moved
            # every block its own message, posted at once: each rank's remote ones in turn
            return (N - 1) * P * self.axl / 2 + (P - 1) * al + moved * bc + self.copies(n * m), moved
        raise ValueError(coll)


def runs(directory: Path = RESULTS) -> list[tuple[Path, dict[str, Any]]]:
    """The bench_lanes runs on test-bed hosts: (path, its JSON)."""
    out = []
    for path in sorted(glob.glob(str(Path(directory) / "lanes_np*_hosts*.json"))):
        # The recorded sets only (lanes_np4_hosts2_1gbit), not their variants (a _steady suffix).
        if not re.fullmatch(r"lanes_np\d+_hosts\d+_\w+?bit", Path(path).stem):
            continue
        data = json.loads(Path(path).read_text())
        if data["header"].get("hosts") and not data["header"].get("check_only"):
            out.append((Path(path), data))
    return out


def _job(cl: Any, per_host: int, extra: Sequence[str]) -> dict[str, Any]:
    proc = cl.run([sys.executable, "-P", str(Path(__file__).resolve()), "--measure", *extra], per_host, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"cost_model_hosts: the measurement failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def measure_shapes(configs: set[tuple[int, int, str]]) -> dict[str, Any]:
    """The terms of each configuration (hosts, ranks per host, link rate): TCP's per-byte CPU from
    one-way times on unlimited links, every other term on the rated links."""
    from pymcoll.testing.cluster import Cluster

    out: dict[str, Any] = {}
    for hosts, per_host in sorted({(h, p) for h, p, _ in configs}):
        with Cluster(hosts) as cl:
            print(f"cost_model_hosts: {hosts} hosts x {per_host} ranks, unlimited links ...", file=sys.stderr,
                  flush=True)
            free = _job(cl, per_host, ["--link-only"])["one_way"]
            beta_tcp = stack_slope(free)
            cpus = min(len(h.cpus.split(",")) if h.cpus else os.cpu_count() or 1 for h in cl.hosts)
            for rate in sorted(r for h, p, r in configs if (h, p) == (hosts, per_host)):
                print(f"cost_model_hosts: {hosts} hosts x {per_host} ranks at {rate} ...", file=sys.stderr, flush=True)
                for h in cl.hosts:
                    cl.set_rate(h, rate)
                terms = _job(cl, per_host, [])
                terms.update({"rate": rate, "beta_tcp": beta_tcp, "unlimited_one_way": free, "cpus_per_host": cpus})
                out[config_key(hosts, per_host, rate)] = terms
    return out


def stack_seconds_per_byte(per_host: int = 1) -> float:
    """TCP's and the veth's CPU per byte between two test-bed hosts on unlimited links: the slope
    of MPI one-way times from 8 KiB to 512 KiB."""
    from pymcoll.testing.cluster import Cluster

    with Cluster(2) as cl:
        return stack_slope(_job(cl, per_host, ["--link-only"])["one_way"])


def stack_slope(one_way: dict[str, list]) -> float:
    """Seconds per byte of a one-way sweep's largest 4 sizes (a line through them)."""
    x, y = np.array(one_way["sizes"][-4:], float), np.array(one_way["seconds"][-4:])
    return float(np.polyfit(x, y, 1)[0])


def config_key(hosts: int, per_host: int, rate: str) -> str:
    return f"{hosts}x{per_host}@{rate}"


def link_check(terms: dict[str, Any], rate: str, burst: float) -> list[dict[str, Any]]:
    """The link's model against a ping-pong on the rated link: each direction's bucket refills
    while the other direction's message is on its way."""
    from pymcoll.testing.cluster import rate_bits

    r = rate_bits(rate) / 8
    rows = []
    ow = terms["one_way"]
    for m, t in zip(ow["sizes"], ow["seconds"]):
        c = terms["alpha_net"] + m * terms["beta_tcp"]
        # Steady ping-pong: a direction idles 2c + w per round trip, so w = m/r - min(2c + w, burst/r).
        w = max(0.0, (m / r - 2 * c) / 2)
        if 2 * c + w > burst / r:
            w = max(0.0, m / r - burst / r)
        rows.append({"size": m, "measured_us": t * 1e6, "predicted_us": (c + w) * 1e6, "ratio": (c + w) / t})
    return rows


#: The node segment's data area, which the lanes' ring divides: PYMCOLL_SHM_SIZE's default, which
#: the recorded runs used.
SHM_DATA_BYTES = int(OPTIONS["PYMCOLL_SHM_SIZE"].default)
LATENCY_TERMS = ("alpha_net", "alpha_x_one", "alpha_x_all", "alpha_mpi_local", "alpha_node")


def _model_for(terms: dict[str, Any], header: dict[str, Any], burst: float) -> HostModel:
    from pymcoll.testing.cluster import rate_bits

    rate = header.get("link_rate")
    return HostModel(terms, rate_bits(rate) if rate else None, burst, terms["cpus_per_host"])


def fit_latencies(terms: dict[str, Any], runs_of_config: list[dict[str, Any]], burst: float,
                  iters: int = 60) -> dict[str, float]:
    """The latency terms fitted to a configuration's measured times: least squares of
    log(predicted / measured) over every point, from the measured terms, by Gauss-Newton on the
    terms' logarithms (so they stay positive). The byte terms stay as measured."""
    points = [(d["header"], r) for d in runs_of_config for r in d["records"]
              if r["coll"] in COLLS and r["impl"] in IMPLS and "median_us" in r]
    x = np.log([terms[k] for k in LATENCY_TERMS])

    def residuals(v: np.ndarray) -> np.ndarray:
        t = {**terms, **dict(zip(LATENCY_TERMS, np.exp(v)))}
        out = []
        for header, r in points:
            model = _model_for(t, header, burst)
            out.append(math.log(model.predict(r["impl"], r["coll"], r["size"]) / (r["median_us"] * 1e-6)))
        return np.array(out)

    res = residuals(x)
    for _ in range(iters):
        J = np.empty((len(res), len(x)))
        for j in range(len(x)):
            step = np.zeros_like(x)
            step[j] = 1e-4
            J[:, j] = (residuals(x + step) - res) / 1e-4
        delta, *_ = np.linalg.lstsq(J, -res, rcond=None)
        delta = np.clip(delta, -1.0, 1.0)
        new = residuals(x + delta)
        while new @ new > res @ res and np.abs(delta).max() > 1e-6:  # halve until it improves
            delta /= 2
            new = residuals(x + delta)
        if res @ res - new @ new < 1e-9:
            break
        x, res = x + delta, new
    return dict(zip(LATENCY_TERMS, (float(v) for v in np.exp(x))))


def compare(params: dict[str, Any], burst: float, fitted: Optional[dict[str, dict[str, float]]] = None,
            sets: Optional[list[tuple[Path, dict[str, Any]]]] = None) -> list[dict[str, Any]]:
    """Predicted against measured for every point of every run (`sets`, as runs() gives them;
    default: perf/results) whose configuration was measured; with `fitted`, also the prediction
    from each configuration's fitted latency terms."""
    rows = []
    for path, data in runs() if sets is None else sets:
        h = data["header"]
        per_host = h["ranks"] // h["hosts"]
        key = config_key(h["hosts"], per_host, h["link_rate"])
        if key not in params:
            continue
        model = _model_for(params[key], h, burst)
        fit_model = _model_for({**params[key], **fitted[key]}, h, burst) if fitted and key in fitted else None
        for r in data["records"]:
            if r["coll"] not in COLLS or r["impl"] not in IMPLS or "median_us" not in r:
                continue
            pred = model.predict(r["impl"], r["coll"], r["size"]) * 1e6
            launches = r.get("launch_median_us") or [r["median_us"]]
            row = {"file": path.name, "hosts": h["hosts"], "per_host": per_host, "rate": h.get("link_rate"),
                   "coll": r["coll"], "impl": r["impl"], "size": r["size"],
                   "measured_us": r["median_us"], "predicted_us": pred, "ratio": pred / r["median_us"],
                   "spread": max(launches) / min(launches)}
            if fit_model is not None:
                fp = fit_model.predict(r["impl"], r["coll"], r["size"]) * 1e6
                row.update({"fitted_us": fp, "fitted_ratio": fp / r["median_us"]})
            rows.append(row)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", help="reuse the measured terms of a previous cost_model_hosts.json")
    ap.add_argument("--runs", type=Path, default=RESULTS,
                    help="the folder of perf/bench_lanes.py's runs on test-bed hosts (default perf/results)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the result file (default: cost_model_hosts.json in the --runs folder)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--link-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = args.out or args.runs / "cost_model_hosts.json"
    if args.measure:
        p = measure(args.link_only)
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 0:
            print("RESULT " + json.dumps(p), flush=True)
        return 0
    from pymcoll.testing.cluster import TBF_BURST

    sets = runs(args.runs)
    if not sets:
        raise SystemExit(f"cost_model_hosts: no runs on test-bed hosts (lanes_np*_hosts*bit.json) in {args.runs}; "
                         "make them with perf/bench_lanes.py --hosts K --rate R, or pass --runs FOLDER")
    if args.params:
        params = json.loads(Path(args.params).read_text())["params"]
    else:
        configs = {(d["header"]["hosts"], d["header"]["ranks"] // d["header"]["hosts"], d["header"]["link_rate"])
                   for _, d in sets if d["header"].get("link_rate")}
        params = measure_shapes(configs)
    for shape, t in params.items():
        print(f"# {shape}: alpha_net {t['alpha_net'] * 1e6:.2f} us, TCP {1 / t['beta_tcp'] / 1e9:.2f} GB/s, "
              f"MPI on a host {t['alpha_mpi_local'] * 1e6:.2f} us, exchange round {t['alpha_x_one'] * 1e6:.2f} us "
              f"(every lane {t['alpha_x_all'] * 1e6:.2f} us), "
              f"node step {t['alpha_node'] * 1e6:.2f} us, memcpy {1 / t['beta_shm'] / 1e9:.1f} GB/s, "
              f"sum {1 / t['gamma'] / 1e9:.1f} GB/s, call {t['alpha_call'] * 1e6:.2f} us, "
              f"{t['cpus_per_host']} CPU(s) per host")
        lc = link_check(t, t["rate"], TBF_BURST)
        print("  the link's model, ping-pong predicted/measured by size: " +
              " ".join(f"{row['size']}:{row['ratio']:.2f}" for row in lc))
    fitted = {}
    for key, terms in params.items():
        same = [d for _, d in sets
                if config_key(d["header"]["hosts"], d["header"]["ranks"] // d["header"]["hosts"],
                              d["header"].get("link_rate")) == key]
        fitted[key] = fit_latencies(terms, same, TBF_BURST)
        print(f"# {key} fitted: " + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in fitted[key].items()))
    rows = compare(params, TBF_BURST, fitted, sets)
    print("\n# predicted / measured: with the measured terms (measured), with the fitted latency terms (fitted); "
          "* outside 25%; spread: slowest / fastest launch of the point")
    print(f"{'run':<24} {'coll':<10} {'impl':<7} {'size':>7} {'measured_us':>11} {'measured':>8} {'fitted':>7} "
          f"{'spread':>6}")
    for row in rows:
        flag = "" if abs(row["fitted_ratio"] - 1) <= 0.25 else "  *"
        print(f"{row['file'][6:-5]:<24} {row['coll']:<10} {row['impl']:<7} {row['size']:>7} {row['measured_us']:>11.1f} "
              f"{row['ratio']:>8.2f} {row['fitted_ratio']:>7.2f} {row['spread']:>6.2f}{flag}")
    print()
    for line in summary(rows):
        print(line)
    folder = args.runs.resolve()
    where = str(folder.relative_to(HERE.parent)) if folder.is_relative_to(HERE.parent) else str(folder)
    doc = {"header": run_record(script="perf/cost_model_hosts.py", burst_bytes=TBF_BURST, runs=where),
           "params": params, "fitted": fitted, "comparison": rows}
    write_results(doc, out, plot)
    return 0


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Share of points within 25% by implementation and size class, and the launches' own spread."""
    def share(sel: list[dict[str, Any]], key: str) -> str:
        ok = sum(abs(r[key] - 1) <= 0.25 for r in sel)
        return f"{ok}/{len(sel)} ({100 * ok / max(len(sel), 1):.0f}%)"

    lines = [f"{'points':<36} {'measured terms':>16} {'fitted terms':>16} {'launches within 25%':>20}"]
    classes = (("all", lambda r: True), ("below 8 KiB", lambda r: r["size"] < 8192),
               ("8 KiB and more", lambda r: r["size"] >= 8192))
    for impl in (*IMPLS, None):
        for label, keep in classes:
            sel = [r for r in rows if keep(r) and (impl is None or r["impl"] == impl)]
            if not sel:
                continue
            steady = sum(r["spread"] <= 1.25 for r in sel)
            lines.append(f"{(impl or 'every implementation') + ', ' + label:<36} {share(sel, 'ratio'):>16} "
                         f"{share(sel, 'fitted_ratio'):>16} {f'{steady}/{len(sel)}':>20}")
    return lines


@plotter("cost_model_hosts")
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    rows = doc["comparison"]
    runs_ = sorted({r["file"] for r in rows})
    fig, axes = plt.subplots(1, len(runs_), figsize=(4.6 * len(runs_), 4.4), squeeze=False)
    for ax, name in zip(axes[0], runs_):
        for impl, marker in zip(IMPLS, "os^"):
            sel = [r for r in rows if r["file"] == name and r["impl"] == impl]
            ax.scatter([r["measured_us"] for r in sel], [r["fitted_us"] for r in sel], s=14, marker=marker,
                       label=impl, alpha=0.8)
        lo = min(r["measured_us"] for r in rows) / 1.5
        hi = max(r["measured_us"] for r in rows) * 1.5
        ax.plot([lo, hi], [lo, hi], color="gray", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="gray", alpha=0.15,
                        label="within 25%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured, us per call")
        ax.set_title(name[len("lanes_"):-len(".json")], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("predicted (fitted latency terms), us")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("cost model across test-bed hosts: predicted against measured", fontsize=10)
    return fig


if __name__ == "__main__":
    sys.exit(main())
