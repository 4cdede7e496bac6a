#!/usr/bin/env python3
"""Multi-object (lanes) against single-leader against the MPI, across virtual nodes.

Four implementations of each collective run side by side in one launch,
interleaved block by block (docs/measure.md): pymcoll with the lane algorithms
(PYMCOLL_<COLL>_ALGORITHM=lanes), pymcoll with one leader per node
(=leader; for Scatter and Gather, which have no leader variant, that is the
wrapped communicator's MPI collective; for Alltoall(v) it is the lanes'
pairwise exchange on lane 0 alone), pymcoll as it chooses by default (auto:
what a user gets), and mpi4py's collective on the same ranks. Every rank is in a virtual node of --node-size ranks, so the
"inter-node" messages are the MPI's own shared-memory transport: the
timings show the algorithms' structure, not a network's.

  python perf/bench_lanes.py --np 4 --node-size 2              # 2 nodes x 2
  python perf/bench_lanes.py --np 8 --node-size 2 --max-bytes 256K
  python perf/bench_lanes.py --np 12 --node-size 3 --check-only   # correctness at 12 ranks
  python perf/bench_lanes.py --hosts 2 --np 4 --rate 1gbit     # real hosts (network namespaces, root)

With --hosts K the ranks run on K hosts of pymcoll's multi-host test bed (np / K per host, MPI
over TCP across veths, --rate limiting every host's link); nodes are then the real hosts.

Writes perf/results/lanes_np<N>_ns<K>_<mpi>.json and a PNG of lanes/leader and
lanes/MPI per size; prints OSU-style tables with both ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_collectives as bc  # noqa: E402  (shares cases and timing)
from perfutil import launch_self, plotter  # noqa: E402

COLLS = ("bcast", "scatter", "gather", "allgather", "reduce", "allreduce", "alltoall", "alltoallv")
IMPLS = ("lanes", "leader", "auto", "mpi4py")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--node-size", type=int, default=2, help="ranks per virtual node (default 2)")
    ap.add_argument("--hosts", type=int, default=0,
                    help="run on this many test-bed hosts instead of virtual nodes (needs root)")
    ap.add_argument("--rate", default=None, help="with --hosts: every host link's rate (tc form: 1gbit)")
    ap.add_argument("--launches", type=int, default=1,
                    help="with --hosts: launch the job this many times (each on fresh hosts) and record "
                         "the median of the launches' medians per point (default 1)")
    ap.add_argument("--colls", default=",".join(COLLS), help="comma list of " + ",".join(COLLS))
    ap.add_argument("--min-bytes", default="8", help="smallest per-rank size (default 8)")
    ap.add_argument("--max-bytes", default="1M", help="largest per-rank size (default 1M)")
    ap.add_argument("--blocks", type=int, default=5, help="timed blocks per implementation (default 5)")
    ap.add_argument("--iters-scale", type=float, default=0.3, help="scale of iterations per block")
    ap.add_argument("--check-only", action="store_true",
                    help="verify every collective at every size on all three, no timing")
    ap.add_argument("--out", default=None, help="output stem (default perf/results/lanes_np<N>_ns<K>_<mpi>)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.colls = bc.parse_list(args.colls, COLLS, "--colls")
    args.min = bc.bench.parse_size(args.min_bytes, "--min-bytes")
    args.max = bc.bench.parse_size(args.max_bytes, "--max-bytes")
    if args.launches < 1:
        ap.error(f"--launches={args.launches}: at least 1")
    return args


def sizes(lo: int, hi: int) -> list[int]:
    out, s = [], max(4, lo)
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def node_size(args: argparse.Namespace) -> Optional[int]:
    """Virtual nodes of --node-size ranks, or the real nodes (test-bed hosts) with --hosts."""
    return None if args.hosts else args.node_size


def make_comm(world: MPI.Comm, node_size: Optional[int], algorithm: str) -> Any:
    import pymcoll
    for coll in bc.METHODS.values():
        os.environ[f"PYMCOLL_{coll.upper()}_ALGORITHM"] = algorithm
    comm = pymcoll.Comm(world, node_size=node_size)
    for coll in bc.METHODS.values():
        del os.environ[f"PYMCOLL_{coll.upper()}_ALGORITHM"]
    return comm


def measure(comms: dict[str, Any], world: MPI.Comm, coll: str, size: int, args: argparse.Namespace,
            seed: int) -> list[dict[str, Any]]:
    n = world.size
    root = (n - 1) if coll in bc.ROOTED else 0  # a root off local rank 0 and off node 0
    case = bc.make_case(world, coll, size, root=root)
    if case is None:
        return []
    method = bc.METHODS[coll]
    calls: dict[str, Callable[[], None]] = {}
    releases = []
    for impl in IMPLS:
        obj = world if impl == "mpi4py" else comms[impl]
        calls[impl], rel = bc.make_call(obj, method, case.args, "plain")
        releases.append(rel)
    wrong = {}
    for j, impl in enumerate(calls):
        wrong[impl] = int(world.allreduce(case.verify(calls[impl], seed + 7 * j), op=MPI.SUM))
    rec = {"coll": coll, "size": case.size, "ranks": n, "node_size": node_size(args), "root": case.root}
    if args.check_only:
        for rel in releases:
            rel()
        return [{**rec, "impl": impl, "wrong": wrong[impl]} for impl in calls]
    cap = max(1, int(bc.bench.default_iters(max(case.send_bytes, case.recv_bytes, 1)) * args.iters_scale))
    per_call_us, n_iters, _ = bc.time_blocks(world, calls, case.stamp, cap=cap,
                                             min_iters=max(1, min(bc.bench.MIN_ITERS, cap)),
                                             target_s=bc.bench.TARGET_BLOCK_S * args.iters_scale,
                                             blocks=args.blocks)
    for rel in releases:
        rel()
    med = {impl: float(np.median(per_call_us[j])) for j, impl in enumerate(calls)}
    out = []
    for j, impl in enumerate(calls):
        t = per_call_us[j]
        out.append({**rec, "impl": impl, "iters": n_iters, "median_us": med[impl], "min_us": float(t.min()),
                    "max_us": float(t.max()), "block_us": [round(float(x), 3) for x in t], "wrong": wrong[impl],
                    "vs_leader": med[impl] / med["leader"] if med["leader"] > 0 else None,
                    "vs_mpi": med[impl] / med["mpi4py"] if med["mpi4py"] > 0 else None})
    return out


def table(records: list[dict[str, Any]], coll: str) -> str:
    rows = [r for r in records if r["coll"] == coll and r["impl"] == "lanes"]
    by = {(r["size"], r["impl"]): r for r in records if r["coll"] == coll}
    lines = [f"# {bc.METHODS[coll]}  (lanes = multi-object, leader = one leader per node, auto = pymcoll's default "
             f"choice, mpi = mpi4py)",
             f"# {'Size':>9} {'lanes(us)':>11} {'leader(us)':>11} {'auto(us)':>11} {'mpi(us)':>11} {'vs_leader':>10} "
             f"{'vs_mpi':>8} {'auto/mpi':>9} {'#wrong':>7}"]
    for r in rows:
        s = r["size"]
        auto = by[(s, "auto")]
        lines.append(f"  {s:>9d} {r['median_us']:>11.2f} {by[(s, 'leader')]['median_us']:>11.2f} "
                     f"{auto['median_us']:>11.2f} {by[(s, 'mpi4py')]['median_us']:>11.2f} {r['vs_leader']:>10.2f} "
                     f"{r['vs_mpi']:>8.2f} {auto['vs_mpi']:>9.2f} {sum(by[(s, i)]['wrong'] for i in IMPLS):>7d}")
    return "\n".join(lines)


@plotter("bench_lanes")
def plot(plt: Any, records: list[dict[str, Any]], header: dict[str, Any]) -> Any:
    colls = [c for c in COLLS if any(r["coll"] == c for r in records)]
    panels = [("lanes", "vs_leader", "lanes / single leader (< 1: lanes faster)"),
              ("lanes", "vs_mpi", "lanes / MPI (< 1: lanes faster)")]
    if any(r["impl"] == "auto" for r in records):
        panels.append(("auto", "vs_mpi", "pymcoll's default / MPI (< 1: faster)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), sharey=True)
    for ax, (impl, key, title) in zip(axes, panels):
        for coll in colls:
            rows = [r for r in records if r["coll"] == coll and r["impl"] == impl]
            ax.plot([r["size"] for r in rows], [r[key] for r in rows], marker="o", label=bc.METHODS[coll])
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("bytes per rank")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ratio of medians")
    axes[-1].legend(fontsize=8)
    where = (f"{header['nnodes']} hosts, links {header.get('link_rate') or 'unlimited'}" if header.get("hosts")
             else f"{header['nnodes']} virtual nodes of {header['node_size']}")
    runs = f", median of {header['launches']} launches" if header.get("launches", 1) > 1 else ""
    fig.suptitle(f"{header['ranks']} ranks as {where} ({header['mpi']}, {header['commit']}{runs})", fontsize=10)
    return fig


def run(args: argparse.Namespace) -> int:
    world = MPI.COMM_WORLD.Dup()
    comms = {impl: make_comm(world, node_size(args), impl) for impl in IMPLS if impl != "mpi4py"}
    lay = comms["lanes"].layout
    ident = bc.mpi_identity()
    run_facts = bc.bench.describe_run(comms["lanes"], node_size=node_size(args))
    header = {"benchmark": "lanes", "ranks": world.size, "node_size": node_size(args), "nnodes": lay.nnodes,
              "hosts": args.hosts, "link_rate": args.rate,
              "lanes": lay.lanes, "mpi": f"{ident['mpi_name']} {ident['mpi_version']}",
              "commit": (run_facts.get("commit") or "?")[:7], "cpus": len(os.sched_getaffinity(0)),
              "check_only": args.check_only, "iters_scale": args.iters_scale, "blocks": args.blocks}
    records: list[dict[str, Any]] = []
    todo = [(c, s) for c in args.colls for s in sizes(args.min, args.max)]
    for i, (coll, size) in enumerate(todo):
        if world.rank == 0:
            print(f"[{i + 1}/{len(todo)}] {bc.METHODS[coll]} {size} B", file=sys.stderr, flush=True)
        records += measure(comms, world, coll, size, args, seed=1000 + i)
    bad = sum(r["wrong"] for r in records)
    if world.rank == 0:
        nodes = (f"{lay.nnodes} hosts (links {args.rate or 'unlimited'})" if args.hosts
                 else f"{lay.nnodes} virtual nodes of {args.node_size}")
        print(f"# {header['ranks']} ranks, {nodes} ({lay.lanes} lanes), "
              f"{header['mpi']}, {header['commit']}, {header['cpus']} CPUs")
        if args.check_only:
            print(f"checked {len(todo)} cases x {len(IMPLS)} implementations: {bad} wrong elements")
        else:
            for coll in args.colls:
                print(table(records, coll))
        stem = default_stem(world.size, args)
        os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
        with open(stem + ".json", "w") as f:
            json.dump({"header": header, "records": records}, f, indent=1)
        if not args.check_only and not args.no_plot and plot(records, header, stem + ".png"):
            print(f"wrote {stem}.json and {stem}.png")
        else:
            print(f"wrote {stem}.json")
    for comm in comms.values():
        comm.Free()
    return 1 if bad else 0


def default_stem(ranks: int, args: argparse.Namespace) -> str:
    ident = bc.mpi_identity()
    where = f"hosts{args.hosts}_{args.rate or 'unlimited'}" if args.hosts else f"ns{args.node_size}"
    return args.out or os.path.join(bc.RESULTS, f"lanes_np{ranks}_{where}"
                                    + (f"_{ident['mpi_tag']}" if ident["mpi_tag"] else ""))


def merge_launches(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several launches: per point the median of the launches' medians (each
    launch's median kept in launch_median_us); ratios recomputed from the merged medians."""
    header = {**docs[0]["header"], "launches": len(docs)}
    records = []
    for i, first in enumerate(docs[0]["records"]):
        runs = [d["records"][i] for d in docs]
        rec = {**first, "wrong": sum(r["wrong"] for r in runs)}
        if "median_us" in first:
            meds = [r["median_us"] for r in runs]
            rec.update({"median_us": float(np.median(meds)), "launch_median_us": meds,
                        "min_us": min(r["min_us"] for r in runs), "max_us": max(r["max_us"] for r in runs),
                        "block_us": [b for r in runs for b in r["block_us"]]})
        records.append(rec)
    by = {(r["coll"], r["size"], r["impl"]): r for r in records}
    for r in records:
        if "median_us" in r:
            lead, mpi = by[(r["coll"], r["size"], "leader")], by[(r["coll"], r["size"], "mpi4py")]
            r["vs_leader"] = r["median_us"] / lead["median_us"] if lead["median_us"] > 0 else None
            r["vs_mpi"] = r["median_us"] / mpi["median_us"] if mpi["median_us"] > 0 else None
    return {"header": header, "records": records}


