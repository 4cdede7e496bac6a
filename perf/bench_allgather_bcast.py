#!/usr/bin/env python3
"""Allgather and Bcast: pymcoll.Comm against the MPI's own collectives, 8 B to 1 MiB.

Both sides are called through mpi4py on the same communicator (pymcoll.Comm
and its ``.mpi``), interleaved block by block, with the method of
``python -m pymcoll bench`` (whose functions this script uses; see
docs/measure.md). Writes, on rank 0:

    perf/results/allgather_bcast.json   [header, one record per size and implementation]
    perf/results/allgather_bcast.png    latency vs size (log-log) and vs_ref

Runs other than the default 2 ranks on real nodes get their own file names
(allgather_bcast_np4.json, allgather_bcast_np4_ns2.json, ...). Started
without mpiexec, it starts itself under ``mpiexec -n NP``. Examples:

    python perf/bench_allgather_bcast.py
    python perf/bench_allgather_bcast.py --np 4
    python perf/bench_allgather_bcast.py --np 4 --node-size 2
    mpiexec -n 3 python perf/bench_allgather_bcast.py --max-bytes 64K
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Sequence

from pymcoll.cli import bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perfutil import source_state  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
COLLS = ("allgather", "bcast")


def default_stem(np_: int, node_size: Optional[int], colls: Sequence[str] = COLLS) -> str:
    """Result file name without extension: 'allgather_bcast' for 2 ranks on real nodes
    (the collectives joined by '_')."""
    stem = "_".join(colls)
    if np_ != 2 or node_size:
        stem += f"_np{np_}"
    if node_size:
        stem += f"_ns{node_size}"
    return stem


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Options of this script (see --help)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to start when not under mpiexec (default 2)")
    p.add_argument("--node-size", type=int, default=None,
                   help="virtual nodes of this many consecutive ranks (default: real nodes)")
    p.add_argument("--min-bytes", default="8", help="smallest size, a power of two (default 8)")
    p.add_argument("--max-bytes", default="1M", help="largest size, a power of two (default 1M)")
    p.add_argument("--iters", type=int, default=None, help="calls per block (default: scaled with size)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls per implementation and size")
    p.add_argument("--blocks", type=int, default=10, help="timed blocks per implementation (default 10)")
    p.add_argument("--out", default=None,
                   help="path of the results without extension "
                        "(default perf/results/allgather_bcast[_npN][_nsK])")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--mpiexec", default=None, help="mpiexec to start the ranks with")
    p.add_argument("--timeout", type=float, default=bench.DEFAULT_TIMEOUT_S,
                   help=f"seconds before a self-started job is stopped (default {bench.DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--colls", default=",".join(COLLS),
                   help=f"comma list of collectives (default {','.join(COLLS)}; also allreduce, barrier)")
    p.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.coll_list = tuple(c.strip() for c in args.colls.split(",") if c.strip())
    bad = [c for c in args.coll_list if c not in bench.COLLECTIVES]
    if bad or not args.coll_list:
        p.error(f"--colls: unknown {bad}; choose from {', '.join(bench.COLLECTIVES)}")
    args.root = 0
    return args


def plot(header: dict[str, Any], records: Sequence[dict[str, Any]], path: str) -> bool:
    """Latency vs size (log-log) of both implementations, vs_ref on a second axis.

    Returns False (and says why on stderr) when matplotlib is not installed.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib, then run again)",
              file=sys.stderr)
        return False
    colls = header["colls"]
    fig, axes = plt.subplots(1, len(colls), figsize=(6.2 * len(colls), 4.6), squeeze=False)
    for ax, coll in zip(axes[0], colls):
        rows = bench.paired_rows(records, coll)
        sizes = [r["size"] for r in rows]
        ax.loglog(sizes, [r["pymcoll_us"] for r in rows], "o-", color="tab:blue", label="pymcoll (median)")
        ax.loglog(sizes, [r["mpi_us"] for r in rows], "s-", color="tab:orange", label="mpi4py / MPI (median)")
        ax.loglog(sizes, [r["min_pymcoll_us"] for r in rows], ".", color="tab:blue", alpha=0.5,
                  label="pymcoll (min)")
        ax.loglog(sizes, [r["min_mpi_us"] for r in rows], ".", color="tab:orange", alpha=0.5,
                  label="mpi4py (min)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes" + (", whole receive buffer)" if coll == "allgather" else ")"))
        ax.set_ylabel("time per call (us, max over ranks)")
        ax.set_title(f"{bench.TITLES[coll]}, {header['ranks']} ranks"
                     + (f", virtual nodes of {header['node_size']}" if header.get("node_size") else ""))
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
        ratio_ax = ax.twinx()
        ratios = [r["vs_ref"] for r in rows]
        ratio_ax.plot(sizes, ratios, "d--", color="tab:green", label="vs_ref (right axis)")
        ratio_ax.axhline(1.0, color="tab:green", lw=0.8, alpha=0.5)
        if ratios and max(ratios) / max(min(ratios), 1e-9) > 8:
            ratio_ax.set_yscale("log", base=2)
            ratio_ax.yaxis.set_major_formatter(plain)
        else:
            ratio_ax.set_ylim(0, max([1.2, *ratios]) * 1.15)
        ratio_ax.set_ylabel("vs_ref = pymcoll / mpi median (< 1: pymcoll faster)", color="tab:green")
        lines = ax.get_legend_handles_labels()
        more = ratio_ax.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="best", framealpha=0.85)
    mpi = " ".join(header["mpi"].split()).replace("Version: ", "")
    fig.suptitle(f"pymcoll {header['pymcoll']} ({header.get('source_commit') or header['commit']}) vs "
                 f"{mpi}; {header['cores']} cores, "
                 f"oversubscribed {'yes' if header['oversubscribed'] else 'no'}; "
                 f"{header['date'][:10]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark (starting mpiexec if needed); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        _, sizes = bench.check_arguments(args)
    except ValueError as exc:
        print(f"{os.path.basename(__file__)}: {exc}", file=sys.stderr)
        return 2
    if not args.launched and not bench.is_launched():
        program = [sys.executable, os.path.abspath(__file__), *argv, "--launched"]
        try:
            return bench.run_under_mpiexec(args.np, program, timeout=args.timeout, mpiexec=args.mpiexec)
        except (FileNotFoundError, ValueError) as exc:
            print(f"{os.path.basename(__file__)}: {exc}", file=sys.stderr)
            return 2

    from mpi4py import MPI

    import pymcoll

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    ranks = world.Get_size()
    if ranks != args.np and rank == 0:
        print(f"note: mpiexec started {ranks} ranks; --np={args.np} ignored", file=sys.stderr)
    stem = args.out or os.path.join(RESULTS, default_stem(ranks, args.node_size, args.coll_list))
    comm = pymcoll.Comm(world, node_size=args.node_size)
    try:
        header = bench.describe_run(
            comm, benchmark="perf/bench_allgather_bcast.py", colls=list(args.coll_list), sizes=sizes,
            iters=args.iters, warmup=args.warmup, blocks=args.blocks, root=0)
        if rank == 0:
            header.update(source_state())
            print(bench.format_header(header), flush=True)
        records = bench.run_benchmark(comm, args.coll_list, sizes, iters=args.iters, warmup=args.warmup,
                                      blocks=args.blocks, root=0,
                                      progress=bench.progress_printer("bench_allgather_bcast"))
    finally:
        comm.Free()
    if rank != 0:
        return 0
    for coll in args.coll_list:
        print("\n" + bench.format_table(records, coll))
    bench.write_json(stem + ".json", header, records)
    print(f"\n# wrote {stem}.json")
    if not args.no_plot and plot(header, records, stem + ".png"):
        print(f"# wrote {stem}.png")
    wrong = sum(r["wrong"] for r in records)
    if wrong:
        print(f"{wrong} wrong elements in verified calls (see #wrong)", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
