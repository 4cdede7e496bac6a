"""Starting a command on N ranks when the user did not start it under mpiexec."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from typing import Optional, Sequence

DEFAULT_TIMEOUT_S = 900.0

# Environment variables that process managers set in the processes they start.
LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "PMIX_RANK", "PMIX_NAMESPACE",
               "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "MPI_LOCALNRANKS")
LAUNCH_PREFIXES = ("HYDRA_", "OMPI_COMM_WORLD_", "PMIX_")


def default_np() -> int:
    """Ranks to start when not under mpiexec: min(CPUs, 4), at least 2."""
    return max(2, min(os.cpu_count() or 2, 4))


def one_rank_per_core() -> int:
    """Ranks of a benchmark started without mpiexec: one per online CPU, at least 2."""
    return max(2, os.cpu_count() or 2)


def python_command(module: str, *args: str) -> list[str]:
    """``python -P -m module args``: -P (Python 3.11+) keeps a checkout's
    pymcoll/ folder in the working directory from shadowing the installed package."""
    safe = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe, "-m", module, *args]


def is_launched() -> bool:
    """Whether this process was started by mpiexec (or another process manager)."""
    if any(v in os.environ for v in LAUNCH_VARS):
        return True
    if any(k.startswith(LAUNCH_PREFIXES) for k in os.environ):
        return True
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size() > 1


def find_mpiexec(explicit: Optional[str] = None) -> str:
    """The mpiexec to use: `explicit`, else the one next to this Python (a venv with
    the PyPI MPI wheel), else the first on PATH. Raises FileNotFoundError with the fix."""
    if explicit:
        path = shutil.which(explicit)
        if path is None:
            raise FileNotFoundError(f"--mpiexec={explicit!r}: no such executable; pass the path of "
                                    f"the mpiexec of the MPI mpi4py uses")
        return path
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    path = shutil.which("mpiexec")
    if path is None:
        raise FileNotFoundError(
            "mpiexec not found next to this Python or on PATH: put the MPI's bin directory on PATH, "
            "pass --mpiexec PATH, or start the job yourself with mpiexec -n 2 python -m ...")
    return path


def mpiexec_flavor(mpiexec: str) -> str:
    """'openmpi', 'mpich' or 'unknown', from ``mpiexec --version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "open mpi" in text or "openrte" in text or "open-mpi" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    return "unknown"


def mpiexec_command(np_: int, program: Sequence[str],
                    mpiexec: Optional[str] = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start `program` on `np_` ranks.

    Open MPI gets ``--oversubscribe`` when `np_` exceeds the CPUs, and the
    run-as-root permission variables when running as root.
    """
    if not isinstance(np_, int) or np_ < 1:
        raise ValueError(f"--np={np_!r}: expected a number of ranks >= 1")
    exe = find_mpiexec(mpiexec)
    env = dict(os.environ)
    cmd = [exe]
    if mpiexec_flavor(exe) == "openmpi":
        if np_ > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    cmd += ["-n", str(np_), *program]
    return cmd, env


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End the process group of `proc` (a session we started): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_under_mpiexec(np_: int, program: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S,
                      mpiexec: Optional[str] = None,
                      hint: str = "or measure fewer sizes (--max-bytes) or iterations (--iters)") -> int:
    """Run `program` under ``mpiexec -n np_`` and return its exit status.

    Output goes straight through. After `timeout` seconds the job is ended and
    124 is returned (the status of coreutils' timeout); Ctrl-C ends it with 130.
    """
    if timeout <= 0:
        raise ValueError(f"--timeout={timeout!r}: expected seconds > 0")
    cmd, env = mpiexec_command(np_, program, mpiexec)
    print(f"pymcoll: not started by mpiexec; running: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        print(f"pymcoll: the job ran past --timeout={timeout:g} s and was stopped; raise --timeout "
              f"{hint}", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        _kill_group(proc)
        return 130


