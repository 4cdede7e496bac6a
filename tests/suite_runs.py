"""Launching a public test suite's runner under mpiexec and reading its verdicts.

The runners (mpi_programs/mpi4py_suite.py, mpi_programs/torch_suite.py) log each test's start
and end per rank and print one JSON summary line; a hang names the test each rank was in.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from conftest import TESTS_DIR, mpi_env, mpiexec_command
from mpi_programs.suite_result import ORDER

Launcher = Callable[[int, list, dict, float], subprocess.CompletedProcess]


def launch_here(n: int, program: list[str], env: dict[str, str | None], timeout: float) -> subprocess.CompletedProcess:
    """`program` on n ranks of this machine; TimeoutExpired past `timeout`."""
    return subprocess.run(mpiexec_command(n) + program, cwd=TESTS_DIR, env=mpi_env(env), capture_output=True,
                          text=True, timeout=timeout)


def run_suite(n: int, program: list[str], out: Path, env: dict[str, str | None], timeout: float,
              launch: Launcher = launch_here) -> dict:
    """The runner's summary; fails the test on a hang (naming each rank's last test) or a bad exit."""
    try:
        proc = launch(n, program, env, timeout)
    except subprocess.TimeoutExpired:
        last = {}
        for log in sorted(out.glob("rank*.jsonl")):
            lines = log.read_text().splitlines()
            last[log.name] = lines[-1] if lines else "(no test started)"
        pytest.fail(f"{' '.join(program)} hung for {timeout} s; last line per rank: {last}")
    summary = [line for line in proc.stdout.splitlines() if line.startswith('{"outcomes"')]
    if proc.returncode != 0 or not summary:
        pytest.fail(f"{' '.join(program)} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                    f"\n--- stderr\n{proc.stderr[-6000:]}")
    return json.loads(summary[0])


def verdicts(result: dict) -> dict[str, str]:
    """One outcome per test: the same on every rank, else the worst."""
    return {tid: max(outs, key=ORDER.index) for tid, outs in result["outcomes"].items()}
