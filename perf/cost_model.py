#!/usr/bin/env python3
"""Cost model of multi-object (lanes), single-leader and flat collectives.

1. Measures this machine (under mpiexec -n 2, launched by the script):
   - MPI point-to-point: one-way time of an mpi4py ping-pong from 8 B to 4 MiB,
     fitted to alpha_net + m * beta_net (Hockney);
   - intra-node copies: memcpy time per byte (beta_shm) and a node
     synchronisation step (alpha_shm: a pymcoll Barrier of two local ranks);
   - reduction: numpy float32 add per byte (gamma);
   - a Python call (alpha_call: an empty pymcoll collective on one rank),
     paid once per collective by every implementation.
2. Feeds formulas for Bcast, Scatter, Allgather and Allreduce in three
   designs (flat MPI over all ranks, one leader per node, L = P lanes per
   node) and predicts times for 2-1024 nodes and 1-64 ranks per node; a step
   that moves X bytes out of a node over k streams costs
   max(X/k * beta_net, X * beta_node), beta_node from --node-gbps (an assumed
   NIC, not measured here).
3. Validates against measured virtual-node runs (perf/results/lanes_np*.json
   from perf/bench_lanes.py): predicted / measured per collective, size and
   implementation, twice: with the 2-rank parameters, and with parameters
   measured under the run's own load (mpiexec -n R for each rank count R of
   the runs: every rank ping-pongs with a partner at once, a node step is a
   Barrier of all R ranks, every rank copies at once), since R ranks on
   fewer cores wait for time slices that 2 ranks on 2 cores never see. Runs on test-bed
   hosts (lanes_np*_hosts*.json) are perf/cost_model_hosts.py's.

  python perf/cost_model.py                      # measure, predict, validate, plot
  python perf/cost_model.py --params perf/results/cost_model.json   # reuse measured parameters (both kinds)

Writes perf/results/cost_model.json and cost_model.png (where multi-object wins).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
COLLS = ("bcast", "scatter", "gather", "allgather", "reduce", "allreduce")
NODES = tuple(2 ** i for i in range(1, 11))       # 2 .. 1024
PPN = tuple(2 ** i for i in range(0, 7))          # 1 .. 64
PLOT_SIZES = (8, 1 << 10, 64 << 10, 1 << 20)


# -- measuring -------------------------------------------------------------------------
def best_of(fn: Callable[[], None], reps: int) -> float:
    """The least wall time of `reps` runs of fn, in seconds."""
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def pingpong(world: Any, partner: Optional[int], buf: np.ndarray, reps: int) -> Callable[[], None]:
    """reps round trips of buf with partner (the lower rank sends first); None: no partner."""
    me = world.rank

    def run() -> None:
        if partner is None:
            return
        for _ in range(reps):
            if me < partner:
                world.Send(buf, dest=partner)
                world.Recv(buf, source=partner)
            else:
                world.Recv(buf, source=partner)
                world.Send(buf, dest=partner)
    return run


def measure() -> dict[str, float]:
    """Run under mpiexec -n 2: every parameter of the model, in seconds and seconds per byte."""
    from mpi4py import MPI

    import pymcoll
    world = MPI.COMM_WORLD
    assert world.size == 2, "the measurement runs on exactly 2 ranks"
    peer = 1 - world.rank
    sizes = [8 << (2 * i) for i in range(11)]  # 8 B .. 8 MiB
    one_way = []
    for m in sizes:
        buf = np.zeros(max(m, 1), np.uint8)
        reps = max(5, min(2000, int(2e7 // max(m, 1))))
        rounds = pingpong(world, peer, buf, reps)
        world.Barrier()
        rounds()
        world.Barrier()
        t = min(best_of(rounds, 3), best_of(rounds, 3)) / reps / 2
        one_way.append(world.allreduce(t, op=MPI.MAX))
    x, y = np.array(sizes, float), np.array(one_way)
    # alpha from the small sizes, beta from the large ones (a plain least-squares fit lets the
    # large sizes swallow alpha).
    alpha_net = float(np.median(y[:3]))
    beta_net = float(np.median((y[-4:] - alpha_net) / x[-4:]))

    big = np.ones(16 << 20, np.uint8)
    dst = np.empty_like(big)
    beta_shm = best_of(lambda: np.copyto(dst, big), 5) / big.nbytes
    a = np.ones(4 << 20, np.float32)
    b = np.ones_like(a)
    gamma = best_of(lambda: np.add(a, b, out=a), 5) / a.nbytes

    node = pymcoll.Comm(world)  # one node of two ranks: a synchronisation step
    reps = 2000
    node.Barrier()
    alpha_shm = best_of(lambda: [node.Barrier() for _ in range(reps)], 3) / reps
    alpha_shm = world.allreduce(alpha_shm, op=MPI.MAX)
    node.Free()
    solo = pymcoll.Comm(MPI.COMM_SELF)
    one = np.zeros(1, np.float32)
    alpha_call = best_of(lambda: [solo.Bcast(one, root=0) for _ in range(reps)], 3) / reps
    solo.Free()
    return {"alpha_net": alpha_net, "beta_net": beta_net, "alpha_shm": alpha_shm, "beta_shm": beta_shm,
            "gamma": gamma, "alpha_call": world.allreduce(alpha_call, op=MPI.MAX),
            "pingpong": {"sizes": sizes, "one_way_s": one_way}}


def measure_loaded() -> dict[str, float]:
    """Run under mpiexec -n R (any R >= 2): the latency and bandwidth terms with every rank busy,
    as in a virtual-node run of R ranks on this machine's cores."""
    from mpi4py import MPI

    import pymcoll
    world = MPI.COMM_WORLD
    R, me = world.size, world.rank
    partner = me ^ 1 if (me ^ 1) < R else None  # an odd last rank only takes part in the load

    def one_way(m: int, reps: int) -> float:
        rounds = pingpong(world, partner, np.zeros(max(m, 1), np.uint8), reps)
        world.Barrier()
        t = best_of(rounds, 3) / reps / 2
        vals = [v for v in world.allgather(t if partner is not None else None) if v is not None]
        return float(np.median(vals))

    alpha_net = one_way(8, 2000)
    big = 1 << 20
    beta_net = max(one_way(big, 50) - alpha_net, 0.0) / big
    src = np.ones(16 << 20, np.uint8)  # as in the 2-rank measurement
    dst = np.empty_like(src)
    world.Barrier()
    beta_shm = float(np.median(world.allgather(best_of(lambda: np.copyto(dst, src), 5) / src.nbytes)))
    node = pymcoll.Comm(world, node_size=R)  # every rank in one node: a node step waits for all
    reps = 500
    node.Barrier()
    alpha_shm = float(np.median(world.allgather(best_of(lambda: [node.Barrier() for _ in range(reps)], 3) / reps)))
    node.Free()
    return {"ranks": R, "alpha_net": alpha_net, "beta_net": beta_net, "beta_shm": beta_shm, "alpha_shm": alpha_shm}