def run_on_hosts(args: argparse.Namespace, argv: list[str]) -> int:
    """This script on --np ranks spread over --hosts hosts of the multi-host test bed, --launches
    times (each on hosts made for it); several launches are merged into one result."""
    from pymcoll.testing.cluster import Cluster, ClusterUnavailable

    if args.np % args.hosts:
        print(f"--np={args.np} must be a multiple of --hosts={args.hosts}", file=sys.stderr)
        return 2
    stem = default_stem(args.np, args)
    parts = [stem] if args.launches == 1 else [f"{stem}.launch{k + 1}" for k in range(args.launches)]
    for k, part in enumerate(parts):
        if args.launches > 1:
            print(f"launch {k + 1} of {args.launches}", file=sys.stderr, flush=True)
        extra = [] if part == stem else ["--out", part, "--no-plot"]
        try:
            with Cluster(args.hosts, rate=args.rate) as cl:
                job = cl.launch([sys.executable, os.path.abspath(__file__), *argv, *extra, "--launched"],
                                args.np // args.hosts, mpiexec=args.mpiexec, capture_output=False)
                done = cl.finish(job, args.timeout)
        except ClusterUnavailable as exc:
            print(f"--hosts: {exc}", file=sys.stderr)
            return 2
        if done.returncode == 124:
            print(f"the run passed --timeout={args.timeout:g} s and was stopped", file=sys.stderr)
        if done.returncode != 0:
            return done.returncode
    if args.launches > 1:
        docs = []
        for part in parts:
            with open(part + ".json") as f:
                docs.append(json.load(f))
            os.remove(part + ".json")
        merged = merge_launches(docs)
        with open(stem + ".json", "w") as f:
            json.dump(merged, f, indent=1)
        for coll in args.colls:
            print(table(merged["records"], coll))
        if not args.check_only and not args.no_plot and plot(merged["records"], merged["header"], stem + ".png"):
            print(f"merged {args.launches} launches: wrote {stem}.json and {stem}.png")
        else:
            print(f"merged {args.launches} launches: wrote {stem}.json")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.hosts and not args.launched:
        return run_on_hosts(args, argv)
    if not args.launched and MPI.COMM_WORLD.size == 1 and args.np > 1:
        return launch_self(__file__, args.np, argv, mpiexec=args.mpiexec, timeout=args.timeout,
                           hint="raise --timeout or measure fewer sizes (--max-bytes) or collectives (--colls)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
