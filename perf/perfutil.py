"""What the perf scripts share: the facts of a run (commit, versions, cores), starting themselves or a
worker under mpiexec, a headless pyplot, and writing the results file with its figure."""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

HERE = Path(__file__).resolve().parent


def _git(*args: str) -> Optional[str]:
    """Output of a git command on the checkout these scripts sit in; None outside one."""
    try:
        out = subprocess.run(["git", "-C", str(HERE), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def commit() -> str:
    """The checkout's short commit hash, "unknown" outside a git checkout."""
    return _git("rev-parse", "--short", "HEAD") or "unknown"


def source_state() -> dict[str, Any]:
    """The checkout's short commit and whether tracked files have local changes (None: unknown)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"source_commit": _git("rev-parse", "--short", "HEAD"),
            "source_dirty": bool(status) if status is not None else None}


def run_record(**fields: Any) -> dict[str, Any]:
    """The head of a results file: today's date, the checkout's commit, the versions of pymcoll
    (as installed: importing it would start MPI in a launcher), Python and numpy, the CPUs and
    the load average; then `fields`."""
    import numpy as np

    try:
        version = metadata.version("pymcoll")
    except metadata.PackageNotFoundError:
        version = "not installed"
    return {"date": datetime.date.today().isoformat(), "commit": commit(), "pymcoll": version,
            "python": platform.python_version(), "numpy": np.__version__, "cores": os.cpu_count(),
            "loadavg": list(os.getloadavg()), **fields}


def pyplot(script: str) -> Optional[Any]:
    """matplotlib.pyplot on the Agg backend, or None (with a note naming `script`) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{script}: matplotlib not installed (pip install matplotlib): no plot", file=sys.stderr)
        return None
    return plt


def plotter(script: str, *, dpi: int = 110,
            rect: Optional[tuple[float, ...]] = None) -> Callable[[Callable[..., Any]], Callable[..., bool]]:
    """Turns ``draw(plt, *data) -> figure or None`` into ``plot(*data, path) -> bool``: pyplot on
    the Agg backend is passed in, the figure is laid out (within `rect`, e.g. below a suptitle),
    written to `path` at `dpi` and closed. The plot returns False when there is nothing to write:
    matplotlib is missing (a note naming `script` on stderr) or `draw` returned None."""

    def wrap(draw: Callable[..., Any]) -> Callable[..., bool]:
        @functools.wraps(draw)
        def plot(*args: Any) -> bool:
            *data, path = args
            plt = pyplot(script)
            fig = draw(plt, *data) if plt is not None else None
            if fig is None:
                return False
            fig.tight_layout(**({} if rect is None else {"rect": rect}))
            fig.savefig(path, dpi=dpi)
            plt.close(fig)
            return True
        return plot
    return wrap


def write_results(doc: dict[str, Any], out: Path, plot: Optional[Callable[[dict[str, Any], Path], bool]]) -> None:
    """Writes `doc` to the JSON file `out` (its folder made when missing) and, with `plot`, its figure
    next to it (`out` with .png; `plot` returns False when it drew none); prints what was written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    png = out.with_suffix(".png")
    drawn = plot is not None and plot(doc, png)
    print(f"wrote {out}" + (f" and {png}" if drawn else ""))


def launch_self(script: str, np_: int, argv: Sequence[str], *, mpiexec: Optional[str] = None,
                timeout: float, hint: str = "") -> int:
    """Runs `script` with `argv` and ``--launched`` under ``mpiexec -n np_``; the job's exit status
    (124 when it ran past `timeout` seconds, 2 when no mpiexec was found).

    The command line is pymcoll's (the mpiexec next to this Python, or `mpiexec`; Open MPI's
    run-as-root variables), with Open MPI's --oversubscribe when the ranks outnumber the CPUs this
    process may run on (os.sched_getaffinity, which can be fewer than os.cpu_count). On a timeout
    or an interrupt the job's whole session (mpiexec and its ranks) is stopped. `hint` ends the
    timeout's message (what to shorten).
    """
    from pymcoll.cli import launch  # the project's mpiexec command line

    name = Path(script).stem
    program = [sys.executable, os.path.abspath(script), *argv, "--launched"]
    try:
        cmd, env = launch.mpiexec_command(np_, program, mpiexec)
    except (FileNotFoundError, ValueError) as exc:
        print(f"{Path(script).name}: {exc}", file=sys.stderr)
        return 2
    if (launch.mpiexec_flavor(cmd[0]) == "openmpi" and "--oversubscribe" not in cmd
            and np_ > len(os.sched_getaffinity(0))):
        cmd.insert(1, "--oversubscribe")
    print(f"{name}: running: {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"{name}: the job ran past --timeout={timeout:g} s and was stopped" + (f"; {hint}" if hint else ""),
              file=sys.stderr)
        status = 124
    except KeyboardInterrupt:
        status = 130
    # Stop the session we started (mpiexec and its ranks): TERM, then KILL.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=5)
            break
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue
    return status


def add_launch_options(ap: Any, timeout: float) -> None:
    """--out, --timeout and the hidden --launched of a self-launching benchmark (worker_or_launch)."""
    import argparse

    ap.add_argument("--out", default=None, help="results JSON (a PNG is written beside it)")
    ap.add_argument("--timeout", type=float, default=timeout, help="seconds before the job is stopped")
    ap.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)


def require_known(ap: Any, option: str, given: Sequence[str], known: Sequence[str]) -> None:
    """Stops with a usage error naming `option` when `given` holds names outside `known`."""
    bad = [g for g in given if g not in known]
    if bad:
        ap.error(f"{option}: {', '.join(bad)} not among {', '.join(known)}")


def worker_or_launch(script: str, a: Any, worker: Callable[[Any], None], hint: str = "") -> int:
    """The end of a self-launching benchmark's main: in the ranks (``a.launched``) runs
    ``worker(a)``; otherwise starts `script` on ``a.np`` ranks with this command line plus
    ``--out a.out`` (launch_self, with ``a.timeout`` and `hint`). Returns the exit status."""
    if a.launched:
        worker(a)
        return 0
    return launch_self(script, a.np, sys.argv[1:] + ["--out", a.out], timeout=a.timeout, hint=hint)


def run_worker(np_: int, script: str, args: list[str], timeout: float,
               mpiexec: Optional[str] = None) -> Optional[dict[str, Any]]:
    """Runs `script` with `args` under `mpiexec` (default: the one next to this Python) on `np_` ranks
    and returns the JSON its rank 0 printed on a line ``RESULT {...}``; None (with the output's tail
    on stderr) when it failed or printed none."""
    from pymcoll.cli import launch  # the project's mpiexec command line

    cmd, env = launch.mpiexec_command(np_, [sys.executable, "-P", str(Path(script).resolve()), *args], mpiexec)
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(line[len("RESULT "):])
