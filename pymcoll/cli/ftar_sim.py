"""Effective training time (ETTR) of a training run under failures, synchronous against FT-HSDP.

Simulates the run (pymcoll.ftar.simulate) with each recovery policy and prints its ETTR next to
the model's closed form and the first-order accounting (1 - failure rate x cost per failure):

    python -m pymcoll ftar-sim --paper                  # FT-HSDP's setting, two lines
    python -m pymcoll ftar-sim --gpus 16384 --replicas 8 --per-server-day 0.0064
    python -m pymcoll ftar-sim --mtbf-min 30 --weibull 0.7 --rack-fraction 0.1 --json out.json
    python -m pymcoll ftar-sim --plot ettr_scale.png    # ETTR against scale, 1K to 200K GPUs
    python -m pymcoll ftar-sim --calibrate perf/results --model-gb 1000 --link-gbps 100 --restart-min 7

With --calibrate, FT-HSDP's stall and catch-up come from FTAR runs measured on this machine
(pymcoll.ftar.calibration), scaled to the job by stated rules; each input's source is printed.

Times are in minutes. Failures during a recovery: a synchronous restart starts again; an
FT-HSDP stall absorbs them (their replicas go out, the stall does not grow); a replica that
fails again while out restarts its recovery.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import asdict
from typing import Any, Optional

HELP = "effective training time under failures: synchronous restarts vs FT-HSDP (simulation and closed form)"

MIN = 60.0
# FT-HSDP's scale and failure rate: a failure every 18 minutes at 100,000 GPUs on 8-GPU servers.
PAPER_PER_SERVER_DAY = 1440.0 / 18.0 / 12_500


def _number(low: float, name: str, *, integer: bool = False, above: bool = False) -> Any:
    def parse(text: str) -> Any:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: expected {'an integer' if integer else 'a number'}, "
                                             f"got {text!r}") from None
        if value < low or (above and value == low) or value != value:
            raise argparse.ArgumentTypeError(f"{name}={text}: expected a value {'>' if above else '>='} {low:g}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``python -m pymcoll ftar-sim``."""
    parser.add_argument("--paper", action="store_true",
                        help="FT-HSDP's inputs (100K GPUs, a failure every 18 min; synchronous: 10 min lost per "
                             "failure; FT-HSDP: 12 replicas, 3 min stall, 7 min with the failed replica out); "
                             "prints two lines")
    job = parser.add_argument_group("the job")
    job.add_argument("--gpus", type=_number(1, "--gpus", integer=True), default=100_000)
    job.add_argument("--gpus-per-server", type=_number(1, "--gpus-per-server", integer=True), default=8)
    job.add_argument("--replicas", type=_number(1, "--replicas", integer=True), default=12)
    job.add_argument("--step-s", type=_number(0, "--step-s"), default=0.0,
                     help="seconds per training step (the interrupted step is redone after a stall)")
    job.add_argument("--servers-per-rack", type=_number(1, "--servers-per-rack", integer=True), default=16)
    fail = parser.add_argument_group("failures (default: --per-server-day that makes 18 min at 100K GPUs)")
    rate = fail.add_mutually_exclusive_group()
    rate.add_argument("--mtbf-min", type=_number(0, "--mtbf-min", above=True),
                      help="the job's mean time between failures")
    rate.add_argument("--per-server-day", type=_number(0, "--per-server-day", above=True),
                      help=f"failures per server and day (default {PAPER_PER_SERVER_DAY:.4g})")
    fail.add_argument("--weibull", type=_number(0, "--weibull", above=True), metavar="SHAPE",
                      help="Weibull inter-arrival times of this shape instead of exponential")
    fail.add_argument("--rack-fraction", type=_number(0, "--rack-fraction"), default=0.0,
                      help="share of failures that take a whole rack")
    sync = parser.add_argument_group("synchronous recovery")
    sync.add_argument("--sync-restart-min", type=_number(0, "--sync-restart-min"), default=10.0,
                      help="minutes from a failure until the job trains again (default 10)")
    sync.add_argument("--checkpoint-interval-min", type=_number(0, "--checkpoint-interval-min"), default=0.0,
                      help="minutes of training between checkpoints (0: none modelled, no work lost)")
    sync.add_argument("--checkpoint-cost-min", type=_number(0, "--checkpoint-cost-min"), default=0.0,
                      help="minutes a checkpoint blocks training (both policies)")
    ft = parser.add_argument_group("FT-HSDP recovery")
    ft.add_argument("--stall-min", type=_number(0, "--stall-min"), default=None,
                    help="minutes every replica stalls for the quorum change (default 3)")
    ft.add_argument("--restart-min", type=_number(0, "--restart-min"), default=None,
                    help="minutes until the failed replica runs again (default 7; with --calibrate: the "
                         "restart measured there, which has no rescheduling in it)")
    ft.add_argument("--catchup-min", type=_number(0, "--catchup-min"), default=None,
                    help="minutes until a restarted replica has caught up (default 0)")
    ft.add_argument("--spares", type=_number(0, "--spares", integer=True), default=0,
                    help="spare replicas ready to take a failed one's place")
    ft.add_argument("--spare-join-min", type=_number(0, "--spare-join-min"), default=None,
                    help="minutes until a spare counts (default: --catchup-min)")
    cal = parser.add_argument_group("FT-HSDP recovery calibrated from measured FTAR runs")
    cal.add_argument("--calibrate", metavar="DIR",
                     help="derive the stall and the catch-up from the ftar_stall*.json and ftar_catchup*.json that "
                          "perf/bench_ftar.py wrote in DIR (e.g. perf/results); prints where each input came from")
    cal.add_argument("--model-gb", type=_number(0, "--model-gb", above=True),
                     help="GB of a replica's state a restarted replica fetches (parameters and optimizer state; "
                          "needed with --calibrate), split over the replica's servers")
    cal.add_argument("--link-gbps", type=_number(0, "--link-gbps", above=True),
                     help="each server's link, Gbit/s (default: the fetch rate measured in DIR)")
    cal.add_argument("--evict-s", type=_number(0, "--evict-s", above=True),
                     help="the coordinator's eviction deadline, seconds: the detection of a host that dies "
                          "silently (default: that of the measured runs' coordinator)")
    cal.add_argument("--process-failures", action="store_true",
                     help="failures are crashing processes whose sockets close: detection as measured, not "
                          "the eviction deadline")
    ft.add_argument("--restart-drag", type=_number(0, "--restart-drag"), default=0.0,
                    help="share of the others' throughput a restarting replica takes, while it restarts "
                         "(default 0: replicas on hosts of their own)")
    ft.add_argument("--min-replicas", type=_number(1, "--min-replicas", integer=True), default=1,
                    help="the coordinator's quorum minimum: with fewer replicas running, nobody steps (default 1)")
    run = parser.add_argument_group("the simulation")
    run.add_argument("--days", type=_number(0, "--days", above=True), default=1000.0,
                     help="simulated wall time (default 1000 days)")
    run.add_argument("--seed", type=_number(0, "--seed", integer=True), default=0)
    run.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    run.add_argument("--plot", metavar="PNG", help="plot ETTR against scale (1K to 200K GPUs, the same "
                                                   "per-server rate) for both policies")


