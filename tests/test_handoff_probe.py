"""perf/handoff_probe.c, the check of how steady a machine's core-to-core
handoff is before benchmarking: it builds warning-free and prints its rates."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import TESTS_DIR

SOURCE = os.path.join(os.path.dirname(TESTS_DIR), "perf", "handoff_probe.c")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    exe = str(tmp_path_factory.mktemp("probe") / "handoff_probe")
    subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe, SOURCE],
                   check=True, capture_output=True, timeout=120)
    return exe


def test_one_round_prints_eight_rates_and_a_memcpy(probe: str) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    proc = subprocess.run([probe, "1", str(cpus[0]), str(cpus[1])], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    assert len(lines) == 1, proc.stdout
    rates = re.fullmatch(r"((?:\s*\d+\.\d)+) \| memcpy\s+(\d+\.\d)", lines[0].strip())
    assert rates is not None, lines[0]
    assert len(rates.group(1).split()) == 8 and all(float(x) > 0 for x in rates.group(1).split())


def test_bad_rounds_is_refused_with_a_message(probe: str) -> None:
    proc = subprocess.run([probe, "0"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "ROUNDS" in proc.stderr


def test_a_cpu_it_may_not_use_fails_with_a_message(probe: str) -> None:
    unusable = max(os.sched_getaffinity(0)) + 1
    proc = subprocess.run([probe, "1", "0", str(unusable)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "round failed" in proc.stderr
