"""FT-HSDP's inputs from measured FTAR runs (pymcoll.ftar.calibration, ftar-sim --calibrate): the
rules on small result files written here, bad results and arguments, the command line, and the
measured files of the checkout when they are there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pymcoll.ftar.calibration import Calibration, Measurements, calibrate, read_measurements
from pymcoll.ftar.simulate import FTHSDP, Failures, Job, simulate

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def stall_file(path: Path, reps: list[tuple[float, float, float]], evict_ms: int = 2000) -> None:
    """A stall run as perf/bench_ftar.py writes it: (detection, reform, redo) ms per kill."""
    doc = {"meta": {"benchmark": "ftar_stall", "grad_bytes": 4 * MIB,
                    "coordinator": f"heartbeat 100 ms, evict {evict_ms} ms, join timeout 1000 ms"},
           "summary": {},
           "reps": [{"rep": i, "detection_ms": d, "reform_ms": f, "redo_ms": r} for i, (d, f, r) in enumerate(reps)]}
    path.write_text(json.dumps(doc))


def catchup_file(path: Path, state_bytes: int, cycles: list[tuple[float, float, float]]) -> None:
    """A catch-up run: (fetch ms, load ms, joiner ready ms after the kill) per cycle."""
    doc = {"meta": {"benchmark": "ftar_catchup", "state_bytes": state_bytes}, "summary": {},
           "cycles": [{"cycle": i, "fetch_ms": f, "load_ms": lo,
                       "joiner_events": [{"ev": "ready", "t": ready}, {"ev": "healed", "t": ready + f + lo}]}
                      for i, (f, lo, ready) in enumerate(cycles)]}
    path.write_text(json.dumps(doc))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    # Medians: detection 5 ms, re-forming 1 ms, redo 4 ms over the six kills of both files.
    stall_file(tmp_path / "ftar_stall.json", [(4, 1, 4), (5, 1, 3), (60, 2, 20)])
    stall_file(tmp_path / "ftar_stall_np4.json", [(5, 1, 4), (6, 0.5, 4), (3, 1, 5)])
    # 100 MB: fetch 200 ms (0.5 GB/s), load 10 ms (10 GB/s), ready 150 ms after the kill (medians).
    catchup_file(tmp_path / "ftar_catchup.json", 100_000_000, [(200, 10, 150), (190, 10, 140), (400, 12, 400)])
    return tmp_path


def test_the_measured_figures_are_the_medians_over_every_file(results: Path) -> None:
    m = read_measurements(results)
    assert m.stall_files == ("ftar_stall.json", "ftar_stall_np4.json") and m.stall_kills == 6
    assert (m.detection_s, m.reform_s, m.redo_s) == pytest.approx((0.005, 0.001, 0.004))
    assert m.evict_s == 2.0 and m.grad_bytes == 4 * MIB
    assert m.catchup_files == ("ftar_catchup.json",) and m.catchups == 3
    assert m.fetch_s_per_byte == pytest.approx(0.2 / 1e8) and m.pass_s_per_byte == pytest.approx(0.01 / 1e8)
    assert m.restart_s == pytest.approx(0.15) and m.state_bytes == 100_000_000


def test_a_silent_host_is_detected_at_the_eviction_deadline(results: Path) -> None:
    cal = calibrate(results, state_bytes=1e9)
    assert isinstance(cal, Calibration) and isinstance(cal.policy, FTHSDP)
    assert cal.policy.stall_s == pytest.approx(2.0 + 0.001 + 0.004)
    assert "eviction deadline" in cal.input("detection_s").source
    # A deadline the user gives replaces the measured runs' one; a crashing process is found as measured.
    assert calibrate(results, state_bytes=1e9, evict_s=10).policy.stall_s == pytest.approx(10.005)
    crash = calibrate(results, state_bytes=1e9, silent=False)
    assert crash.policy.stall_s == pytest.approx(0.005 + 0.001 + 0.004)
    assert crash.input("detection_s").source.startswith("measured: median of 6 SIGKILLs")


def test_catch_up_is_the_transfer_over_the_hosts_links_plus_the_replay(results: Path) -> None:
    # 80 GB over 10 hosts at 10 GB/s each: 0.8 s; one pass over 8 GB at 10 GB/s: 0.8 s; a step every 4 s.
    cal = calibrate(results, state_bytes=80e9, hosts=10, link_bytes_per_s=10e9, step_s=4.0)
    transfer, load, replay = (cal.input(n).value for n in ("transfer_s", "load_s", "replay_s"))
    assert transfer == pytest.approx(0.8) and load == pytest.approx(0.8)
    total = cal.policy.catchup_s
    assert total == pytest.approx(transfer + load + replay)
    # Every step committed meanwhile is replayed: T = transfer + pass + (T / step) x pass.
    assert total == pytest.approx(0.8 + 0.8 + total / 4.0 * 0.8)
    assert total == pytest.approx(2.0)
    # No step time: the load only; no link: the fetch rate measured (0.5 GB/s).
    plain = calibrate(results, state_bytes=1e9)
    assert plain.input("replay_s").value == 0.0
    assert plain.policy.catchup_s == pytest.approx(1e9 * 0.2 / 1e8 + 1e9 * 0.01 / 1e8)
    assert "measured: median fetch rate 0.5 GB/s" in plain.input("transfer_s").source


def test_restart_and_drag_are_given_or_measured(results: Path) -> None:
    measured = calibrate(results, state_bytes=1e9)
    assert measured.policy.restart_s == pytest.approx(0.15)
    assert measured.input("restart_s").source.startswith("measured")
    given = calibrate(results, state_bytes=1e9, restart_s=420.0, restart_drag=0.25)
    assert given.policy.restart_s == 420.0 and given.policy.restart_drag == 0.25
    assert given.input("restart_s").source == "given" and given.input("restart_drag").source == "given"
    assert measured.policy.restart_drag == 0.0 and "hosts of its own" in measured.input("restart_drag").rule
    # The figures read once serve several calibrations.
    m = read_measurements(results)
    assert isinstance(m, Measurements) and calibrate(m, state_bytes=1e9) == measured


def test_the_report_names_every_input_and_its_source(results: Path) -> None:
    cal = calibrate(results, state_bytes=1e9, link_bytes_per_s=1.25e9, restart_s=600, step_s=1.0)
    text = cal.report()
    names = ["detection_s", "reform_s", "redo_s", "stall_s", "transfer_s", "load_s", "replay_s", "catchup_s",
             "restart_s", "restart_drag"]
    assert [i.name for i in cal.inputs] == names
    lines = text.splitlines()
    assert lines[0] == f"# FT-HSDP inputs calibrated from {results}"
    for name, line in zip(names, lines[1:]):
        assert line.split()[0] == name, line
    assert "given: 10 Gbit/s per host" in text and "10 min" in text and "ftar_stall_np4.json" in text
    with pytest.raises(KeyError, match="no input 'nothing'; the inputs are detection_s"):
        cal.input("nothing")


def test_a_calibrated_policy_simulates(results: Path) -> None:
    cal = calibrate(results, state_bytes=1e9, restart_s=300, step_s=2.0)
    r = simulate(Job(replicas=8, step_s=2.0), Failures(mtbf_s=1800), cal.policy, days=20, seed=1)
    assert 0.8 < r.ettr < 1.0 and abs(r.ettr - r.closed_form) < 0.01


@pytest.mark.parametrize("change,message", [
    (lambda d: (d / "ftar_stall.json").unlink() or (d / "ftar_stall_np4.json").unlink(), "no ftar_stall*.json"),
    (lambda d: (d / "ftar_catchup.json").write_text("{not json"), "ftar_catchup.json: cannot read it as JSON"),
    (lambda d: (d / "ftar_stall.json").write_text(json.dumps({"meta": {}, "reps": [{"detection_ms": 1}]})),
     "ftar_stall.json: reps[0] has no number 'reform_ms'"),
    (lambda d: catchup_file(d / "ftar_catchup.json", 0, [(1, 1, 1)]), "meta.state_bytes=0.0"),
    (lambda d: (d / "ftar_catchup.json").write_text(json.dumps({"meta": {"state_bytes": 8}, "cycles": [
        {"fetch_ms": 1, "load_ms": 1, "joiner_events": []}]})), "cycles[0] has no joiner event 'ready'"),
])
def test_bad_results_name_the_file_and_the_field(results: Path, change: Any, message: str) -> None:
    change(results)
    with pytest.raises(ValueError, match=re.escape(message)):
        read_measurements(results)


def test_bad_arguments_name_the_argument(results: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such directory"):
        read_measurements(tmp_path / "nowhere")
    for kwargs, message in [({"state_bytes": 0}, "state_bytes=0"), ({"state_bytes": 1e9, "hosts": 0}, "hosts=0"),
                            ({"state_bytes": 1e9, "link_bytes_per_s": -1}, "link_bytes_per_s=-1"),
                            ({"state_bytes": 1e9, "evict_s": float("nan")}, "evict_s=nan"),
                            ({"state_bytes": 1e9, "restart_drag": 2}, "restart_drag=2")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            calibrate(results, **kwargs)
    # A replay slower than a step would never end: 10 GB per pass at 10 GB/s against a 0.5 s step.
    with pytest.raises(ValueError, match=r"step_s=0.5: replaying one update \(1 s"):
        calibrate(results, state_bytes=10e9, step_s=0.5)
    # Results that do not say the eviction deadline: give one, or count crashes.
    stall_file(results / "ftar_stall.json", [(4, 1, 4)], evict_ms=2000)
    doc = json.loads((results / "ftar_stall.json").read_text())
    doc["meta"]["coordinator"] = ""
    (results / "ftar_stall.json").write_text(json.dumps(doc))
    (results / "ftar_stall_np4.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="give evict_s"):
        calibrate(results, state_bytes=1e9)
    assert calibrate(results, state_bytes=1e9, silent=False).policy.stall_s == pytest.approx(0.009)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "pymcoll", "ftar-sim", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_prints_where_each_input_came_from(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    proc = cli("--calibrate", str(results), "--model-gb", "100", "--link-gbps", "100", "--restart-min", "5",
               "--gpus", "1024", "--replicas", "8", "--mtbf-min", "60", "--step-s", "2", "--days", "20",
               "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"# FT-HSDP inputs calibrated from {results}"
    assert any(line.split()[0] == "stall_s" and "2 s" in line for line in lines), proc.stdout
    # 100 GB over the replica's 16 servers at 12.5 GB/s each: 0.5 s.
    assert any(line.split()[:3] == ["transfer_s", "500", "ms"] for line in lines), proc.stdout
    assert "ft-hsdp" in proc.stdout and "synchronous" in proc.stdout
    doc = json.loads(out.read_text())
    inputs = {i["name"]: i for i in doc["calibration"]["inputs"]}
    assert inputs["restart_s"]["value"] == 300 and inputs["restart_s"]["source"] == "given"
    assert doc["ft_hsdp"]["stall_s"] == pytest.approx(2.005) and doc["ft_hsdp"]["restart_s"] == 300
    crash = cli("--calibrate", str(results), "--model-gb", "1", "--process-failures", "--evict-s", "5", "--days", "5")
    assert crash.returncode == 0, crash.stderr
    assert re.search(r"^  stall_s +10 ms", crash.stdout, re.M), crash.stdout


@pytest.mark.parametrize("args,message", [
    (["--calibrate", "{dir}"], "--calibrate needs --model-gb"),
    (["--calibrate", "{dir}", "--model-gb", "1", "--stall-min", "3"], "--stall-min: --calibrate derives"),
    (["--model-gb", "1"], "--model-gb: only with --calibrate DIR"),
    (["--paper", "--calibrate", "{dir}", "--model-gb", "1"], "give one of the two"),
    (["--calibrate", "{dir}/nowhere", "--model-gb", "1"], "no such directory"),
])
def test_cli_bad_combinations(results: Path, args: list[str], message: str) -> None:
    proc = cli(*(a.format(dir=results) for a in args))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.skipif(not list((ROOT / "perf" / "results").glob("ftar_stall*.json"))
                    or not list((ROOT / "perf" / "results").glob("ftar_catchup*.json")),
                    reason="the checkout has no measured FTAR results")
def test_the_checkouts_measured_results_calibrate() -> None:
    m = read_measurements(ROOT / "perf" / "results")
    assert m.stall_kills >= 5 and m.catchups >= 4
    # A SIGKILLed process is found in milliseconds; the coordinator of those runs evicts after 2 s.
    assert 0 < m.detection_s < 0.1 and 0 < m.reform_s < m.detection_s and 0 < m.redo_s < 0.1
    assert m.evict_s == 2.0
    assert 0.05e9 < 1 / m.fetch_s_per_byte < 10e9 and 0 < m.restart_s < 5
    cal = calibrate(m, state_bytes=1e12, hosts=1000, link_bytes_per_s=12.5e9, restart_s=420)
    assert 2.0 < cal.policy.stall_s < 2.1 and 0 < cal.policy.catchup_s < 1
