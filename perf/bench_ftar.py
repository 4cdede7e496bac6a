#!/usr/bin/env python3
"""Fault-tolerant allreduce (FTAR): bandwidth, stall on SIGKILL, catch-up overhead.

Three measurements, each against a reference taken in the same run
(docs/measure.md):

  bandwidth  failure-free allreduce (float32 sum) at 2 and 4 members over
             loopback. Every worker process holds an FTAR member per
             configuration (1 and 2 TCP streams per neighbour; and one with
             integrity=True at a few sizes) and a torch.distributed gloo
             process group; per size the implementations run in rotated,
             interleaved blocks (A B C, B C A, ...), medians of the slowest
             rank. Raw TCP between the same workers (one-way 1 and 4 streams
             rank 0 -> 1; the ring pattern, every worker to its right
             neighbour at once, 1 and 2 streams) is measured before the first
             size and after every size. nccl-tests columns; every result
             verified (#wrong).
             -> results/ftar_bandwidth.json, results/ftar_bandwidth.png
  stall      3 members (--members) run steps of an allreduce of 4 MiB; one
             is SIGKILLed inside the reduce-scatter (PYMCOLL_FTAR_FAULT=
             reduce_scatter:kill@K); the survivors' timestamps give
             detection (fault -> the failed allreduce returns), re-forming
             (-> begin_step of the retry returns) and redo (-> the retried
             allreduce and commit return); medians over --reps runs.
             -> results/ftar_stall.json
  catchup    3 members with a 64 MiB state; one is SIGKILLed and restarted
             (same replica id) --cycles times; it fetches the state from a
             donor while the others go on. Healthy replicas' step time while
             a replica heals vs normal steps of the same run.
             -> results/ftar_catchup.json

    python perf/bench_ftar.py                      # all three, defaults (about 70 s on 2 cores)
    python perf/bench_ftar.py bandwidth --members 2 --max-bytes 1M --blocks 3
    python perf/bench_ftar.py bandwidth --max-bytes 256M
    python perf/bench_ftar.py stall --members 4 --reps 5
    python perf/bench_ftar.py catchup --compute cpu --compute-ms 30

Every process starts with a hard time limit and dies with this script.
Progress goes to stderr, tables to stdout. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from pymcoll.cli.bench import doubling_sizes
from pymcoll.config import parse_bytes
from pymcoll.ftar.local_cluster import LocalCluster, LocalClusterError, LocalProcess

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perfutil import run_record, source_state  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
WORKER = HERE / "ftar_bench_worker.py"
MIB = 1 << 20


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    """An argparse type: bytes from '4K', '64M' (powers of 1024), more than 0."""
    try:
        value = parse_bytes(text, "size")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size {text!r} must be positive")
    return value


def fmt_size(n: int) -> str:
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def metadata(extra: dict[str, Any]) -> dict[str, Any]:
    """What was run: perfutil's run record (date, commit, versions, cores, load), the checkout's
    state, the installed build's commit and torch's version, then `extra`."""
    import pymcoll

    try:
        import torch

        torch_version: Optional[str] = torch.__version__
    except ImportError:
        torch_version = None
    return run_record(**source_state(), installed_build_commit=getattr(pymcoll, "COMMIT", None),
                      host=platform.node(), loadavg_before=list(os.getloadavg()), torch=torch_version,
                      transport="TCP over loopback (127.0.0.1)", **extra)


# ---------------------------------------------------------------- processes


def session(limit_s: float) -> LocalCluster:
    """A LocalCluster for one launch: every process has the hard time limit `limit_s` and dies with this script."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYMCOLL_")}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PYTHONPATH", None)  # the installed pymcoll, never the source tree's
    return LocalCluster(env=env, time_limit_s=max(1.0, limit_s))


def coordinator(s: LocalCluster, name: str, min_replicas: int) -> str:
    """Start a coordinator (heartbeat 100 ms, evict 2000 ms, join timeout 1000 ms); its address."""
    return s.start_coordinator(name=name, min_replicas=min_replicas, heartbeat_ms=100, evict_ms=2000,
                               join_timeout_ms=1000).address


