#!/usr/bin/env python3
"""Does the failure simulator predict real runs? Calibrate it on one run, check it on others.

Runs ``examples/ftar_train.py`` (4 replicas on loopback, a step of --compute-ms of simulated
compute plus a small MLP, every kill a SIGKILL, the victim restarted --restart-delay s later):

1. **Calibration**: one run with kills at a fixed interval, far enough apart that their windows
   never overlap. From its commit log (every step's time and n_contrib) and its kills' events
   this script measures what ``pymcoll.ftar.simulate.FTHSDP`` takes, as means over the kills
   (ETTR is linear in each failure's cost, so the mean is the figure that predicts it):

   * the **healthy step** and the **baseline**: the mean gap between two commits of full steps
     outside any kill's window against their median (the yardstick of the samples-based ETTR);
     a run without failures scores this baseline, below 1 by the steps' jitter alone;
   * per kill, its **loss** L in seconds of the whole job at full strength: the window from the
     last commit before the kill to three full steps after the victim contributes again, less the
     samples committed in it (n_contrib / replicas x mean healthy step each);
   * the **stall**: the survivors' gap around the kill less a healthy step;
   * the **restart**: kill until the restarted process is connected (the delay, the process
     start, the torch import); the **catch-up**: until the last step without it;
   * the **restart drag**: what the loss holds beyond the stall and the replica's own share
     (1/replicas of its time out), spread over the restart as ``FTHSDP.restart_drag`` spreads it:
     drag = mean(L - stall - (out - stall) / R) / ((R - 1) / R x (restart - stall)).

2. **Validation**: runs with random kills (``--failure-mtbf``, exponential gaps, a victim drawn
   from the replicas training) with other seeds and means. For each, the simulator's expected
   ETTR at that run's failure rate (its kills over its training wall time; the simulator's
   failures also hit replicas that are out, the runs' only training ones, so the simulated rate
   is the one whose failures of up replicas match the run's), times the calibration's baseline,
   next to the run's samples-based ETTR. Acceptance: within 5 points on every run.

3. **Speed**: 10,000 simulated days of the paper's 100K-GPU job, each policy, pinned to one core
   (``taskset -c 0``).

    python perf/ftar_sim_validate.py                    # all of it, about 15 min on 2 cores
    python perf/ftar_sim_validate.py --speed-only
    python perf/ftar_sim_validate.py --from-runs /tmp/v  # analyse the example's summaries kept with --keep /tmp/v
    python perf/ftar_sim_validate.py --plot-only         # the figure of results/ftar_sim_validation.json again

-> results/ftar_sim_validation.json and .png. Run on a quiet machine: the replicas share the cores.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perfutil import plotter, run_record, source_state, write_results  # noqa: E402

from pymcoll.ftar.simulate import DAY_S, FTHSDP, Failures, Job, closed_form, simulate  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "ftar_train.py"
TAIL_STEPS = 3      # full steps after the victim's return still counted in a kill's window
TOLERANCE = 0.05    # acceptance: |measured - predicted| ETTR


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the runs


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat; 0 where there is none)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds of this script's finished children and their descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_example(label: str, argv: list[str], workdir: Path, timeout: float) -> dict[str, Any]:
    """examples/ftar_train.py with `argv`; its JSON summary, with the command, and the CPU that
    other processes of the machine took meanwhile (busy CPU less the run's own)."""
    out = workdir / f"{label}.json"
    cmd = [sys.executable, str(EXAMPLE), "--quiet", "--json", str(out), "--timeout", str(timeout), *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYMCOLL_")}
    log(f"[{time.strftime('%H:%M:%S')}] {label}: {' '.join(cmd[1:])}")
    t0, busy0, own0, load0 = time.monotonic(), busy_cpu_s(), children_cpu_s(), list(os.getloadavg())
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout + 60,
                          check=False)
    took = time.monotonic() - t0
    own, busy = children_cpu_s() - own0, busy_cpu_s() - busy0
    if not out.exists():
        raise RuntimeError(f"{label}: the example wrote no summary (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads(out.read_text())
    summary["command"] = ["python", "examples/ftar_train.py", *argv]
    summary["exit_status"] = proc.returncode
    summary["loadavg_before"] = load0
    summary["loadavg_after"] = list(os.getloadavg())
    summary["cpu"] = {"run_s": took, "own_cpu_s": own, "machine_busy_cpu_s": busy,
                      "others_share": max(0.0, busy - own) / (took * (os.cpu_count() or 1)),
                      "own_share": own / (took * (os.cpu_count() or 1))}
    out.write_text(json.dumps(summary) + "\n")
    log(f"  {took:.0f} s, exit {proc.returncode}; {summary['kills']} kills, samples ETTR "
        f"{summary['ettr_samples']:.3f}, training wall {summary['training_wall_s']:.1f} s; CPUs: this run "
        f"{100 * summary['cpu']['own_share']:.0f}%, other processes {100 * summary['cpu']['others_share']:.0f}%")
    return summary


# ---------------------------------------------------------------- the analysis


def analyse(summary: dict[str, Any]) -> dict[str, Any]:
    """Each kill's costs and the run's healthy step and baseline, from the commit log."""
    R = summary["replicas"]
    commits = summary["commits"]
    times = [c[1] for c in commits]
    ns = [c[2] for c in commits]
    kills = summary["kill_details"]
    kill_times = sorted(k["t_s"] for k in kills)
    windows: list[tuple[float, float]] = []
    raw: list[dict[str, Any]] = []
    for k in kills:
        i_prev = bisect.bisect_right(times, k["t_s"]) - 1
        record: dict[str, Any] = {"number": k["number"], "victim": k["victim"], "t_s": k["t_s"]}
        if i_prev < 0 or i_prev + 1 >= len(times) or k.get("ready_s") is None or k.get("caught_up_s") is None:
            record["usable"] = False
            record["why"] = "no commit around it, or the victim never caught up"
            raw.append(record)
            continue
        i_full = next((i for i in range(bisect.bisect_right(times, k["caught_up_s"]), len(times)) if ns[i] == R),
                      None)
        if i_full is None:
            record["usable"] = False
            record["why"] = "no full step after the victim caught up"
            raw.append(record)
            continue
        i_end = min(i_full + TAIL_STEPS, len(times) - 1)
        windows.append((times[i_prev], times[i_end]))
        others = [t for t in kill_times if times[i_prev] < t <= times[i_end] and t != k["t_s"]]
        record.update(usable=not others, why="another kill in its window" if others else "",
                      i_prev=i_prev, i_next=i_prev + 1, i_back=i_full - 1, i_end=i_end,
                      restart_s=k["ready_s"] - k["t_s"], out_s=times[i_full - 1] - k["t_s"])
        raw.append(record)
    # Healthy gaps: two consecutive full steps, the gap outside every kill's window.
    healthy = [times[i] - times[i - 1] for i in range(1, len(times))
               if ns[i] == R and ns[i - 1] == R and not any(a < times[i] and times[i - 1] < b for a, b in windows)]
    mean_step = statistics.fmean(healthy)
    median = summary["median_healthy_step_s"]
    for r in raw:
        if "i_prev" not in r:
            continue
        a, e = r.pop("i_prev"), r.pop("i_end")
        r.pop("i_back")
        r["stall_s"] = times[r.pop("i_next")] - times[a] - mean_step
        r["loss_s"] = (times[e] - times[a]) - sum(ns[a + 1: e + 1]) / R * mean_step
        r["drag_part_s"] = r["loss_s"] - r["stall_s"] - (r["out_s"] - r["stall_s"]) / R
    return {"replicas": R, "healthy_gaps": len(healthy), "mean_healthy_step_s": mean_step,
            "median_healthy_step_s": median, "baseline": median / mean_step, "kills": raw,
            "steps": len(times), "training_wall_s": summary["training_wall_s"]}


def fit(analysis: dict[str, Any]) -> dict[str, Any]:
    """The simulator's inputs: means over the kills that had their window to themselves."""
    R = analysis["replicas"]
    kills = [k for k in analysis["kills"] if k["usable"]]
    if not kills:
        raise RuntimeError("the calibration run has no kill with a window of its own: space the kills further")

    def mean(key: str) -> float:
        return statistics.fmean(k[key] for k in kills)

    stall, restart, out = max(0.0, mean("stall_s")), mean("restart_s"), mean("out_s")
    catchup = max(0.0, out - restart)
    drag_raw = mean("drag_part_s") / ((R - 1) / R * (restart - stall))
    drag = min(1.0, max(0.0, drag_raw))
    policy = FTHSDP(stall_s=stall, restart_s=restart, catchup_s=catchup, restart_drag=drag)
    spread = {key: [min(k[key] for k in kills), max(k[key] for k in kills)]
              for key in ("stall_s", "restart_s", "out_s", "loss_s")}
    return {"kills_used": len(kills), "stall_s": stall, "restart_s": restart, "catchup_s": catchup,
            "out_s": out, "restart_drag": drag, "restart_drag_unclipped": drag_raw, "loss_per_kill_s": mean("loss_s"),
            "baseline": analysis["baseline"], "mean_healthy_step_s": analysis["mean_healthy_step_s"],
            "median_healthy_step_s": analysis["median_healthy_step_s"], "range_over_kills": spread,
            "policy": {"stall_s": policy.stall_s, "restart_s": policy.restart_s, "catchup_s": policy.catchup_s,
                       "restart_drag": policy.restart_drag}}


def simulated_rate(kill_rate: float, out_s: float, replicas: int) -> float:
    """The simulator's failure rate whose failures of up replicas arrive at `kill_rate`.

    A replica is out a share 1 - e^{-rate out / R} of the time (the closed form's d), so failures
    of up replicas arrive at rate e^{-rate out / R}; solved for rate by fixed-point iteration."""
    if kill_rate <= 0:
        return 0.0
    rate = kill_rate
    for _ in range(200):
        rate = kill_rate * math.exp(rate * out_s / replicas)
    return rate


def policy_of(cal: dict[str, Any], summary: dict[str, Any], **change: Any) -> FTHSDP:
    """The calibrated policy with the run's quorum minimum (the example's coordinator: replicas - 1)."""
    fields = {**cal["policy"], "min_replicas": summary.get("min_replicas", max(1, summary["replicas"] - 1)), **change}
    return FTHSDP(**fields)


def predict(cal: dict[str, Any], summary: dict[str, Any], seed: int) -> dict[str, Any]:
    """The simulator's expected ETTR at the run's failure rate (simulated over about 200,000
    failures), times the calibration's baseline; beside it, what the model says without the
    quorum minimum (its closed form) and with the drag measured below the model's range."""
    R = summary["replicas"]
    policy = policy_of(cal, summary)
    job = Job(gpus=R, gpus_per_server=1, replicas=R, step_s=0.0)
    wall, kills = summary["training_wall_s"], summary["kills"]
    kill_rate = kills / wall
    rate = simulated_rate(kill_rate, policy.out_s, R)
    if rate <= 0:
        return {"kill_rate_per_s": 0.0, "run_mtbf_s": None, "simulated_mtbf_s": None, "closed_form_no_quorum": 1.0,
                "simulated": 1.0, "predicted": cal["baseline"], "min_replicas": policy.min_replicas}
    failures = Failures(mtbf_s=1.0 / rate)
    days = 200_000 / rate / DAY_S  # about 200,000 failures: the simulation's own spread is then a tenth of a point
    sim = simulate(job, failures, policy, days=days, seed=seed)
    free = closed_form(job, failures, policy_of(cal, summary, min_replicas=1))
    out = {"kill_rate_per_s": kill_rate, "run_mtbf_s": wall / kills, "simulated_mtbf_s": 1.0 / rate,
           "min_replicas": policy.min_replicas, "simulated": sim.ettr, "simulated_days": days,
           "closed_form_no_quorum": None if free is None else float(free),
           "predicted": cal["baseline"] * sim.ettr}
    if cal["restart_drag_unclipped"] < 0:
        # The model's drag is a share lost (>= 0); ETTR is linear in it, so the measured negative
        # one is read off the line through drag 0 and its mirror image.
        mirrored = simulate(job, failures, policy_of(cal, summary, restart_drag=-cal["restart_drag_unclipped"]),
                            days=days, seed=seed).ettr
        out["predicted_with_measured_drag"] = cal["baseline"] * (2 * sim.ettr - mirrored)
    return out


# ---------------------------------------------------------------- speed


SPEED_CODE = """
import json, time
from pymcoll.ftar.simulate import paper_inputs, simulate
job, failures, sync, ft = paper_inputs()
out = {{}}
for policy in (sync, ft):
    t = time.perf_counter()
    r = simulate(job, failures, policy, days={days}, seed=0)
    out[policy.name] = {{"seconds": time.perf_counter() - t, "ettr": r.ettr, "failures": r.failures}}
print(json.dumps(out))
"""


def speed(days: float) -> dict[str, Any]:
    """Seconds to simulate `days` of the paper's job, per policy, on one core (taskset -c 0)."""
    cmd = [sys.executable, "-P", "-c", SPEED_CODE.format(days=days)]
    pinned = shutil.which("taskset") is not None
    if pinned:
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"days": days, "pinned_to_one_core": pinned, "command": " ".join(["taskset -c 0"] * pinned + [
        "python -P -c <simulate(paper_inputs(), days=%g) per policy>" % days]), "policies": out,
            "total_seconds": sum(v["seconds"] for v in out.values()), "loadavg": list(os.getloadavg())}


# ---------------------------------------------------------------- output


@plotter("ftar_sim_validate", rect=(0, 0, 1, 0.95))
def plot(plt: Any, doc: dict[str, Any]) -> Any:
    runs = doc.get("runs") or []
    if not runs:
        return None
    cal = doc["calibration"]["fit"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = [f"MTBF {r['mtbf_s']:g} s, seed {r['seed']}\n{r['kills']} kills: {r['prediction']['run_mtbf_s']:.0f} s apart"
              for r in runs]
    x = list(range(len(runs)))
    measured = [100 * r["measured_ettr"] for r in runs]
    predicted = [100 * r["prediction"]["predicted"] for r in runs]
    ax1.bar([i - 0.2 for i in x], measured, 0.4, label="measured (samples-based)", color="tab:blue")
    ax1.bar([i + 0.2 for i in x], predicted, 0.4, label="predicted (simulated x baseline)", color="tab:orange")
    ax1.errorbar([i + 0.2 for i in x], predicted, yerr=100 * TOLERANCE, fmt="none", ecolor="black", capsize=4,
                 label="±5 points")
    ax1.set_xticks(x, labels, fontsize=8)
    ax1.set_ylabel("ETTR (%)")
    ax1.set_ylim(min(measured + predicted) - 15, 100)
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_title("per run")
    R = doc["settings"]["replicas"]
    policy = FTHSDP(**cal["policy"], min_replicas=runs[0]["prediction"]["min_replicas"])
    job = Job(gpus=R, gpus_per_server=1, replicas=R, step_s=0.0)
    grid = [10.0 * 1.1 ** i for i in range(0, 25)]
    curve = []
    for m in grid:
        rate = simulated_rate(1.0 / m, policy.out_s, R)
        sim = simulate(job, Failures(mtbf_s=1.0 / rate), policy, days=20_000 / rate / DAY_S, seed=1)
        curve.append(100 * cal["baseline"] * sim.ettr)
    ax2.plot(grid, curve, "-", color="tab:orange", label="predicted")
    ax2.fill_between(grid, [c - 100 * TOLERANCE for c in curve], [c + 100 * TOLERANCE for c in curve],
                     color="tab:orange", alpha=0.15)
    ax2.plot([r["prediction"]["run_mtbf_s"] for r in runs], measured, "o", color="tab:blue", label="measured runs")
    cal_run = doc["calibration"]["run"]
    ax2.plot([cal_run["run_mtbf_s"]], [100 * cal_run["measured_ettr"]], "s", color="tab:gray",
             label="calibration run")
    ax2.axhline(100 * cal["baseline"], color="gray", lw=0.8, ls=":", label="baseline (no failure)")
    ax2.set_xscale("log")
    ax2.set_xlabel("the run's mean time between kills (s)")
    ax2.set_ylabel("ETTR (%)")
    ax2.legend(loc="lower right", fontsize=8)
    ax2.set_title("against the failure rate")
    fig.suptitle(f"FT-HSDP simulator vs {R} replicas of examples/ftar_train.py under SIGKILLs")
    return fig


def table(doc: dict[str, Any]) -> str:
    cal = doc["calibration"]["fit"]
    lines = [f"calibration ({cal['kills_used']} kills): step {cal['mean_healthy_step_s'] * 1000:.1f} ms mean / "
             f"{cal['median_healthy_step_s'] * 1000:.1f} ms median (baseline {cal['baseline']:.3f}); stall "
             f"{cal['stall_s'] * 1000:.0f} ms, restart {cal['restart_s']:.2f} s, catch-up {cal['catchup_s']:.2f} s, "
             f"restart drag {cal['restart_drag']:.3f}; loss {cal['loss_per_kill_s']:.2f} s per kill",
             f"{'run':<14} {'kills':>5} {'wall(s)':>8} {'MTBF(s)':>8} {'measured':>9} {'predicted':>10} "
             f"{'diff':>6} {'sim':>7} {'no-quorum':>9} {'base':>6} {'loss/kill':>9} {'others':>6}"]
    for r in doc["runs"]:
        p = r["prediction"]
        lines.append(f"{r['label']:<14} {r['kills']:>5} {r['training_wall_s']:>8.1f} "
                     f"{(p['run_mtbf_s'] or math.inf):>8.1f} {100 * r['measured_ettr']:>8.1f}% "
                     f"{100 * p['predicted']:>9.1f}% {100 * r['difference']:>+6.1f} {100 * p['simulated']:>6.1f}% "
                     f"{100 * (p['closed_form_no_quorum'] or math.nan):>8.1f}% {r['own']['baseline']:>6.3f} "
                     f"{r['own']['loss_per_kill_s'] if r['own']['loss_per_kill_s'] is not None else math.nan:>8.2f}s "
                     f"{100 * (r.get('cpu') or {}).get('others_share', math.nan):>5.0f}%")
    if doc.get("speed"):
        sp = doc["speed"]
        lines.append(f"speed: {sp['days']:g} simulated days of the paper's job, one core: " + ", ".join(
            f"{k} {v['seconds']:.2f} s" for k, v in sp["policies"].items()) + f" (total {sp['total_seconds']:.2f} s)")
    return "\n".join(lines)


def run_doc(label: str, summary: dict[str, Any], cal: Optional[dict[str, Any]], seed: int) -> dict[str, Any]:
    """One validation run's record: what it measured, its own figures, and the prediction."""
    own = analyse(summary)
    usable = [k for k in own["kills"] if k["usable"]]
    rec: dict[str, Any] = {
        "label": label, "command": summary.get("command"), "seed": summary.get("failure_schedule", {}).get("seed"),
        "mtbf_s": summary.get("failure_schedule", {}).get("mtbf_s"), "kills": summary["kills"],
        "steps": summary["steps_committed"], "training_wall_s": summary["training_wall_s"],
        "measured_ettr": summary["ettr_samples"], "steps_based": summary["effective_training_time"],
        "ok": summary["ok"], "problems": summary["problems"], "loadavg_after": summary.get("loadavg_after"),
        "cpu": summary.get("cpu"),
        "own": {"baseline": own["baseline"], "mean_healthy_step_s": own["mean_healthy_step_s"],
                "median_healthy_step_s": own["median_healthy_step_s"], "isolated_kills": len(usable),
                "loss_per_kill_s": statistics.fmean(k["loss_s"] for k in usable) if usable else None,
                "restart_s": statistics.fmean(k["restart_s"] for k in usable) if usable else None,
                "out_s": statistics.fmean(k["out_s"] for k in usable) if usable else None,
                "kills": own["kills"]}}
    if cal is not None:
        rec["prediction"] = predict(cal, summary, seed)
        rec["difference"] = rec["measured_ettr"] - rec["prediction"]["predicted"]
        rec["within_tolerance"] = abs(rec["difference"]) <= TOLERANCE
    return rec


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--compute-ms", type=float, default=80.0, help="simulated compute per step (default 80)")
    ap.add_argument("--restart-delay", type=float, default=3.0, help="seconds before a victim restarts (default 3)")
    ap.add_argument("--steps", type=int, default=1700, help="steps of every run (default 1700: about 2.5 min)")
    ap.add_argument("--cal-kill-every", type=float, default=20.0,
                    help="seconds between the calibration run's kills (default 20)")
    ap.add_argument("--cal-kills", type=int, default=6, help="kills of the calibration run (default 6)")
    ap.add_argument("--runs", default="20:21,25:22,30:23,40:24",
                    help="validation runs as MTBF_S:SEED,... (default 20:21,25:22,30:23,40:24)")
    ap.add_argument("--speed-days", type=float, default=10_000.0)
    ap.add_argument("--speed-only", action="store_true", help="only the simulator's speed")
    ap.add_argument("--no-speed", action="store_true", help="skip the simulator's speed")
    ap.add_argument("--keep", metavar="DIR", help="keep the example's summaries (with their commit logs) in DIR")
    ap.add_argument("--from-runs", metavar="DIR",
                    help="analyse the summaries kept in DIR (calibration.json, run-*.json) instead of running")
    ap.add_argument("--plot-only", action="store_true", help="draw the figure of the results file --out, run nothing")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "ftar_sim_validation.json")
    a = ap.parse_args(argv)
    runs = []
    for item in a.runs.split(","):
        mtbf, _, seed = item.partition(":")
        runs.append((float(mtbf), int(seed or 0)))

    if a.plot_only:
        doc = json.loads(a.out.read_text())
        print(table(doc))
        png = a.out.with_suffix(".png")
        if plot(doc, png):
            print(f"wrote {png}")
        return 0
    doc: dict[str, Any] = {"meta": run_record(**source_state(), benchmark="ftar_sim_validation",
                                              loadavg_before=list(os.getloadavg()))}
    doc["settings"] = {"replicas": a.replicas, "compute_ms": a.compute_ms, "restart_delay_s": a.restart_delay,
                       "steps": a.steps, "calibration_kill_every_s": a.cal_kill_every, "calibration_kills": a.cal_kills,
                       "runs": [{"mtbf_s": m, "seed": s} for m, s in runs], "tail_steps": TAIL_STEPS,
                       "tolerance": TOLERANCE}
    if a.speed_only:
        doc["speed"] = speed(a.speed_days)
        print(json.dumps(doc["speed"], indent=1))
        return 0

    if a.from_runs:
        workdir = Path(a.from_runs)
    elif a.keep:
        workdir = Path(a.keep)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="ftar_sim_validate."))
    common = ["--replicas", str(a.replicas), "--steps", str(a.steps), "--compute-ms", str(a.compute_ms),
              "--restart-delay", str(a.restart_delay)]
    timeout = max(300.0, a.steps * (a.compute_ms / 1000 + 0.05) * 2)

    def summary_of(label: str, extra: list[str]) -> dict[str, Any]:
        if a.from_runs:
            return json.loads((workdir / f"{label}.json").read_text())
        return run_example(label, common + extra, workdir, timeout)

    cal_summary = summary_of("calibration", ["--kill-every", str(a.cal_kill_every), "--kills", str(a.cal_kills)])
    cal_analysis = analyse(cal_summary)
    cal = fit(cal_analysis)
    doc["calibration"] = {"command": cal_summary.get("command"), "fit": cal, "kills": cal_analysis["kills"],
                          "run": {"kills": cal_summary["kills"], "training_wall_s": cal_summary["training_wall_s"],
                                  "run_mtbf_s": cal_summary["training_wall_s"] / max(1, cal_summary["kills"]),
                                  "measured_ettr": cal_summary["ettr_samples"],
                                  "steps_based": cal_summary["effective_training_time"], "ok": cal_summary["ok"],
                                  "loadavg_after": cal_summary.get("loadavg_after"), "cpu": cal_summary.get("cpu")}}
    doc["calibration"]["run"]["prediction"] = predict(cal, cal_summary, 0)
    log(f"calibrated: {json.dumps(cal['policy'])}, baseline {cal['baseline']:.3f}")
    doc["runs"] = []
    for i, (mtbf, seed) in enumerate(runs):
        label = f"run-{i + 1}"
        summary = summary_of(label, ["--failure-mtbf", str(mtbf), "--failure-seed", str(seed)])
        doc["runs"].append(run_doc(label, summary, cal, seed))
    within = [r["within_tolerance"] for r in doc["runs"]]
    doc["acceptance"] = {"rule": f"|measured - predicted| <= {TOLERANCE} on every run, at least 3 runs",
                         "runs": len(within), "within": sum(within), "met": len(within) >= 3 and all(within)}
    if not a.no_speed:
        doc["speed"] = speed(a.speed_days)
    doc["meta"]["loadavg_after"] = list(os.getloadavg())
    print(table(doc))
    write_results(doc, a.out, plot)
    if not (a.keep or a.from_runs):
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if doc["acceptance"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