# -- the model ---------------------------------------------------------------------------
def lg(x: float, r: float) -> int:
    """Rounds of a tree or exchange of radix r over x participants."""
    return 0 if x <= 1 else math.ceil(math.log(x) / math.log(r) - 1e-9)


class Model:
    """Predicted seconds of one collective; m = bytes per rank as perf/bench_collectives.py counts
    them (the vector for reductions, the broadcast message, each rank's block otherwise)."""

    def __init__(self, p: dict[str, float], node_gbps: float) -> None:
        self.an, self.bn = p["alpha_net"], p["beta_net"]
        self.ash, self.bsh, self.g, self.call = p["alpha_shm"], p["beta_shm"], p["gamma"], p["alpha_call"]
        self.bnode = 1.0 / (node_gbps * 1e9)

    def out(self, nbytes: float, streams: int) -> float:
        """A step moving nbytes out of a node over `streams` concurrent lanes."""
        return max(nbytes / max(streams, 1) * self.bn, nbytes * self.bnode)

    # flat: the MPI over all N*P ranks, every message priced as a network message
    def flat(self, coll: str, N: int, P: int, m: float) -> float:
        n, a = N * P, self.an
        if coll == "bcast":
            return min(lg(n, 2) * (a + self.out(m, 1)), (lg(n, 2) + n - 1) * a + 2 * (n - 1) / n * self.out(m, 1))
        if coll in ("scatter", "gather"):
            return lg(n, 2) * a + self.out((n - 1) * m, 1)
        if coll == "allgather":
            return min(lg(n, 2) * a + self.out((n - 1) * m, 1), (n - 1) * (a + self.out(m, 1)))
        if coll == "reduce":
            return min(lg(n, 2) * (a + self.out(m, 1) + m * self.g),
                       2 * lg(n, 2) * a + 2 * (n - 1) / n * self.out(m, 1) + (n - 1) / n * m * self.g)
        return min(lg(n, 2) * (a + self.out(m, 1) + m * self.g),     # allreduce
                   2 * lg(n, 2) * a + 2 * (n - 1) / n * self.out(m, 1) + (n - 1) / n * m * self.g)

    def node_gather(self, P: int, m: float) -> float:
        return 0.0 if P == 1 else 2 * self.ash + P * m * self.bsh

    def node_bcast(self, P: int, nbytes: float) -> float:
        return 0.0 if P == 1 else self.ash + 2 * nbytes * self.bsh

    def node_reduce(self, P: int, m: float) -> float:
        return 0.0 if P == 1 else 2 * self.ash + m * self.bsh + m * self.g

    # one leader per node: node step, the leaders' MPI collective over N, node step
    def leader(self, coll: str, N: int, P: int, m: float) -> float:
        if coll == "bcast":
            return self.flat("bcast", N, 1, m) + self.node_bcast(P, m)
        if coll in ("scatter", "gather"):
            return self.flat("scatter", N, 1, P * m) + self.node_gather(P, m)
        if coll == "allgather":
            return self.node_gather(P, m) + self.flat("allgather", N, 1, P * m) + self.node_bcast(P, N * P * m)
        if coll == "reduce":
            return self.node_reduce(P, m) + self.flat("reduce", N, 1, m)
        return self.node_reduce(P, m) + self.flat("allreduce", N, 1, m) + self.node_bcast(P, m)

    # L = P lanes: the PiP-MColl algorithms as native/src/coll/*_lanes_*.c run them
    def lanes(self, coll: str, N: int, P: int, m: float, small_max: float) -> float:
        L, R = P, P + 1
        a = self.an + self.ash  # a lane round: a message and the lanes' flag step
        if coll == "bcast":
            if m <= small_max:
                return lg(N, R) * (a + self.out(m, 1)) + 2 * m * self.bsh
            return (lg(N, 2) + N - 1) * self.an + 2 * (N - 1) / N * self.out(m, L) + self.node_bcast(P, m)
        if coll in ("scatter", "gather"):
            # the root's node ships (N-1)*P*m over its L lanes, subtrees in parallel below it
            return lg(N, R) * a + self.out((N - 1) * P * m, L) + (N * P * m + m) * self.bsh
        if coll == "allgather":
            if P * m <= small_max:
                return self.ash + m * self.bsh + lg(N, R) * a + self.out((N - 1) * P * m, L) + N * P * m * self.bsh
            return self.node_gather(P, m) + (N - 1) * (a + self.out(P * m, L) + (L - 1) / L * P * m * self.bsh)
        if coll in ("reduce", "allreduce"):
            if m <= small_max:
                rounds = lg(N, R)
                return self.node_reduce(P, m) + rounds * (a + self.ash + self.out(L * m, L) + R * m / L * self.g) \
                    + m * self.bsh
            steps = (N - 1) * (1 if coll == "reduce" else 2)
            return self.node_reduce(P, m) + steps * (self.an + self.out(m / N, L) + m / (L * N) * self.g) \
                + (m * self.bsh + self.ash if coll == "allreduce" else 0.0)
        raise ValueError(coll)

    def predict(self, coll: str, N: int, P: int, m: float, small_max: float) -> dict[str, float]:
        return {"lanes": self.call + self.lanes(coll, N, P, m, small_max),
                "leader": self.call + self.leader(coll, N, P, m),
                "flat": self.call + self.flat(coll, N, P, m)}


