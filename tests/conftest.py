"""Launching MPI programs from pytest.

Each MPI test runs ``mpiexec -n N python -m mpi_programs.<name>`` in a
subprocess with a timeout, so a hang fails fast. The programs live in
tests/mpi_programs and run with tests/ as the working directory, which keeps
the source tree's pymcoll/ (without its compiled core) off sys.path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

pytest_plugins = ["pymcoll.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@lru_cache(maxsize=1)
def mpi_flavor() -> str:
    """'openmpi' or 'mpich', from the mpiexec on PATH."""
    exe = shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpiexec not found on PATH: install an MPI (pip install mpich)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    text = (out.stdout + out.stderr).lower()
    return "openmpi" if "open mpi" in text or "open-rte" in text else "mpich"


def mpiexec_command(n: int) -> list[str]:
    """mpiexec prefix for n ranks (oversubscription allowed)."""
    cmd = ["mpiexec", "-n", str(n)]
    if mpi_flavor() == "openmpi":
        cmd += ["--oversubscribe", "--bind-to", "none"]
    return cmd


def launcher_env(settings: dict[str, str]) -> list[str]:
    """mpiexec flags that set environment variables in the ranks only (not in mpiexec itself)."""
    flags: list[str] = []
    for key, value in settings.items():
        flags += ["-x", f"{key}={value}"] if mpi_flavor() == "openmpi" else ["-genv", key, value]
    return flags


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for an MPI launch: ours plus `extra` (a value of None removes)."""
    env = dict(os.environ)
    if mpi_flavor() == "openmpi":
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    for k in list(env):
        if k.startswith("PYMCOLL_"):
            del env[k]
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_mpi(n: int, program: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess:
    """Run tests/mpi_programs/<program>.py on n ranks; fail the test on error or hang."""
    cmd = mpiexec_command(n) + [sys.executable, "-m", f"mpi_programs.{program}", *args]
    try:
        proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(env), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}")
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}"
                    f"\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture
def mpirun():
    """The run_mpi function, as a fixture."""
    return run_mpi
