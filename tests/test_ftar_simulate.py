"""The failure simulator (pymcoll.ftar.simulate, python -m pymcoll ftar-sim): the paper's two
lines, the simulation against the closed form of the same model, properties of ETTR, bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.ftar.simulate import (FTHSDP, DAY_S, Failures, Job, Synchronous, closed_form, first_order,
                                   paper_inputs, simulate)

PROPERTY = settings(derandomize=True, max_examples=12, deadline=None)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "pymcoll", "ftar-sim", *args], capture_output=True,
                          text=True, timeout=120)


def test_paper_prints_exactly_two_lines_in_the_accepted_form() -> None:
    proc = cli("--paper")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    pattern = r"{}: first-order ETTR (\d+\.\d)%, simulated ETTR (\d+\.\d)%"
    sync = re.fullmatch(pattern.format("synchronous"), lines[0])
    ft = re.fullmatch(pattern.format("ft-hsdp"), lines[1])
    assert sync and ft, lines
    # The paper's own accounting: 1 - 10/18 and 1 - (3 + 7/12)/18.
    assert sync.group(1) == "44.4" and ft.group(1) == "80.1", lines
    # Restarts that fail again cost the synchronous job more than one loss each, but failures
    # outside a restart are fewer than first order counts: e^{-10/18} = 57.4%.
    assert abs(float(sync.group(2)) - 57.4) <= 0.5 and 82.0 <= float(ft.group(2)) <= 86.0, lines


def test_paper_simulation_matches_the_closed_form_within_a_point() -> None:
    job, failures, sync, ft = paper_inputs()
    for policy in (sync, ft):
        r = simulate(job, failures, policy, days=2000, seed=11)
        assert r.closed_form is not None
        assert abs(r.ettr - r.closed_form) < 0.01, (policy.name, r.ettr, r.closed_form)
        assert r.failures == pytest.approx(2000 * DAY_S / 1080, rel=0.02)


# Regimes of the closed form's domain: replicas from 4 up, stalls under a quarter of the time.
CASES = [
    (Job(replicas=12, step_s=30), Failures(mtbf_s=3600), FTHSDP(stall_s=120, restart_s=900, catchup_s=60)),
    (Job(replicas=4), Failures(mtbf_s=3600), FTHSDP(stall_s=180, restart_s=1800)),
    (Job(replicas=64), Failures(mtbf_s=600), FTHSDP(stall_s=60, restart_s=1800)),
    (Job(replicas=8), Failures(mtbf_s=1200), FTHSDP(stall_s=60, restart_s=900, spares=2, spare_join_s=120)),
    (Job(replicas=8, step_s=0.1, gpus=64), Failures(mtbf_s=30),
     FTHSDP(stall_s=0.1, restart_s=2.0, catchup_s=0.2, restart_drag=0.5)),
    (Job(replicas=16), Failures(mtbf_s=7200),
     FTHSDP(stall_s=120, restart_s=600, checkpoint_interval_s=3600, checkpoint_cost_s=60)),
    (Job(), Failures(mtbf_s=3600), Synchronous(restart_s=300, checkpoint_interval_s=1800, checkpoint_cost_s=30)),
    (Job(), Failures(mtbf_s=7200), Synchronous(restart_s=900, checkpoint_interval_s=3600)),
]


@pytest.mark.parametrize("job,failures,policy", CASES, ids=[f"{c[2].name}-{i}" for i, c in enumerate(CASES)])
def test_simulation_matches_the_closed_form_of_the_same_model(job: Job, failures: Failures, policy) -> None:
    # Days enough for about 100,000 failures: the simulation's own spread is then under 0.3 points.
    days = 100_000 * failures.job_mtbf_s(job) / DAY_S
    r = simulate(job, failures, policy, days=days, seed=5)
    assert abs(r.ettr - r.closed_form) < 0.01, (r.ettr, r.closed_form)
    assert r.first_order <= r.closed_form + 0.01 or policy.name == "ft-hsdp"


def test_no_failures_leave_only_the_checkpoint_overhead() -> None:
    rare = Failures(mtbf_s=1e15)
    for policy in (Synchronous(checkpoint_interval_s=3000, checkpoint_cost_s=100),
                   FTHSDP(checkpoint_interval_s=3000, checkpoint_cost_s=100)):
        r = simulate(Job(), rare, policy, days=100)
        assert r.failures == 0
        # Whole checkpoint segments only: the last one of the run may be cut short.
        assert r.ettr == pytest.approx(3000 / 3100, abs=3100 / (100 * DAY_S))
        assert r.checkpoint_overhead == pytest.approx(100 / 3100)
    assert simulate(Job(), rare, FTHSDP(), days=10).ettr == 1.0
    assert simulate(Job(), rare, Synchronous(), days=10).ettr == 1.0


@PROPERTY
@given(mtbf_min=st.floats(10, 600), stall_min=st.floats(0.5, 10), out_min=st.floats(1, 60),
       replicas=st.integers(2, 32))
def test_ettr_falls_with_failure_rate_and_recovery_time(mtbf_min: float, stall_min: float, out_min: float,
                                                         replicas: int) -> None:
    job = Job(replicas=replicas)
    days = 400 * mtbf_min / 1440  # about 400 failures at the base rate
    base_f = Failures(mtbf_s=mtbf_min * 60)
    more_f = Failures(mtbf_s=mtbf_min * 30)
    for policy, longer in ((Synchronous(restart_s=out_min * 60), Synchronous(restart_s=out_min * 120)),
                           (FTHSDP(stall_s=stall_min * 60, restart_s=out_min * 60),
                            FTHSDP(stall_s=stall_min * 120, restart_s=out_min * 120))):
        base = simulate(job, base_f, policy, days=days, seed=3).ettr
        assert simulate(job, more_f, policy, days=days, seed=3).ettr < base, policy
        assert simulate(job, base_f, longer, days=days, seed=3).ettr < base, policy
        assert closed_form(job, more_f, policy) < closed_form(job, base_f, policy)
        assert closed_form(job, base_f, longer) < closed_form(job, base_f, policy)


@PROPERTY
@given(mtbf_min=st.floats(10, 120), out_min=st.floats(5, 60), replicas=st.integers(2, 16))
def test_ettr_rises_with_replicas_under_ft_hsdp(mtbf_min: float, out_min: float, replicas: int) -> None:
    failures = Failures(mtbf_s=mtbf_min * 60)
    policy = FTHSDP(stall_s=60, restart_s=out_min * 60)
    days = 400 * mtbf_min / 1440
    few = simulate(Job(replicas=replicas), failures, policy, days=days, seed=7).ettr
    many = simulate(Job(replicas=replicas * 4), failures, policy, days=days, seed=7).ettr
    assert many > few
    assert closed_form(Job(replicas=replicas * 4), failures, policy) > closed_form(Job(replicas=replicas), failures,
                                                                                    policy)


def test_weibull_keeps_the_mean_and_racks_cost_more() -> None:
    job = Job(replicas=32)
    exp = Failures(mtbf_s=1800)
    weibull = Failures(mtbf_s=1800, distribution="weibull", weibull_shape=0.6)
    racks = Failures(mtbf_s=1800, rack_fraction=1.0)
    policy = FTHSDP(stall_s=120, restart_s=1200)
    r = simulate(job, weibull, policy, days=500, seed=2)
    assert r.failures == pytest.approx(500 * DAY_S / 1800, rel=0.05)
    assert r.closed_form is None
    # A whole rack out (16 servers of 12,500) often spans two replicas: more capacity lost.
    plain = simulate(job, exp, policy, days=500, seed=2)
    rack = simulate(job, racks, policy, days=500, seed=2)
    assert rack.ettr < plain.ettr and rack.closed_form is None


def test_spares_shorten_the_time_out() -> None:
    job, failures = Job(replicas=8), Failures(mtbf_s=1200)
    without = simulate(job, failures, FTHSDP(stall_s=60, restart_s=1800), days=300, seed=4)
    spares = simulate(job, failures, FTHSDP(stall_s=60, restart_s=1800, spares=2, spare_join_s=60), days=300, seed=4)
    assert spares.ettr > without.ettr and spares.reduced_fraction < without.reduced_fraction


def test_first_order_is_the_papers_accounting() -> None:
    job, failures, sync, ft = paper_inputs()
    assert first_order(job, failures, sync) == pytest.approx(1 - 10 / 18)
    assert first_order(job, failures, ft) == pytest.approx(1 - (3 + 7 / 12) / 18)


@pytest.mark.parametrize("make,message", [
    (lambda: Failures(), "exactly one of mtbf_s"),
    (lambda: Failures(mtbf_s=60, per_server_day=1), "exactly one of mtbf_s"),
    (lambda: Failures(mtbf_s=-1), "mtbf_s=-1"),
    (lambda: Failures(mtbf_s=60, distribution="gamma"), "distribution='gamma'"),
    (lambda: Failures(mtbf_s=60, rack_fraction=2), "rack_fraction=2"),
    (lambda: Job(replicas=0), "replicas=0"),
    (lambda: Job(gpus=16, gpus_per_server=8, replicas=4), "exceeds the job's 2 servers"),
    (lambda: FTHSDP(stall_s=float("nan")), "stall_s=nan"),
    (lambda: FTHSDP(restart_drag=1.5), "restart_drag=1.5"),
    (lambda: Synchronous(checkpoint_cost_s=10), "needs checkpoint_interval_s > 0"),
    (lambda: simulate(Job(), Failures(mtbf_s=60), Synchronous(), days=0), "days=0"),
    (lambda: simulate(Job(), Failures(mtbf_s=60), "sync"), "Synchronous(...) or FTHSDP(...)"),
])
def test_bad_input_names_the_argument(make, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        make()


def test_cli_table_json_plot_and_bad_options(tmp_path: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    proc = cli("--gpus", "16384", "--replicas", "8", "--mtbf-min", "60", "--days", "50", "--json", str(out),
               "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "synchronous" in proc.stdout and "ft-hsdp" in proc.stdout and "2048 servers" in proc.stdout
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["results"]] == ["synchronous", "ft-hsdp"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = cli("--replicas", "0")
    assert bad.returncode == 2 and "--replicas=0" in bad.stderr
    bad = cli("--gpus", "8", "--replicas", "4")
    assert bad.returncode == 2 and "exceeds the job's 1 servers" in bad.stderr


def test_importing_the_simulator_loads_no_mpi() -> None:
    code = "import sys, pymcoll.ftar.simulate; assert 'mpi4py.MPI' not in sys.modules, 'MPI loaded'"
    subprocess.run([sys.executable, "-P", "-c", code], check=True, timeout=60)


def test_job_is_a_frozen_value() -> None:
    job = Job()
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.gpus = 1  # type: ignore[misc]


@pytest.mark.parametrize("min_replicas", [1, 2, 3, 4])
def test_a_quorum_minimum_stops_the_job_while_too_few_replicas_run(min_replicas: int) -> None:
    # Without stall and catch-up, each replica is independently absent for the restart after each of
    # its failures (Poisson at rate / R, a failure while absent starting it again): present with
    # probability p = e^{-rate restart / R}. The job trains at (R - k) / R while k <= R - min are absent.
    R, mtbf, restart = 4, 20.0, 5.0
    job = Job(gpus=R, gpus_per_server=1, replicas=R)
    policy = FTHSDP(stall_s=0.0, restart_s=restart, catchup_s=0.0, min_replicas=min_replicas)
    p = math.exp(-restart / (mtbf * R))
    want = sum(math.comb(R, k) * p ** (R - k) * (1 - p) ** k * (R - k) / R for k in range(R - min_replicas + 1))
    r = simulate(job, Failures(mtbf_s=mtbf), policy, days=20, seed=9)
    assert r.ettr == pytest.approx(want, abs=0.005), (r.ettr, want)
    assert (r.closed_form is None) == (min_replicas > 1)
    if min_replicas == R:  # every failure stops everyone for the restart: e^{-rate restart}
        assert want == pytest.approx(math.exp(-restart / mtbf))
        assert r.first_order == pytest.approx(1 - restart / mtbf)


def test_a_spare_keeps_the_quorum() -> None:
    job = Job(gpus=4, gpus_per_server=1, replicas=4)
    quorum = FTHSDP(stall_s=0.0, restart_s=5.0, min_replicas=4)
    spared = dataclasses.replace(quorum, spares=4, spare_join_s=0.0)
    assert simulate(job, Failures(mtbf_s=20), spared, days=5, seed=2).ettr > 0.99
    assert simulate(job, Failures(mtbf_s=20), quorum, days=5, seed=2).ettr < 0.8
    with pytest.raises(ValueError, match="min_replicas=5 exceeds the job's replicas=4"):
        simulate(job, Failures(mtbf_s=20), FTHSDP(min_replicas=5))
    with pytest.raises(ValueError, match="min_replicas=0"):
        FTHSDP(min_replicas=0)


def test_a_job_that_never_restarts_ends_at_the_horizon() -> None:
    # A restart of 600 s between failures 30 s apart almost never completes (e^-20): the run must
    # still stop at its horizon, with about one failure per 30 s and no useful time after the first.
    r = simulate(Job(), Failures(mtbf_s=30), Synchronous(restart_s=600), days=10, seed=1)
    assert r.ettr < 1e-3 and r.failures == pytest.approx(10 * DAY_S / 30, rel=0.03)