# -- prediction grid, validation, plot ---------------------------------------------------
def grid(model: Model, small_max: float) -> list[dict[str, Any]]:
    rows = []
    for coll in ("bcast", "scatter", "allgather", "allreduce"):
        for m in PLOT_SIZES:
            for N in NODES:
                for P in PPN:
                    t = model.predict(coll, N, P, m, small_max)
                    best_other = min(t["leader"], t["flat"])
                    rows.append({"coll": coll, "size": m, "nodes": N, "ppn": P, **{f"{k}_us": v * 1e6 for k, v in t.items()},
                                 "lanes_vs_best_other": t["lanes"] / best_other})
    return rows


def validate(model: Model, small_max: float, loaded: Optional[dict[int, Model]] = None) -> list[dict[str, Any]]:
    """Predicted / measured for every timed point of perf/results/lanes_np*.json; with `loaded`
    (rank count -> model with that load's parameters) also the ratio under the run's own load."""
    out = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "lanes_np*.json"))):
        with open(path) as f:
            data = json.load(f)
        h = data["header"]
        if h.get("check_only") or h.get("hosts"):  # runs on test-bed hosts: perf/cost_model_hosts.py
            continue
        N, P = h["nnodes"], h["node_size"]
        oversub = h["ranks"] > h["cpus"]
        for r in data["records"]:
            if r["coll"] not in COLLS or "median_us" not in r or r["impl"] not in ("lanes", "leader", "mpi4py"):
                continue  # the default choice ("auto") is one of the designs modelled, measured again
            t = model.predict(r["coll"], N, P, r["size"], small_max)
            impl = {"lanes": "lanes", "leader": "leader", "mpi4py": "flat"}[r["impl"]]
            if r["impl"] == "leader" and r["coll"] in ("scatter", "gather"):
                impl = "flat"  # no leader variant: the wrapped MPI's collective
            row = {"file": os.path.basename(path), "ranks": h["ranks"], "nodes": N, "ppn": P,
                   "oversubscribed": oversub, "coll": r["coll"], "size": r["size"], "impl": r["impl"],
                   "measured_us": r["median_us"], "predicted_us": t[impl] * 1e6,
                   "ratio": t[impl] * 1e6 / r["median_us"]}
            if loaded and h["ranks"] in loaded:
                tl = loaded[h["ranks"]].predict(r["coll"], N, P, r["size"], small_max)[impl] * 1e6
                row.update({"predicted_loaded_us": tl, "ratio_loaded": tl / r["median_us"]})
            out.append(row)
    return out