def median(xs: list[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    log(f"# wrote {path}")


# ---------------------------------------------------------------- bandwidth


def run_bandwidth_launch(args: argparse.Namespace, n: int, sizes: list[int], mac_sizes: list[int]) -> dict[str, Any]:
    with session(args.timeout) as s:
        coords = []
        for k in args.streams:
            coords.append((f"ftar_s{k}", k, False))
        if mac_sizes:
            coords.append((f"ftar_s{args.streams[0]}_mac", args.streams[0], True))
        specs = []
        for name, k, integ in coords:
            addr = coordinator(s, f"coord-{name}", n)
            specs += ["--coord", f"{name}={k}:{int(integ)}:{addr}"]
        store = str(s.directory / "gloo-store")
        common = ["--members", str(n), "--store", store, *specs, "--sizes", ",".join(map(str, sizes)),
                  "--mac-sizes", ",".join(map(str, mac_sizes)), "--blocks", str(args.blocks),
                  "--target-ms", str(args.target_ms), "--chunk-bytes", str(args.chunk_bytes),
                  "--tcp-bytes", str(args.tcp_bytes), "--iters", str(args.iters or 0)]
        workers = [s.start(f"bw-{r}", [sys.executable, str(WORKER), "bw", "--rank", str(r), *common],
                           stderr="inherit" if r == 0 else "file") for r in range(n)]
        try:
            res = workers[0].wait_for(lambda e: e["ev"] == "result", args.timeout, "result")
        except LocalClusterError as exc:  # rank 0's stderr went to ours; show the others'
            raise LocalClusterError(f"{exc}\n" + "\n".join(w.report() for w in workers[1:])) from None
        for w in workers:
            try:
                w.wait(30)
            except LocalClusterError:
                pass
        return res["data"]


def bandwidth_rows(launch: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Adds algbw, busbw, vs_gloo and the fraction of raw TCP to each record; returns (records, tcp)."""
    n = launch["members"]
    tcp: dict[str, dict[str, float]] = {}
    for key in launch["tcp_rounds"][0]:
        vals = [r[key] for r in launch["tcp_rounds"]]
        tcp[key] = {"median_GBps": statistics.median(vals), "min_GBps": min(vals), "max_GBps": max(vals),
                    "rounds": len(vals), "GBps": vals}
    recs = launch["records"]
    gloo = {r["size"]: r for r in recs if r["impl"] == "gloo"}
    factor = 2 * (n - 1) / n
    for r in recs:
        t = r["median_us"] * 1e-6
        r["algbw_GBps"] = r["size"] / t / 1e9
        r["busbw_GBps"] = r["algbw_GBps"] * factor
        r["min_algbw_GBps"] = r["size"] / (r["min_us"] * 1e-6) / 1e9
        g = gloo.get(r["size"])
        r["vs_gloo"] = r["median_us"] / g["median_us"] if g else None
        streams = 1
        if r["impl"].startswith("ftar_s"):
            streams = int(r["impl"][6:].split("_")[0])
        ref = f"ring{streams}" if f"ring{streams}" in tcp else "ring1"
        r["tcp_ref"] = ref
        r["busbw_over_tcp"] = r["busbw_GBps"] / tcp[ref]["median_GBps"] if ref in tcp else None
    return recs, tcp


def bandwidth_table(n: int, recs: list[dict[str, Any]], tcp: dict[str, dict[str, float]], tcp_bytes: int) -> str:
    head = (f"# FTAR allreduce, {n} members over loopback; time = median over blocks (slowest rank); "
            f"busbw = algbw x 2(n-1)/n = {2 * (n - 1) / n:.2f}")
    raw = ("# raw TCP (" + fmt_size(tcp_bytes) + " per link, median GB/s): "
           + ", ".join(f"{k} {v['median_GBps']:.2f}" for k, v in tcp.items())
           + "  (uniK: rank 0 -> 1 on K streams; ringK: every member to its right neighbour at once)")
    cols = (f"# {'size':>10} {'count':>10} {'type':>5} {'redop':>5}  {'impl':<12} {'time(us)':>10} "
            f"{'algbw':>7} {'busbw':>7} {'#wrong':>6} {'vs_gloo':>7} {'bus/tcp':>7} {'call_med(us)':>12}")
    lines = [head, raw, cols]
    for r in recs:
        vs = f"{r['vs_gloo']:.2f}" if r["vs_gloo"] is not None and r["impl"] != "gloo" else "-"
        frac = f"{r['busbw_over_tcp']:.2f}" if r.get("busbw_over_tcp") is not None else "-"
        lines.append(f"  {r['size']:>10} {r['count']:>10} {r['type']:>5} {r['redop']:>5}  {r['impl']:<12} "
                     f"{r['median_us']:>10.1f} {r['algbw_GBps']:>7.3f} {r['busbw_GBps']:>7.3f} {r['wrong']:>6} "
                     f"{vs:>7} {frac:>7} {r['call_median_us']:>12.1f}")
    return "\n".join(lines)


def integrity_rows(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(r["impl"], r["size"]): r for r in recs}
    out = []
    for r in recs:
        if not r["impl"].endswith("_mac"):
            continue
        off = by.get((r["impl"].removesuffix("_mac"), r["size"]))
        if off:
            out.append({"members": r["members"], "size": r["size"], "streams": int(r["impl"][6:].split("_")[0]),
                        "off_us": off["median_us"], "on_us": r["median_us"],
                        "on_over_off": r["median_us"] / off["median_us"],
                        "off_busbw_GBps": off["busbw_GBps"], "on_busbw_GBps": r["busbw_GBps"]})
    return out


def plot_bandwidth(launches: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        log("matplotlib is not installed: no plot (pip install matplotlib)")
        return False
    fig, axes = plt.subplots(1, len(launches), figsize=(6.2 * len(launches), 4.6), squeeze=False)
    styles: dict[str, dict[str, Any]] = {"gloo": {"color": "tab:gray", "marker": "s"},
                                         "ftar_s1": {"color": "tab:blue", "marker": "o"},
                                         "ftar_s2": {"color": "tab:orange", "marker": "^"}}
    for ax, L in zip(axes[0], launches, strict=True):
        impls = sorted({r["impl"] for r in L["records"]})
        for impl in impls:
            rs = sorted((r for r in L["records"] if r["impl"] == impl), key=lambda r: r["size"])
            if impl == "gloo":
                label, style = "torch gloo", styles["gloo"]
            elif impl.endswith("_mac"):
                label = f"FTAR, {impl[6:].split('_')[0]} stream(s), integrity=True"
                style = {"color": "tab:blue", "marker": "x", "linestyle": "-."}
            else:
                label, style = f"FTAR, {impl[6:]} stream(s)", styles.get(impl, {"marker": "."})
            ax.plot([r["size"] for r in rs], [r["busbw_GBps"] for r in rs], label=label, **style)
        for i, (key, v) in enumerate(L["tcp"].items()):
            ax.axhline(v["median_GBps"], ls="--" if key.startswith("ring") else ":", lw=1,
                       color=["tab:green", "tab:red", "tab:purple", "tab:brown"][i % 4], label=f"raw TCP {key}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_size(round(v)) if v >= 1 else ""))
        ax.set_xlabel("bytes per member")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"allreduce float32, {L['members']} members, loopback")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log(f"# wrote {path}")
    return True


def cmd_bandwidth(args: argparse.Namespace) -> int:
    sizes = doubling_sizes(args.min_bytes, args.max_bytes)
    mac_sizes = [s for s in args.mac_sizes if args.min_bytes <= s <= args.max_bytes] if args.integrity else []
    meta = metadata({"benchmark": "ftar_bandwidth", "members": args.members, "sizes": sizes,
                     "integrity_sizes": mac_sizes, "streams": args.streams, "blocks": args.blocks,
                     "target_ms_per_block": args.target_ms, "chunk_bytes": args.chunk_bytes,
                     "tcp_bytes": args.tcp_bytes, "dtype": "float32", "op": "sum",
                     "method": "one process per member holding FTAR members and a gloo process group; per size "
                               "2 probe calls, iters/4 warm-up calls, then `blocks` timed blocks per "
                               "implementation in rotated order; one value per 4 KiB page written before every "
                               "call (not timed); only calls are timed; a block's time per call is the slowest "
                               "rank's; median over blocks; one verified call per implementation and size "
                               "(integer-valued inputs, exact sum)"})
    try:
        import torch.distributed as dist

        meta["gloo_available"] = dist.is_gloo_available()
    except ImportError:
        raise SystemExit("bandwidth needs torch (pip install torch) for the gloo reference") from None
    launches = []
    for n in args.members:
        log(f"# bandwidth: {n} members, sizes {fmt_size(sizes[0])}..{fmt_size(sizes[-1])}, "
            f"streams {args.streams}, {args.blocks} blocks")
        L = run_bandwidth_launch(args, n, sizes, mac_sizes)
        recs, tcp = bandwidth_rows(L)
        L["records"], L["tcp"] = recs, tcp
        L["integrity"] = integrity_rows(recs)
        launches.append(L)
        print(bandwidth_table(n, [r for r in recs], tcp, L["tcp_bytes"]), flush=True)
        ctl = [r["step_ctl_us"] for r in recs if "step_ctl_us" in r]
        L["step_ctl_us_median"] = median(ctl)
        if ctl:
            print(f"# FTAR control per step (begin_step + commit, once per block, not in the times above): "
                  f"{median(ctl):.0f} us median")
        if L["integrity"]:
            print(f"# integrity=True (MAC on data frames), {n} members: on/off of the median time")
            print(f"# {'size':>10} {'off(us)':>10} {'on(us)':>10} {'on/off':>7}")
            for r in L["integrity"]:
                print(f"  {r['size']:>10} {r['off_us']:>10.1f} {r['on_us']:>10.1f} {r['on_over_off']:>7.3f}")
        print(flush=True)
    meta["loadavg_after"] = list(os.getloadavg())
    out = Path(args.out or RESULTS / "ftar_bandwidth.json")
    write_json(out, {"meta": meta, "launches": [
        {"members": L["members"], "tcp": L["tcp"], "tcp_rounds": L["tcp_rounds"], "records": L["records"],
         "integrity": L["integrity"], "step_ctl_us_median": L["step_ctl_us_median"]} for L in launches]})
    if not args.no_plot:
        plot_bandwidth(launches, out.with_suffix(".png"))
    bad = sum(r["wrong"] for L in launches for r in L["records"])
    return 1 if bad else 0


# ---------------------------------------------------------------- replicas


def replica_cmd(addr: str, rid: str, number: int, extra: list[str]) -> list[str]:
    return [sys.executable, str(WORKER), "replica", "--coordinator", addr, "--id", rid, "--number", str(number),
            *extra]


def start_together(s: LocalCluster, addr: str, n: int, extra: list[str], env_of: Callable[[int], dict[str, str]],
                   prefix: str, extra_of: Callable[[int], list[str]] = lambda i: []) -> list[LocalProcess]:
    """Replicas prefix0..prefix{n-1} that take their first step together (the worker's --start-file)."""
    return s.start_together([(f"{prefix}{i}", replica_cmd(addr, f"{prefix}{i}", i, [*extra, *extra_of(i)]), env_of(i))
                             for i in range(n)])


def stall_rep(args: argparse.Namespace, rep: int) -> dict[str, Any]:
    n, k = args.members, args.kill_step
    with session(args.timeout) as s:
        addr = coordinator(s, "coord", n - 1)
        victim = n - 1
        extra = ["--grad-bytes", str(args.grad_bytes), "--compute-ms", str(args.compute_ms), "--steps",
                 str(k + args.after_steps), "--timeout", "20"]
        procs = start_together(s, addr, n, extra,
                               lambda i: {"PYMCOLL_FTAR_FAULT": f"{args.point}:kill@{k}"} if i == victim else {},
                               prefix="r")
        survivors = [p for i, p in enumerate(procs) if i != victim]
        for p in survivors:
            p.wait_for(lambda e: e["ev"] == "done", args.timeout, "done")
        vp = procs[victim]
        vp.wait(10)
        starts = [e for e in vp.events_of("ar_start") if e["step"] == k]
        if not starts:
            raise RuntimeError(f"the victim never started the allreduce of step {k}\n{vp.report()}")
        t_fault = starts[-1]["t"]
        per = []
        for p in survivors:
            steps = p.events_of("step")
            fails = [e for e in p.events_of("attempt") if e["step"] == k]
            ok = [e for e in steps if e["step"] == k]
            if not fails or not ok:
                raise RuntimeError(f"{p.name}: no failed attempt and retry at step {k}\n{p.report()}")
            normal = [e["t"] - e["t_bs"] for e in steps if 1 <= e["step"] < k]
            normal_comm = [e["t"] - e["t_ar"] for e in steps if 1 <= e["step"] < k]
            per.append({"name": p.name, "t_ar_failed": fails[0]["t_ar"], "t_detect": fails[0]["t"],
                        "failed_status": fails[0]["status"], "failed_phase": fails[0]["phase"],
                        "attempts": len(fails) + 1, "t_reform": ok[0]["t_bs_end"], "t_done": ok[0]["t"],
                        "retry_epoch": ok[0]["epoch"], "retry_n_contrib": ok[0]["n_contrib"],
                        "normal_step_ms": median(normal) * 1e3 if normal else None,
                        "normal_allreduce_commit_ms": median(normal_comm) * 1e3 if normal_comm else None,
                        "hash": p.events_of("done")[-1]["hash"]})
        t_detect = max(x["t_detect"] for x in per)
        t_reform = max(x["t_reform"] for x in per)
        t_done = max(x["t_done"] for x in per)
        rec = {"rep": rep, "members": n, "kill_step": k, "point": args.point,
               "victim_exit_after_fault_ms": (vp.exited_at - t_fault) * 1e3 if vp.exited_at else None,
               "survivors_start_after_fault_ms": (max(x["t_ar_failed"] for x in per) - t_fault) * 1e3,
               "detection_ms": (t_detect - t_fault) * 1e3, "reform_ms": (t_reform - t_detect) * 1e3,
               "redo_ms": (t_done - t_reform) * 1e3, "total_ms": (t_done - t_fault) * 1e3,
               "normal_step_ms": median([x["normal_step_ms"] for x in per if x["normal_step_ms"]]),
               "normal_allreduce_commit_ms": median([x["normal_allreduce_commit_ms"] for x in per
                                                     if x["normal_allreduce_commit_ms"]]),
               "survivors_equal_hash": len({x["hash"] for x in per}) == 1,
               "survivors": [{k2: (v - t_fault) * 1e3 if k2.startswith("t_") else v for k2, v in x.items()}
                             for x in per]}
        return rec


def cmd_stall(args: argparse.Namespace) -> int:
    meta = metadata({"benchmark": "ftar_stall", "members": args.members, "reps": args.reps,
                     "grad_bytes": args.grad_bytes, "compute_ms": args.compute_ms, "kill_step": args.kill_step,
                     "fault": f"PYMCOLL_FTAR_FAULT={args.point}:kill@{args.kill_step} on one replica",
                     "coordinator": "heartbeat 100 ms, evict 2000 ms, join timeout 1000 ms, min replicas n-1",
                     "definitions": {
                         "fault": "the killed replica's last event: the start of the allreduce in which it kills "
                                  "itself (at its first received reduce-scatter item), so the stall is, if "
                                  "anything, overstated",
                         "detection": "fault -> the last survivor's failed allreduce (or vote) returned",
                         "reform": "-> the last survivor's begin_step of the retry returned (new epoch)",
                         "redo": "-> the last survivor's retried allreduce and commit returned (same gradients)",
                         "total": "fault -> redo done"}})
    log(f"# stall: {args.members} members, {fmt_size(args.grad_bytes)} allreduce, {args.reps} reps, "
        f"{args.point}:kill@{args.kill_step}")
    reps = []
    for rep in range(args.reps):
        r = stall_rep(args, rep)
        reps.append(r)
        log(f"#   rep {rep}: detection {r['detection_ms']:.1f} ms, re-forming {r['reform_ms']:.1f} ms, "
            f"redo {r['redo_ms']:.1f} ms, total {r['total_ms']:.1f} ms")
    keys = ("detection_ms", "reform_ms", "redo_ms", "total_ms")
    summary = {k: {"median": median([r[k] for r in reps]), "min": min(r[k] for r in reps),
                   "max": max(r[k] for r in reps)} for k in keys}
    summary["normal_step_ms"] = median([r["normal_step_ms"] for r in reps])
    summary["normal_allreduce_commit_ms"] = median([r["normal_allreduce_commit_ms"] for r in reps])
    summary["all_survivors_equal_hash"] = all(r["survivors_equal_hash"] for r in reps)
    meta["loadavg_after"] = list(os.getloadavg())
    print(f"# stall on SIGKILL ({args.point}), {args.members} members, {fmt_size(args.grad_bytes)} float32 "
          f"allreduce per step, {args.reps} reps (ms; median [min..max])")
    print(f"# {'detection':>20} {'re-forming':>20} {'redo':>20} {'total':>20}")
    print("  " + " ".join(f"{summary[k]['median']:>7.1f} [{summary[k]['min']:.1f}..{summary[k]['max']:.1f}]"
                          .rjust(20) for k in keys))
    print(f"# normal step {summary['normal_step_ms']:.1f} ms (of which allreduce + commit "
          f"{summary['normal_allreduce_commit_ms']:.1f} ms); survivors' states equal: "
          f"{summary['all_survivors_equal_hash']}; target total < 1000 ms: "
          f"{'met' if summary['total_ms']['median'] < 1000 else 'NOT met'}\n", flush=True)
    write_json(Path(args.out or RESULTS / "ftar_stall.json"), {"meta": meta, "summary": summary, "reps": reps})
    return 0


def cmd_catchup(args: argparse.Namespace) -> int:
    n = args.members
    meta = metadata({"benchmark": "ftar_catchup", "members": n, "cycles": args.cycles,
                     "state_bytes": args.state_bytes, "grad_bytes": args.grad_bytes, "compute": args.compute,
                     "compute_ms": args.compute_ms, "normal_steps_between": args.normal_steps,
                     "publish": args.publish,
                     "coordinator": "heartbeat 100 ms, evict 2000 ms, join timeout 1000 ms, min replicas n-1",
                     "method": "replicas run begin_step, compute, allreduce of the gradients, commit; one replica "
                               "is SIGKILLed between `normal_steps` windows and restarted at once with the same "
                               "id; it contributes zeros while it fetches the state from a donor (which publishes "
                               "a copy of its state at each step it serves) and replays the updates committed "
                               "meanwhile. Step time of the healthy replicas = begin_step call to commit "
                               "return, compute included. normal: all members, nobody healing, same epoch as "
                               "the step before, first attempt; healing: a member heals (n_healing > 0)."})
    log(f"# catch-up: {n} members, state {fmt_size(args.state_bytes)}, gradients {fmt_size(args.grad_bytes)}, "
        f"compute {args.compute} {args.compute_ms} ms, {args.cycles} cycles")
    cpu_iters = 0
    if args.compute == "cpu":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from ftar_bench_worker import cpu_iters_for

        cpu_iters = cpu_iters_for(args.compute_ms)
        meta["compute_iters"] = cpu_iters
        meta["compute_note"] = (f"{cpu_iters} products of a 160x160 float32 matrix per step, {args.compute_ms:g} ms "
                                f"when run alone; {n} replicas share {os.cpu_count()} cores")
    with session(args.timeout) as s:
        addr = coordinator(s, "coord", n - 1)
        extra = ["--grad-bytes", str(args.grad_bytes), "--state-bytes", str(args.state_bytes),
                 "--compute-iters", str(cpu_iters), "--compute",
                 args.compute, "--compute-ms", str(args.compute_ms), "--timeout", "30", "--publish", args.publish,
                 "--stop-file", str(s.directory / "stop")]
        procs = start_together(s, addr, n, extra, lambda i: {}, prefix="c", extra_of=lambda i: ["--calibrate"])
        calib = [e for p in procs for e in p.events_of("calibration")]
        healthy, victim_id = procs[:-1], f"c{n - 1}"
        victims = [procs[-1]]
        kills = []

        def committed(p: LocalProcess) -> int:
            st = p.events_of("step")
            return st[-1]["step"] if st else -1

        def wait_steps(count: int) -> None:
            base = {p.name: committed(p) for p in healthy}
            end = time.monotonic() + args.timeout
            while any(committed(p) < base[p.name] + count for p in healthy):
                if time.monotonic() > end:
                    raise RuntimeError("the healthy replicas stopped committing\n"
                                       + "\n".join(p.report() for p in healthy))
                time.sleep(0.02)

        wait_steps(args.normal_steps + 2)
        for cycle in range(args.cycles):
            v = victims[-1]
            t_kill = time.monotonic()
            v.kill()
            new = s.start(f"{victim_id}-{cycle + 1}", replica_cmd(addr, victim_id, n - 1, extra))
            victims.append(new)
            healed = new.wait_for(lambda e: e["ev"] == "healed", args.timeout, "healed")
            fetched = [e for e in new.events_of("fetched") if e["ok"]]
            kills.append({"cycle": cycle, "t_kill": t_kill, "t_healed": healed["t"], "load_ms": healed.get("load_ms"),
                          "fetch_ms": (fetched[-1]["t"] - fetched[-1]["t0"]) * 1e3 if fetched else None,
                          "healed_from_step": healed["from_step"], "replayed_to": healed["step"]})
            log(f"#   cycle {cycle}: healed {(healed['t'] - t_kill) * 1e3:.0f} ms after the kill "
                f"(fetch {kills[-1]['fetch_ms'] or 0:.0f} ms)")
            wait_steps(args.normal_steps)
        stop_at = max(committed(p) for p in healthy) + 3
        (s.directory / "stop.tmp").write_text(str(stop_at))
        os.replace(s.directory / "stop.tmp", s.directory / "stop")
        finals = [p.wait_for(lambda e: e["ev"] == "done", 60, "done") for p in healthy + [victims[-1]]]
        for k, v in zip(kills, victims[1:], strict=True):  # the joiner's own view of its first steps
            k["joiner_events"] = [{f: (e[f] - k["t_kill"]) * 1e3 if f.startswith("t") and isinstance(e[f], float)
                                   else e[f] for f in e} for e in v.events if e.get("ev") != "ar_start"][:12]
        hashes = {f["hash"] for f in finals}
        steps_done = {f["step"] for f in finals}
        classes: dict[str, list[dict[str, Any]]] = {"normal": [], "healing": [], "healing_after_join": [],
                                                     "after_healing": [], "degraded": [], "other": []}
        windows: list[dict[str, Any]] = []  # per healthy replica and catch-up: its healing steps + the one after
        for p in healthy:
            failed_steps = {e["step"] for e in p.events_of("attempt")}
            prev_epoch, in_window = None, None
            for e in p.events_of("step"):
                d = {"replica": p.name, "step": e["step"], "ms": (e["t"] - e["t_bs"]) * 1e3,
                     "comm_ms": (e["t"] - e["t_ar"]) * 1e3, "begin_ms": (e["t_bs_end"] - e["t_bs"]) * 1e3,
                     "pub_ms": e["pub_ms"], "epoch": e["epoch"], "n": e["n"], "n_healing": e["n_healing"]}
                first = e["step"] not in failed_steps
                if e["step"] < 2:
                    cls = "other"
                elif e["n_healing"] > 0 and e["n"] == n:
                    cls = "healing"
                elif in_window is not None and e["n"] == n:
                    cls = "after_healing"  # the joiner loads the state and replays: it may come late
                elif e["n"] < n:
                    cls = "degraded"
                elif first and e["epoch"] == prev_epoch:
                    cls = "normal"
                else:
                    cls = "other"
                classes[cls].append(d)
                if cls == "healing" and e["epoch"] == prev_epoch:
                    classes["healing_after_join"].append(d)
                if cls == "healing":
                    if in_window is None:
                        in_window = {"replica": p.name, "steps": []}
                    in_window["steps"].append(d)
                elif in_window is not None:
                    if cls == "after_healing":
                        in_window["steps"].append(d)
                    windows.append(in_window)
                    in_window = None
                prev_epoch = e["epoch"]
    summary: dict[str, Any] = {}
    for cls, rows in classes.items():
        summary[cls] = {"steps": len(rows), "median_ms": median([r["ms"] for r in rows]),
                        "mean_ms": statistics.fmean([r["ms"] for r in rows]) if rows else None,
                        "median_comm_ms": median([r["comm_ms"] for r in rows]),
                        "median_pub_ms": median([r["pub_ms"] for r in rows]),
                        "median_ms_without_publish": median([r["ms"] - r["pub_ms"] for r in rows])}
    nm = summary["normal"]["median_ms"]
    for cls in ("healing", "healing_after_join", "after_healing", "degraded"):
        if summary[cls]["median_ms"] and nm:
            summary[cls]["extra_median_pct"] = (summary[cls]["median_ms"] / nm - 1) * 100
            summary[cls]["extra_mean_pct"] = (summary[cls]["mean_ms"] / summary["normal"]["mean_ms"] - 1) * 100
            summary[cls]["extra_without_publish_pct"] = (summary[cls]["median_ms_without_publish"] / nm - 1) * 100
    for w in windows:
        w["ms"] = sum(d["ms"] for d in w["steps"])
        w["extra_ms"] = w["ms"] - len(w["steps"]) * nm if nm else None
        w["extra_pct"] = (w["ms"] / (len(w["steps"]) * nm) - 1) * 100 if nm else None
    summary["windows"] = {"count": len(windows),
                          "steps_median": median([len(w["steps"]) for w in windows]),
                          "extra_ms_median": median([w["extra_ms"] for w in windows if w["extra_ms"] is not None]),
                          "extra_pct_median": median([w["extra_pct"] for w in windows if w["extra_pct"] is not None]),
                          "extra_pct_all": (sum(w["ms"] for w in windows)
                                            / (sum(len(w["steps"]) for w in windows) * nm) - 1) * 100
                          if windows and nm else None}
    summary["publish_state_alone_ms_median"] = median([v for e in calib for v in e["publish_ms"]])
    summary["resident_copy_ms_median"] = median([v for e in calib for v in e["resident_copy_ms"]])
    summary["fetch_ms_median"] = median([k["fetch_ms"] for k in kills if k["fetch_ms"] is not None])
    summary["kill_to_healed_ms_median"] = median([(k["t_healed"] - k["t_kill"]) * 1e3 for k in kills])
    summary["states_equal_at_end"] = len(hashes) == 1 and None not in hashes and len(steps_done) == 1
    meta["loadavg_after"] = list(os.getloadavg())
    print(f"# catch-up overhead, {n} members, state {fmt_size(args.state_bytes)}, allreduce "
          f"{fmt_size(args.grad_bytes)}, compute {args.compute} {args.compute_ms:g} ms, {args.cycles} cycles; "
          f"healthy replicas' step time (begin_step -> commit)")
    print(f"# {'steps of':<26} {'count':>5} {'median(ms)':>10} {'mean(ms)':>9} {'extra(med)':>10} "
          f"{'extra(mean)':>11} {'comm(ms)':>8} {'publish(ms)':>11} {'extra w/o publish':>17}")
    for cls, label in (("normal", "normal"), ("healing", "a replica healing"),
                       ("healing_after_join", "healing, join step excl."), ("after_healing", "first step after"),
                       ("degraded", "n-1 members (dead)")):
        r = summary[cls]
        if not r["steps"]:
            continue
        ex = f"{r['extra_median_pct']:+.1f}%" if "extra_median_pct" in r else "-"
        exm = f"{r['extra_mean_pct']:+.1f}%" if "extra_mean_pct" in r else "-"
        exp = f"{r['extra_without_publish_pct']:+.1f}%" if "extra_without_publish_pct" in r else "-"
        print(f"  {label:<26} {r['steps']:>5} {r['median_ms']:>10.1f} {r['mean_ms']:>9.1f} {ex:>10} {exm:>11} "
              f"{r['median_comm_ms']:>8.1f} {r['median_pub_ms']:>11.1f} {exp:>17}")
    W = summary["windows"]
    if W["count"]:
        print(f"# catch-up window (the healing steps and the one after), per healthy replica and catch-up: "
              f"{W['steps_median']:g} steps, {W['extra_ms_median']:.0f} ms more than normal steps "
              f"({W['extra_pct_median']:+.1f}% median; {W['extra_pct_all']:+.1f}% over all {W['count']} windows)")
    if summary["publish_state_alone_ms_median"] is not None:
        print(f"# before the steps, alone: publish_state of the {fmt_size(args.state_bytes)} state "
              f"{summary['publish_state_alone_ms_median']:.1f} ms, a copy of it into a resident buffer "
              f"{summary['resident_copy_ms_median']:.1f} ms (medians)")
    print(f"# fetch of the state {summary['fetch_ms_median']:.0f} ms (median), kill -> healed "
          f"{summary['kill_to_healed_ms_median']:.0f} ms (restart included); all states equal at the end: "
          f"{summary['states_equal_at_end']}; {os.cpu_count()} cores shared by {n} replicas\n", flush=True)
    write_json(Path(args.out or RESULTS / "ftar_catchup.json"),
               {"meta": meta, "summary": summary, "cycles": kills, "windows": windows, "steps": classes})
    return 0 if summary["states_equal_at_end"] else 1


# ---------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")

    def common(q: argparse.ArgumentParser, timeout: float) -> None:
        q.add_argument("--out", default=None, help="results JSON path (default perf/results/ftar_<name>.json)")
        q.add_argument("--timeout", type=float, default=timeout, help=f"seconds before a launch is stopped "
                                                                       f"(default {timeout:g})")

    b = sub.add_parser("bandwidth", help="failure-free bus bandwidth vs gloo and raw TCP")
    b.add_argument("--members", type=lambda t: [int(x) for x in t.split(",")], default=[2, 4],
                   help="member counts, comma-separated (default 2,4)")
    b.add_argument("--min-bytes", type=parse_size, default=4 << 10, help="smallest size (default 4K)")
    b.add_argument("--max-bytes", type=parse_size, default=64 << 20, help="largest size (default 64M; 256M once)")
    b.add_argument("--streams", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2],
                   help="FTAR streams per neighbour to compare (default 1,2)")
    b.add_argument("--mac-sizes", type=lambda t: [parse_size(x) for x in t.split(",")],
                   default=[64 << 10, 1 << 20, 16 << 20, 64 << 20], help="sizes of the integrity=True runs")
    b.add_argument("--no-integrity", dest="integrity", action="store_false", help="skip integrity=True")
    b.add_argument("--blocks", type=int, default=7, help="timed blocks per implementation and size (default 7)")
    b.add_argument("--target-ms", type=float, default=25.0, help="time per block (default 25 ms)")
    b.add_argument("--iters", type=int, default=0, help="calls per block (default: from --target-ms)")
    b.add_argument("--chunk-bytes", type=int, default=256 * 1024, help="FTAR pipelining chunk (default 256 KiB)")
    b.add_argument("--tcp-bytes", type=parse_size, default=64 << 20, help="bytes per raw TCP transfer (64M)")
    b.add_argument("--no-plot", action="store_true")
    common(b, 1200.0)

    st = sub.add_parser("stall", help="stall on SIGKILL: detection, re-forming, redo")
    st.add_argument("--members", type=int, default=3)
    st.add_argument("--reps", type=int, default=5)
    st.add_argument("--grad-bytes", type=parse_size, default=4 << 20)
    st.add_argument("--compute-ms", type=float, default=20.0, help="sleep per step before the allreduce")
    st.add_argument("--kill-step", type=int, default=6)
    st.add_argument("--after-steps", type=int, default=4, help="steps run after the killed one")
    st.add_argument("--point", choices=("reduce_scatter", "allgather"), default="reduce_scatter")
    common(st, 120.0)

    c = sub.add_parser("catchup", help="healthy replicas' step time while a replica catches up")
    c.add_argument("--members", type=int, default=3)
    c.add_argument("--cycles", type=int, default=4, help="kill/restart cycles (default 4)")
    c.add_argument("--normal-steps", type=int, default=15, help="steps between cycles (default 15)")
    c.add_argument("--state-bytes", type=parse_size, default=64 << 20)
    c.add_argument("--grad-bytes", type=parse_size, default=4 << 20)
    c.add_argument("--compute", choices=("sleep", "cpu"), default="sleep")
    c.add_argument("--compute-ms", type=float, default=50.0)
    c.add_argument("--publish", choices=("every", "once"), default="every",
                   help="donors publish the state at every step a replica heals (as pymcoll.ftar.training "
                        "does; default) or once per healing episode")
    common(c, 300.0)
    if not argv:
        return argparse.Namespace(cmd=None)
    a = p.parse_args(argv)
    if a.cmd is None:
        p.error("name a measurement (bandwidth, stall, catchup) or give no arguments for all three")
    return a


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    cmds = {"bandwidth": cmd_bandwidth, "stall": cmd_stall, "catchup": cmd_catchup}
    if a.cmd is not None:
        return cmds[a.cmd](a)
    rc = 0
    for name in ("bandwidth", "stall", "catchup"):
        rc |= cmds[name](parse_args([name]))
    return rc


if __name__ == "__main__":
    sys.exit(main())
