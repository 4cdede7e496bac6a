"""The dual-level adaptive error bound: per table, and per training iteration.

Table level: a table's pooled embeddings get a bound by how many rows the
table has (its cardinality): high-cardinality tables, whose batches hold many
distinct rows and feed the model most of its signal, get the tightest bound;
tiny tables the loosest. Defaults are the source paper's three levels: 0.01
for tables of at least ``high_rows`` rows, 0.05 for tables of at most
``low_rows``, 0.03 otherwise. ``measure=True`` chooses the level from a
measured statistic instead: the share of distinct rows in the block being
sent (many distinct rows: tight; few: loose).

Iteration level: the bound is multiplied by a factor that starts at
``start`` (2) and reaches ``end`` (1) over the first ``phase`` iterations,
with a ``"step"``, ``"linear"`` or ``"exponential"`` schedule; early
training tolerates more error, later training less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

SCHEDULES = ("step", "linear", "exponential")


@dataclass(frozen=True)
class TableBounds:
    """Relative error bound of a table by its cardinality (or a measured share of distinct rows)."""

    high: float = 0.01
    mid: float = 0.03
    low: float = 0.05
    high_rows: int = 100_000
    low_rows: int = 1_000
    measure: bool = False
    high_share: float = 0.5  # with measure: at least this share of distinct rows -> `high`
    low_share: float = 0.05  # with measure: at most this share -> `low`

    def __post_init__(self) -> None:
        for name in ("high", "mid", "low"):
            v = getattr(self, name)
            if not v > 0 or math.isinf(v):
                raise ValueError(f"{name}={v}: a relative error bound must be finite and > 0")
        if self.low_rows >= self.high_rows:
            raise ValueError(f"low_rows={self.low_rows} must be below high_rows={self.high_rows}")
        if not 0 <= self.low_share < self.high_share <= 1:
            raise ValueError(f"low_share={self.low_share}, high_share={self.high_share}: need 0 <= low < high <= 1")

    def bound(self, table_rows: int, block: Optional[np.ndarray] = None) -> float:
        """The bound of a table of `table_rows` rows (or of `block`, with measure=True)."""
        if self.measure and block is not None and block.shape[0] > 0:
            share = len(np.unique(block, axis=0)) / block.shape[0]
            return self.high if share >= self.high_share else self.low if share <= self.low_share else self.mid
        if table_rows >= self.high_rows:
            return self.high
        if table_rows <= self.low_rows:
            return self.low
        return self.mid


@dataclass(frozen=True)
class IterationSchedule:
    """The bound's multiplier per iteration: `start` at iteration 0, `end` from iteration `phase` on."""

    start: float = 2.0
    end: float = 1.0
    phase: int = 1000
    kind: str = "step"
    steps: int = 2  # "step": how many levels from start to end (2: start, then end)

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"kind={self.kind!r}: use one of {', '.join(SCHEDULES)}")
        if not (self.start > 0 and self.end > 0):
            raise ValueError(f"start={self.start}, end={self.end}: multipliers must be > 0")
        if self.phase < 0:
            raise ValueError(f"phase={self.phase}: a number of iterations >= 0")
        if self.steps < 2:
            raise ValueError(f"steps={self.steps}: a step schedule needs at least 2 levels")

    def multiplier(self, iteration: int) -> float:
        if iteration >= self.phase:
            return self.end
        t = iteration / self.phase
        if self.kind == "linear":
            return self.start + (self.end - self.start) * t
        if self.kind == "exponential":
            return self.start * (self.end / self.start) ** t
        level = math.floor(t * (self.steps - 1) + 1e-12) if self.steps > 2 else 0
        return self.start + (self.end - self.start) * level / (self.steps - 1)


@dataclass(frozen=True)
class AdaptiveBound:
    """Table level x iteration level: the relative bound of a block of `table_rows` at `iteration`."""

    tables: TableBounds = TableBounds()
    schedule: IterationSchedule = IterationSchedule()

    def __call__(self, table_rows: int, iteration: int, block: Optional[np.ndarray] = None) -> float:
        return self.tables.bound(table_rows, block) * self.schedule.multiplier(iteration)
