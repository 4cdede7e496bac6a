"""What FTAR's test replicas share: options, events on stdout, inputs whose sum names its contributors."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from typing import Any

import numpy as np


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--coordinator", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--integrity", action="store_true")
    p.add_argument("--chunk-bytes", type=int, default=64 * 1024)
    p.add_argument("--start-file", default="", help="after 'ready', wait for this file before the first step")
    return p


def ready_and_wait(path: str) -> None:
    """Says 'ready' and waits for the harness's go (a file), so that a test's
    replicas enter their first quorum together."""
    import os

    emit("ready")
    end = time.monotonic() + 60
    while path and not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.01)


def emit(ev: str, **fields: Any) -> None:
    """One JSON event per line, flushed at once (the harness reads them live)."""
    fields["ev"] = ev
    fields["t"] = time.monotonic()
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def marked_input(number: int, step: int, dim: int) -> np.ndarray:
    """Integer-valued float32 input of replica `number` at `step`; element 0 is
    2**number, so a sum's element 0 is the bit mask of who contributed."""
    g = np.random.default_rng([number, step]).integers(-8, 9, dim).astype(np.float32)
    g[0] = float(1 << number)
    return g


def check_sum(result: np.ndarray, step: int, n_contrib: int) -> tuple[int, bool]:
    """(contributor mask, whether result is exactly their inputs' sum)."""
    mask = int(result[0])
    members = [k for k in range(24) if mask >> k & 1]
    want = np.zeros(result.shape, np.float64)
    for k in members:
        want += marked_input(k, step, result.size)
    exact = float(result[0]) == mask and len(members) == n_contrib and bool(np.array_equal(want, result))
    return mask, exact


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