def plot(rows: list[dict[str, Any]], path: str, title: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colls = ("bcast", "scatter", "allgather", "allreduce")
    fig, axes = plt.subplots(len(colls), len(PLOT_SIZES), figsize=(3.1 * len(PLOT_SIZES), 2.7 * len(colls)))
    im = None
    for i, coll in enumerate(colls):
        for j, m in enumerate(PLOT_SIZES):
            z = np.zeros((len(PPN), len(NODES)))
            for r in rows:
                if r["coll"] == coll and r["size"] == m:
                    z[PPN.index(r["ppn"]), NODES.index(r["nodes"])] = math.log2(r["lanes_vs_best_other"])
            ax = axes[i][j]
            im = ax.imshow(z, origin="lower", cmap="coolwarm", vmin=-3, vmax=3, aspect="auto")
            ax.set_xticks(range(len(NODES)), [str(n) for n in NODES], fontsize=6, rotation=90)
            ax.set_yticks(range(len(PPN)), [str(p) for p in PPN], fontsize=6)
            ax.set_title(f"{coll} {m} B", fontsize=8)
            if j == 0:
                ax.set_ylabel("ranks per node", fontsize=7)
            if i == len(colls) - 1:
                ax.set_xlabel("nodes", fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.6, label="log2(lanes / best of leader, flat): blue = lanes win")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def launch_measure(mpiexec: Optional[str], ranks: int = 2, loaded: bool = False) -> dict[str, float]:
    from pymcoll.cli import launch
    program = [sys.executable, os.path.abspath(__file__), "--measure-loaded" if loaded else "--measure-only"]
    cmd, env = launch.mpiexec_command(ranks, program, mpiexec)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"cost_model: measurement failed:\n{proc.stdout}\n{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", help="JSON with measured parameters (a previous cost_model.json)")
    ap.add_argument("--node-gbps", type=float, default=25.0,
                    help="assumed injection bandwidth of one node, GB/s (default 25: a 200 Gb/s NIC)")
    ap.add_argument("--small-max", type=float, default=64 << 10, help="PYMCOLL_LANES_SMALL_MAX modelled")
    ap.add_argument("--out", default=os.path.join(RESULTS, "cost_model"))
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--measure-loaded", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure_only or args.measure_loaded:
        p = measure_loaded() if args.measure_loaded else measure()
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 0:
            print(json.dumps(p))
        return 0
    reused: dict[int, dict[str, float]] = {}
    if args.params:
        with open(args.params) as f:
            saved = json.load(f)
        params = saved["params"]
        reused = {int(k): v for k, v in saved.get("loaded_params", {}).items()}
    else:
        print("cost_model: measuring point-to-point, copies, reductions on 2 ranks ...", file=sys.stderr, flush=True)
        params = launch_measure(args.mpiexec)
    model = Model(params, args.node_gbps)
    print("# measured parameters (this machine)")
    print(f"  alpha_net  {params['alpha_net'] * 1e6:8.3f} us     beta_net  {1 / params['beta_net'] / 1e9:7.2f} GB/s "
          f"(MPI one-way)")
    print(f"  alpha_shm  {params['alpha_shm'] * 1e6:8.3f} us     beta_shm  {1 / params['beta_shm'] / 1e9:7.2f} GB/s "
          f"(node sync step, memcpy)")
    print(f"  gamma      {1 / params['gamma'] / 1e9:8.2f} GB/s  alpha_call {params['alpha_call'] * 1e6:6.3f} us  "
          f"node injection {args.node_gbps:g} GB/s (assumed)")
    rows = grid(model, args.small_max)
    print("\n# predicted: lanes / best of (leader, flat), < 1: multi-object wins")
    for coll in ("bcast", "scatter", "allgather", "allreduce"):
        for m in PLOT_SIZES:
            print(f"## {coll} {m} B per rank   (rows: ranks per node; columns: nodes)")
            print("  ppn " + "".join(f"{n:>7d}" for n in NODES))
            for P in PPN:
                vals = [r["lanes_vs_best_other"] for r in rows if r["coll"] == coll and r["size"] == m and r["ppn"] == P]
                print(f"  {P:>3d} " + "".join(f"{v:>7.2f}" for v in vals))
    # The validation runs' rank counts, each measured under its own load.
    counts = set()
    for path in glob.glob(os.path.join(RESULTS, "lanes_np*.json")):
        with open(path) as f:
            h = json.load(f)["header"]
        if not h.get("check_only") and not h.get("hosts"):
            counts.add(int(h["ranks"]))
    loaded_params: dict[int, dict[str, float]] = {}
    for R in sorted(counts):
        if R in reused:
            loaded_params[R] = reused[R]
            continue
        print(f"cost_model: measuring under the load of {R} ranks ...", file=sys.stderr, flush=True)
        loaded_params[R] = launch_measure(args.mpiexec, R, loaded=True)
    loaded = {R: Model({**params, **{k: v for k, v in lp.items() if k != "ranks"}}, args.node_gbps)
              for R, lp in loaded_params.items()}
    if loaded_params:
        print("\n# parameters under load (R ranks busy on this machine's cores)")
        for R, lp in loaded_params.items():
            print(f"  {R:>3d} ranks: alpha_net {lp['alpha_net'] * 1e6:8.2f} us  beta_net "
                  f"{1 / lp['beta_net'] / 1e9 if lp['beta_net'] > 0 else float('inf'):6.2f} GB/s  alpha_shm "
                  f"{lp['alpha_shm'] * 1e6:8.2f} us  beta_shm {1 / lp['beta_shm'] / 1e9:6.2f} GB/s")
    val = validate(model, args.small_max, loaded)
    if val:
        print("\n# validation: predicted / measured on virtual nodes (perf/results/lanes_np*.json)")
        print(f"  {'file':<34} {'coll':<10} {'size':>8} {'impl':<7} {'measured':>10} {'predicted':>10} {'ratio':>6}"
              f" {'loaded':>10} {'ratio':>6}")
        for v in val:
            print(f"  {v['file']:<34} {v['coll']:<10} {v['size']:>8d} {v['impl']:<7} {v['measured_us']:>10.2f} "
                  f"{v['predicted_us']:>10.2f} {v['ratio']:>6.2f} {v.get('predicted_loaded_us', math.nan):>10.2f} "
                  f"{v.get('ratio_loaded', math.nan):>6.2f}" + ("  (oversubscribed)" if v["oversubscribed"] else ""))
        for key, label in (("ratio", "2-rank parameters"), ("ratio_loaded", "parameters under the run's load")):
            print(f"  -- {label}")
            for impl in ("lanes", "leader", "mpi4py"):
                for over in (False, True):
                    rs = [v[key] for v in val if key in v and v["impl"] == impl and v["oversubscribed"] == over]
                    if rs:
                        gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
                        print(f"  {impl:<7} {'oversubscribed' if over else 'cores >= ranks':<15}: geometric mean "
                              f"{gm:.2f}, range {min(rs):.2f}-{max(rs):.2f} over {len(rs)} points")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"params": params, "loaded_params": loaded_params, "node_gbps": args.node_gbps,
                   "small_max": args.small_max,
                   "predictions": rows, "validation": val}, f, indent=1)
    title = (f"cost model, measured here: MPI {params['alpha_net'] * 1e6:.2f} us + "
             f"{1 / params['beta_net'] / 1e9:.1f} GB/s, node step {params['alpha_shm'] * 1e6:.2f} us; "
             f"node injection {args.node_gbps:g} GB/s assumed")
    if plot(rows, args.out + ".png", title):
        print(f"\nwrote {args.out}.json and {args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
