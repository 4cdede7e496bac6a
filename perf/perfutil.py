"""What the DLRM and compression benchmarks share: the commit they measured and a headless pyplot."""

from __future__ import annotations

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
