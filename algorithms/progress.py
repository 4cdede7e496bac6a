"""A one-line progress bar for long training runs, printed by one rank."""

from __future__ import annotations

import sys
import time


class Progress:
    """A one-line progress bar on stderr (a line per 10% when not a terminal); steps
    from `start` (a resumed run) to `total`; silent unless `enabled` (e.g. rank 0 only)."""

    def __init__(self, total: int, start: int, enabled: bool) -> None:
        self.total, self.start, self.enabled = total, start, enabled
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last_decile = -1

    def update(self, step: int, loss: float) -> None:
        """Shows `step` of the total with the current (smoothed) loss, the rate and the time left."""
        if not self.enabled:
            return
        done = step - self.start
        rate = done / max(time.perf_counter() - self.t0, 1e-9)
        left = (self.total - step) / rate if rate > 0 else 0.0
        frac = step / self.total
        bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
        line = f"[{bar}] {step}/{self.total} loss {loss:.4f} {rate:.1f} steps/s eta {left:.0f}s"
        if self.tty:
            print("\r" + line, end="" if step < self.total else "\n", file=sys.stderr, flush=True)
        elif int(10 * frac) != self.last_decile:
            self.last_decile = int(10 * frac)
            print(line, file=sys.stderr, flush=True)