def _inputs(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, Any]:
    """The job, the failures, both policies and the calibration (None without --calibrate)."""
    from ..ftar import simulate as sim

    calibrating = args.calibrate is not None
    cal_only = [name for name, value in (("--model-gb", args.model_gb), ("--link-gbps", args.link_gbps),
                                         ("--evict-s", args.evict_s), ("--process-failures", args.process_failures))
                if value not in (None, False)]
    if cal_only and not calibrating:
        raise ValueError(f"{', '.join(cal_only)}: only with --calibrate DIR")
    if args.paper:
        if calibrating:
            raise ValueError("--paper takes the paper's inputs; --calibrate derives them: give one of the two")
        return (*sim.paper_inputs(), None)
    job = sim.Job(gpus=args.gpus, gpus_per_server=args.gpus_per_server, replicas=args.replicas,
                  step_s=args.step_s, servers_per_rack=args.servers_per_rack)
    kind = {"distribution": "weibull", "weibull_shape": args.weibull} if args.weibull else {}
    if args.mtbf_min is not None:
        failures = sim.Failures(mtbf_s=args.mtbf_min * MIN, rack_fraction=args.rack_fraction, **kind)
    else:
        failures = sim.Failures(per_server_day=args.per_server_day or PAPER_PER_SERVER_DAY,
                                rack_fraction=args.rack_fraction, **kind)
    ckpt = {"checkpoint_interval_s": args.checkpoint_interval_min * MIN,
            "checkpoint_cost_s": args.checkpoint_cost_min * MIN}
    sync = sim.Synchronous(restart_s=args.sync_restart_min * MIN, **ckpt)
    spare_join_s = None if args.spare_join_min is None else args.spare_join_min * MIN
    if args.min_replicas > job.replicas:
        raise ValueError(f"--min-replicas={args.min_replicas} exceeds --replicas={job.replicas}")
    if not calibrating:
        ft = sim.FTHSDP(stall_s=(3.0 if args.stall_min is None else args.stall_min) * MIN,
                        restart_s=(7.0 if args.restart_min is None else args.restart_min) * MIN,
                        catchup_s=(args.catchup_min or 0.0) * MIN, spares=args.spares, spare_join_s=spare_join_s,
                        restart_drag=args.restart_drag, min_replicas=args.min_replicas, **ckpt)
        return job, failures, sync, ft, None
    from ..ftar.calibration import calibrate

    both = [name for name, value in (("--stall-min", args.stall_min), ("--catchup-min", args.catchup_min))
            if value is not None]
    if both:
        raise ValueError(f"{', '.join(both)}: --calibrate derives the stall and the catch-up from the measured runs; "
                         f"give either these or --calibrate")
    if args.model_gb is None:
        raise ValueError("--calibrate needs --model-gb (GB of a replica's state that a restarted replica fetches)")
    cal = calibrate(args.calibrate, state_bytes=args.model_gb * 1e9, hosts=max(1, job.servers // job.replicas),
                    link_bytes_per_s=None if args.link_gbps is None else args.link_gbps * 1e9 / 8,
                    restart_s=None if args.restart_min is None else args.restart_min * MIN,
                    evict_s=args.evict_s, silent=not args.process_failures, step_s=job.step_s,
                    restart_drag=args.restart_drag)
    ft = dataclasses.replace(cal.policy, spares=args.spares, spare_join_s=spare_join_s,
                             min_replicas=args.min_replicas, **ckpt)
    return job, failures, sync, ft, cal


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"


def _table(job: Any, failures: Any, results: list[Any]) -> str:
    mtbf = failures.job_mtbf_s(job) / MIN
    lines = [f"# {job.gpus} GPUs on {job.servers} servers, {job.replicas} replicas; a failure every {mtbf:.3g} min "
             f"({failures.distribution}{', rack share %g' % failures.rack_fraction if failures.rack_fraction else ''}"
             f"); {results[0].days:g} days simulated",
             f"# {'policy':<12} {'ETTR':>7} {'closed':>7} {'1st-ord':>8} {'failures':>9} {'stall/fail':>11} "
             f"{'reduced':>8} {'retained':>9} {'ckpt':>6}"]
    for r in results:
        lines.append(f"  {r.policy:<12} {_pct(r.ettr):>7} {_pct(r.closed_form):>7} {_pct(r.first_order):>8} "
                     f"{r.failures:>9} {r.stall_per_failure_s / MIN:>8.2f} min {_pct(r.reduced_fraction):>8} "
                     f"{_pct(r.throughput_retention):>9} {_pct(r.checkpoint_overhead):>6}")
    return "\n".join(lines)


def _plot(path: str, job: Any, failures: Any, policies: tuple[Any, Any], days: float,
          seed: int) -> list[dict[str, Any]]:
    import numpy as np

    from ..ftar import simulate as sim

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib (pip install matplotlib)") from None
    per_server_day = sim.DAY_S / (failures.job_mtbf_s(job) * job.servers)
    scale = [int(g) for g in np.geomspace(1000, 200_000, 12)]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    points: list[dict[str, Any]] = []
    for policy, color in zip(policies, ("tab:red", "tab:blue")):
        simulated, closed = [], []
        for gpus in scale:
            j = dataclasses.replace(job, gpus=gpus, replicas=min(job.replicas, -(-gpus // job.gpus_per_server)))
            f = dataclasses.replace(failures, mtbf_s=None, per_server_day=per_server_day)
            r = sim.simulate(j, f, policy, days=days, seed=seed)
            simulated.append(100 * r.ettr)
            closed.append(None if r.closed_form is None else 100 * r.closed_form)
            points.append({"policy": policy.name, "gpus": gpus, "replicas": j.replicas, "ettr": r.ettr,
                           "closed_form": r.closed_form, "first_order": r.first_order, "failures": r.failures})
        ax.plot(scale, simulated, "o", color=color, label=f"{policy.name} (simulated)")
        if all(c is not None for c in closed):
            ax.plot(scale, closed, "-", color=color, alpha=0.6, label=f"{policy.name} (closed form)")
    ax.set_xscale("log")
    ax.set_xlabel("GPUs (same failure rate per server)")
    ax.set_ylabel("ETTR (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"Effective training time vs scale ({per_server_day:.3g} failures per server-day)")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return points


def run(args: argparse.Namespace) -> int:
    """Simulate both policies; print the paper's two lines or the table; write JSON/plot if asked."""
    from ..ftar import simulate as sim

    try:
        job, failures, sync, ft, cal = _inputs(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cal is not None:
        print(cal.report())
    results = [sim.simulate(job, failures, policy, days=args.days, seed=args.seed) for policy in (sync, ft)]
    if args.paper:
        for r in results:
            print(f"{r.policy}: first-order ETTR {_pct(r.first_order)}, simulated ETTR {_pct(r.ettr)}")
    else:
        print(_table(job, failures, results))
    scale: list[dict[str, Any]] = []
    if args.plot:
        try:
            scale = _plot(args.plot, job, failures, (sync, ft), min(args.days, 300.0), args.seed)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        doc = {"job": asdict(job), "failures": asdict(failures), "synchronous": asdict(sync), "ft_hsdp": asdict(ft),
               "days": args.days, "seed": args.seed, "results": [asdict(r) for r in results]}
        if scale:
            doc["scale"] = scale
        if cal is not None:
            doc["calibration"] = {"results_dir": cal.measurements.directory,
                                  "inputs": [asdict(i) for i in cal.inputs]}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
    return 0
