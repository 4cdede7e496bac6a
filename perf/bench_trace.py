"""What the always-on collective trace costs per call.

Two measurements, both in one launch:
  1. the record itself: `pymcoll.tracing.cost_ns()` times entering and
     ending a record (clock reads included) in a loop on a private ring;
  2. with and without the ring: two communicators over the same ranks, one
     created with PYMCOLL_TRACE_RING=0 (no trace) and one with the default
     ring, run the same small collectives in interleaved blocks
     (A B A B ...); the table gives the median latency of each and their
     difference in ns.

    python perf/bench_trace.py                 # 1 and 2 ranks, writes perf/results/trace_overhead.json
    python perf/bench_trace.py --np 4 --iters 2000

Run alone: another MPI job on the same cores changes every number.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = (("Barrier", 0), ("Allreduce", 8), ("Bcast", 8), ("Allgather", 8), ("Allreduce", 1024))


def worker(iters: int, blocks: int) -> None:
    """Runs under mpiexec: rank 0 prints one JSON line with the results."""
    import numpy as np
    from mpi4py import MPI

    import pymcoll
    from pymcoll import tracing

    world = MPI.COMM_WORLD
    tracing.setup(ring=0)
    plain = pymcoll.Comm(world)
    tracing.setup(ring=1024)
    traced = pymcoll.Comm(world)
    out = {"ranks": world.size, "record_cost_ns": [tracing.cost_ns(1_000_000) for _ in range(5)], "cases": []}
    for name, nbytes in CASES:
        count = max(1, nbytes // 8)
        a = np.arange(count, dtype=np.float64)
        b = np.empty(count * (world.size if name == "Allgather" else 1))

        def run(comm: pymcoll.Comm) -> float:
            fn = {"Barrier": lambda: comm.Barrier(), "Allreduce": lambda: comm.Allreduce(a, b),
                  "Bcast": lambda: comm.Bcast(a, root=0), "Allgather": lambda: comm.Allgather(a, b)}[name]
            world.Barrier()
            t0 = time.perf_counter_ns()
            for i in range(iters):
                a[0] = i
                fn()
            return (time.perf_counter_ns() - t0) / iters

        for comm in (plain, traced):  # warm-up
            run(comm)
        times: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(blocks):
            times["off"].append(run(plain))
            times["on"].append(run(traced))
        # The slowest rank decides a collective's time.
        med = {k: world.allreduce(statistics.median(v), op=MPI.MAX) for k, v in times.items()}
        mins = {k: world.allreduce(min(v), op=MPI.MAX) for k, v in times.items()}
        out["cases"].append({"collective": name, "bytes": nbytes, "iters": iters, "blocks": blocks,
                             "off_median_ns": med["off"], "on_median_ns": med["on"],
                             "off_min_ns": mins["off"], "on_min_ns": mins["on"],
                             "delta_median_ns": med["on"] - med["off"], "ratio": med["on"] / med["off"]})
    plain.Free()
    traced.Free()
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def launch(np_: int, iters: int, blocks: int) -> dict:
    cmd = ["mpiexec", "-n", str(np_), sys.executable, os.path.abspath(__file__), "--worker",
           "--iters", str(iters), "--blocks", str(blocks)]
    print(f"# {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"launch failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def table(res: dict) -> str:
    cost = statistics.median(res["record_cost_ns"])
    lines = [f"# {res['ranks']} rank(s); record cost (enter + end, on a private ring): {cost:.1f} ns "
             f"(median of {len(res['record_cost_ns'])} x 1e6)",
             f"# {'Collective':<12} {'Size':>6} {'off(us)':>9} {'on(us)':>9} {'delta(ns)':>10} {'on/off':>7}"]
    for c in res["cases"]:
        lines.append(f"  {c['collective']:<12} {c['bytes']:>6} {c['off_median_ns'] / 1e3:>9.3f} "
                     f"{c['on_median_ns'] / 1e3:>9.3f} {c['delta_median_ns']:>10.1f} {c['ratio']:>7.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, nargs="+", default=[1, 2], help="rank counts (default 1 2)")
    ap.add_argument("--iters", type=int, default=5000, help="calls per block (default 5000)")
    ap.add_argument("--blocks", type=int, default=11, help="interleaved blocks per side (default 11)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "trace_overhead.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.iters, args.blocks)
        return 0
    import pymcoll
    from mpi4py import MPI

    results = []
    for n in args.np:
        res = launch(n, args.iters, args.blocks)
        print(table(res), flush=True)
        results.append(res)
    meta = {"mpi": MPI.Get_library_version().splitlines()[0].strip(), "commit": pymcoll.COMMIT,
            "cores": os.cpu_count(), "host": platform.node(), "date": time.strftime("%Y-%m-%d")}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "runs": results}, fh, indent=1)
    print(f"# wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
