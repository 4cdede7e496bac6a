"""What the DLRM and compression benchmarks share: the commit they measured and a headless pyplot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent


def commit() -> str:
    """The checkout's short commit hash, "unknown" outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


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


def run_worker(np_: int, script: str, args: list[str], timeout: float) -> Optional[dict[str, Any]]:
    """Runs `script` with `args` under mpiexec on `np_` ranks and returns the JSON its rank 0 printed
    on a line ``RESULT {...}``; None (with the output's tail on stderr) when it failed or printed none."""
    from pymcoll.cli import launch  # the project's mpiexec command line

    cmd, env = launch.mpiexec_command(np_, [sys.executable, "-P", str(Path(script).resolve()), *args])
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(line[len("RESULT "):])
