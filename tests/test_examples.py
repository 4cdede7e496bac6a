"""The runnable examples do what their docstrings say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import TESTS_DIR, mpi_env, mpiexec_command

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_testing_example_finds_the_planted_precision_bug() -> None:
    cmd = mpiexec_command(3) + [sys.executable, "-P", str(EXAMPLES / "testing_planted_bug.py")]
    proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mpi4py_part, mine = proc.stdout.split("--- MyComm")
    assert "all passed" in mpi4py_part
    assert "1 failure(s)" in mine and "too narrow a precision" in mine
    count = int(re.search(r"dtype='float64', count=(\d+)", mine).group(1))
    assert 1024 < count * 8 <= 1032, mine  # shrunk to just above the 1 KiB threshold
