#!/usr/bin/env python3
"""The preload library against the plain MPI, in C, side by side in one launch.

Builds perf/c/bench_pmpi.c with the MPI's mpicc and runs it under
``LD_PRELOAD`` of libpymcoll_pmpi.so: every collective and size alternates
blocks of MPI_X (the preload library, i.e. pymcoll's core) and PMPI_X (the
MPI library itself), warm-up first, the slowest rank's time per call per
block, medians over the blocks, the send buffer changed before every call
and one result per side verified in full. ``--control`` runs the same
binary without the preload (both sides are the MPI: the ratios then show
the noise of the measurement).

  python perf/bench_pmpi.py                        # 2 ranks, 8 B .. 1 MiB, every collective
  python perf/bench_pmpi.py --np 4 --colls allreduce,bcast --max-bytes 64K --control

Writes perf/results/pmpi_c_np<N>_<mpi>.json and .png; prints OSU-style tables
with nccl-tests bandwidth columns (Avg/Min/Max over the blocks; time = the
median, from which algbw and busbw come) and vs_ref = preload median / MPI
median (< 1: the preload library is faster).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # perfutil, also under python -P
from perfutil import plotter  # noqa: E402

SOURCE = HERE / "c" / "bench_pmpi.c"
COLLS = ("barrier", "bcast", "allreduce", "reduce", "allgather", "alltoall", "gather", "scatter",
         "reduce_scatter_block", "scan")
# nccl-tests' bus bandwidth factors (docs/measure.md); gather/scatter as allgather.
BUSBW = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
         "alltoall": lambda n: (n - 1) / n, "reduce_scatter_block": lambda n: (n - 1) / n,
         "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
         "bcast": lambda n: 1.0, "reduce": lambda n: 1.0, "scan": lambda n: 1.0, "barrier": lambda n: 0.0}


def parse_bytes(text: str, name: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*", text)
    if not m:
        raise SystemExit(f"{name}={text!r} is not a size; use bytes or a K/M/G suffix, e.g. 64K")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--colls", default="all", help="comma list of " + ",".join(COLLS) + " (default all)")
    ap.add_argument("--min-bytes", default="8", help="smallest message per rank (default 8)")
    ap.add_argument("--max-bytes", default="1M", help="largest message per rank (default 1M)")
    ap.add_argument("--blocks", type=int, default=10, help="timed blocks per side and size (default 10)")
    ap.add_argument("--block-ms", type=float, default=20.0, help="target length of one block (default 20 ms)")
    ap.add_argument("--control", action="store_true", help="also run without the preload (MPI against itself)")
    ap.add_argument("--out", default=None, help="output stem (default perf/results/pmpi_c_np<N>_<mpi>)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per launch (default 3600)")
    args = ap.parse_args(argv)
    if args.colls != "all":
        bad = [c for c in args.colls.split(",") if c not in COLLS]
        if bad:
            ap.error(f"--colls: unknown {', '.join(bad)}; choose from {', '.join(COLLS)}")
    args.min = parse_bytes(args.min_bytes, "--min-bytes")
    args.max = parse_bytes(args.max_bytes, "--max-bytes")
    return args


def mpi_flavor() -> str:
    out = subprocess.run(["mpiexec", "--version"], capture_output=True, text=True, timeout=60)
    return "openmpi" if "open mpi" in (out.stdout + out.stderr).lower() else "mpich"


def mpi_version() -> str:
    from mpi4py import MPI

    return " ".join(MPI.Get_library_version().splitlines()[0].replace("Version:", "").split())


def build(workdir: Path) -> Path:
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        raise SystemExit("mpicc not found on PATH: install the MPI's compiler wrapper (e.g. pip install mpich)")
    exe = workdir / "bench_pmpi"
    subprocess.run([mpicc, "-std=c11", "-O2", "-o", str(exe), str(SOURCE)], check=True)
    return exe


def launch(exe: Path, args: argparse.Namespace, preload: Optional[Path]) -> list[dict[str, Any]]:
    """Runs the benchmark; its progress goes to stderr as it runs, its records come back."""
    cmd = ["mpiexec", "-n", str(args.np)]
    env = dict(os.environ)
    if mpi_flavor() == "openmpi":
        cmd += ["--oversubscribe", "--bind-to", "none"]
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        if preload:
            cmd += ["-x", f"LD_PRELOAD={preload}"]
    elif preload:
        cmd += ["-genv", "LD_PRELOAD", str(preload)]
    cmd += [str(exe), args.colls, str(args.min), str(args.max), str(args.blocks), str(args.block_ms)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def table(records: list[dict[str, Any]], coll: str, ranks: int) -> str:
    """OSU latency columns, nccl-tests bandwidth columns, and the ratio."""
    rows = [r for r in records if r["coll"] == coll]
    by = {(r["bytes"], r["impl"]): r for r in rows}
    out = [f"# {coll}: preload (pymcoll core) vs MPI, {ranks} ranks",
           f"# {'size':>9} {'count':>9} {'type':>6} {'redop':>5} {'root':>4} "
           f"{'Avg(us)':>9} {'Min(us)':>9} {'Max(us)':>9} {'Iters':>6} {'time(us)':>9} {'algbw':>8} {'busbw':>8} "
           f"{'#wrong':>6} {'mpi(us)':>9} {'vs_ref':>7}"]
    factor = BUSBW[coll](ranks)
    for size in sorted({r["bytes"] for r in rows}):
        a, b = by.get((size, "pymcoll")), by.get((size, "mpi"))
        if a is None or b is None:
            continue
        algbw = size / (a["median_us"] * 1e-6) / 1e9 if a["median_us"] > 0 else 0.0
        redop = "sum" if coll in ("allreduce", "reduce", "reduce_scatter_block", "scan") else "none"
        root = "0" if coll in ("bcast", "reduce", "gather", "scatter") else "-1"
        out.append(f"  {size:>9} {a['count']:>9} {'float':>6} {redop:>5} {root:>4} {a['avg_us']:9.2f} "
                   f"{a['min_us']:9.2f} {a['max_us']:9.2f} {a['iters']:>6} {a['median_us']:9.2f} {algbw:8.3f} "
                   f"{algbw * factor:8.3f} "
                   f"{a['wrong'] + b['wrong']:>6} {b['median_us']:9.2f} {a['median_us'] / b['median_us']:7.2f}")
    return "\n".join(out)


@plotter("bench_pmpi")
def plot(plt: Any, records: list[dict[str, Any]], header: dict[str, Any]) -> Any:
    colls = [c for c in COLLS if c != "barrier" and any(r["coll"] == c for r in records)]
    if not colls:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for coll in colls:
        rows = sorted((r for r in records if r["coll"] == coll), key=lambda r: r["bytes"])
        sizes = sorted({r["bytes"] for r in rows})
        med = {(r["bytes"], r["impl"]): r["median_us"] for r in rows}
        ratio = [med[(s, "pymcoll")] / med[(s, "mpi")] for s in sizes if (s, "mpi") in med and (s, "pymcoll") in med]
        line, = axes[0].plot(sizes[:len(ratio)], ratio, marker="o", label=coll)
        axes[1].plot(sizes, [med.get((s, "pymcoll"), float("nan")) for s in sizes], marker="o",
                     color=line.get_color(), label=f"{coll} preload")
        axes[1].plot(sizes, [med.get((s, "mpi"), float("nan")) for s in sizes], linestyle="--",
                     color=line.get_color(), label=f"{coll} MPI")
    axes[0].axhline(1.0, color="black", linewidth=0.8)
    axes[0].set(xscale="log", xlabel="message per rank (bytes)", ylabel="preload / MPI (median time)",
                title="ratio (< 1: the preload library is faster)")
    axes[1].set(xscale="log", yscale="log", xlabel="message per rank (bytes)", ylabel="time per call (us)",
                title="latency")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle(f"C through LD_PRELOAD vs plain MPI: {header['ranks']} ranks, {header['mpi']}, {header['date']}")
    return fig


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from pymcoll.preload import library_path

    lib = library_path()
    header = {
        "benchmark": "pmpi_c", "date": dt.date.today().isoformat(), "ranks": args.np, "mpi": mpi_version(),
        "cores": os.cpu_count(), "oversubscribed": args.np > (os.cpu_count() or 1), "host": platform.node(),
        "commit": subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                 text=True).stdout.strip() or "unknown",
        "blocks": args.blocks, "block_ms": args.block_ms, "type": "float",
        "reference": "PMPI_X of the same MPI in the same process (MPI_X is the preload library)",
    }
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        records = launch(exe, args, lib)
        control = launch(exe, args, None) if args.control else []
    stem = Path(args.out) if args.out else HERE / "results" / f"pmpi_c_np{args.np}_{mpi_flavor()}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    for coll in COLLS:
        if any(r["coll"] == coll for r in records):
            print(table(records, coll, args.np))
            if control:
                print(table(control, coll, args.np).replace("preload (pymcoll core) vs MPI", "control: MPI vs MPI"))
            print()
    wrong = sum(r["wrong"] for r in records + control)
    with open(f"{stem}.json", "w", encoding="utf-8") as fh:
        json.dump({"header": header, "records": records, "control": control}, fh, indent=1)
    plotted = plot(records, header, Path(f"{stem}.png"))
    print(f"wrote {stem}.json" + (f" and {stem}.png" if plotted else ""), file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
