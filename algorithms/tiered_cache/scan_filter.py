"""Scan resistance for the learned policy's real fast tier: rows that arrive in a sequential run
of ids wait in a small probation area instead of pushing the leader's rows out.

A sequential scan (ids ``i, i+1, i+2, ...`` looked up one after the other,
as a table scan or an export reads them) brings rows that are seldom looked
up again soon. The classical policies the tier follows take them in very
differently: LFU keeps its counted rows, while ARC and LRU may hand most of
their contents to the scan. When the guard follows such a policy, the real
tier loses its hot rows with it and pays again to fetch them. A row whose
lookup is the last of `run` lookups in a row that each looked up the id
before + 1, and that misses, enters probation: at most `hold` such rows stay in the tier, and once that
many are held the oldest of them goes before any other row. A probation row
that is hit becomes an ordinary row.

Probation is a bet, so it is measured on the stream being served, in the
spirit of the guard. Each time probation evicts a row, the row the tier
would have evicted otherwise is noted as spared; a later hit on a spared
row is a gain, and a later miss on a row probation evicted, at a lookup
where the policy the tier follows held it, is a regret (the last capacity's
worth of spared rows and four capacities' worth of evicted rows are
remembered). Gains and regrets are decayed sums (half-life `half_life`
lookups); once the regrets exceed the gains by `slack` rows (an eighth of
the capacity, at least 16), probation turns off for a cool-down (32
capacities, doubled each time it turns off again) and its rows become
ordinary rows. A stream that reads the same sequential range over and over
thus keeps the tier's ordinary behaviour after a few misses.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Callable, Container, Optional

import numpy as np

_NOTHING: frozenset = frozenset()


class ScanFilter:
    """Sequential-run detection and the probation area of one fast tier (see the module docstring).

    `run`: how many lookups in a row, each of the id before + 1, make a
    scan (at least 2). `hold_share`: the probation area, as a share of the
    capacity (at least one row).
    """

    def __init__(self, run: int = 8, hold_share: float = 0.01) -> None:
        if run < 2:
            raise ValueError(f"scan_run must be at least 2 lookups (or None: no scan filter), got {run}")
        if not 0.0 < hold_share < 1.0:
            raise ValueError(f"scan_hold must be a share of the capacity in (0, 1), got {hold_share}")
        self.run = int(run)
        self.hold_share = float(hold_share)
        self.reset(1, 1024.0)

    def reset(self, capacity: int, half_life: float) -> None:
        """Forget the stream: a new capacity (rows) and the decay's half-life (lookups)."""
        self.capacity = max(1, int(capacity))
        self.hold = max(1, int(self.hold_share * self.capacity))
        self.half_life = float(half_life)
        self.slack = float(max(16, self.capacity // 8))
        self.probation: "OrderedDict[int, None]" = OrderedDict()
        self._ghost: "OrderedDict[int, None]" = OrderedDict()    # rows probation evicted
        self._spared: "OrderedDict[int, None]" = OrderedDict()   # rows kept instead of them
        self._prev = (-2, 0)       # the last id looked up, and the run of +1 steps ending there
        self._flags: Optional[tuple[int, list]] = None
        self.gain = self.regret = 0.0
        self._last_t = 0
        self.on = True
        self._off_until = 0
        self._cooldown = 32 * self.capacity
        self.evictions = 0         # rows evicted from probation
        self.turned_off = 0        # times the measurement turned it off
        self.gains = self.regrets = 0

    # -- the stream -----------------------------------------------------------------
    def batch(self, ids: np.ndarray, t0: int) -> None:
        """Mark the lookups of the batch at `t0` that end a sequential run (runs go on across batches)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            self._flags = (t0, [])
            return
        prev_id, prev_run = self._prev
        step = np.empty(ids.size, dtype=bool)
        step[0] = ids[0] == prev_id + 1
        step[1:] = ids[1:] == ids[:-1] + 1
        k = np.arange(ids.size)
        last_break = np.maximum.accumulate(np.where(step, -1, k))
        run = np.where(last_break < 0, k + 1 + prev_run, k - last_break)
        self._prev = (int(ids[-1]), int(run[-1]))
        scan = run >= self.run
        self._flags = (t0, scan.tolist()) if scan.any() else None
        if not self.on and t0 >= self._off_until:
            self.on = True

    def _scan_at(self, t: int) -> bool:
        f = self._flags
        return f is not None and 0 <= t - f[0] < len(f[1]) and f[1][t - f[0]]

    def _decay(self, t: int) -> None:
        if t > self._last_t:
            fade = 0.5 ** ((t - self._last_t) / self.half_life)
            self.gain *= fade
            self.regret *= fade
            self._last_t = t

    # -- the tier's events ----------------------------------------------------------
    def hit(self, row: int, t: int) -> None:
        """`row` was looked up at `t` and held."""
        self.probation.pop(row, None)
        if row in self._spared:
            del self._spared[row]
            self._decay(t)
            self.gain += 1.0
            self.gains += 1

    def entered(self, row: int, t: int, leader_held: Callable[[int], bool]) -> None:
        """`row` was looked up at `t`, missed and came in; `leader_held(t)`: whether the policy the tier
        follows held it (so the tier would have, but for probation)."""
        if row in self._ghost and leader_held(t):
            del self._ghost[row]
            self._decay(t)
            self.regret += 1.0
            self.regrets += 1
            if self.regret > self.gain + self.slack:
                self._turn_off(t)
        if self.on and self._scan_at(t):
            self.probation[row] = None

    def removed(self, row: int) -> None:
        """`row` left the tier."""
        self.probation.pop(row, None)
        self._spared.pop(row, None)

    def _turn_off(self, t: int) -> None:
        self.on = False
        self.turned_off += 1
        self._off_until = t + self._cooldown
        self._cooldown *= 2
        self.probation.clear()
        self._ghost.clear()
        self._spared.clear()
        self.gain = self.regret = 0.0

    @staticmethod
    def _remember(d: "OrderedDict[int, None]", row: int, limit: int) -> None:
        d[row] = None
        d.move_to_end(row)
        while len(d) > limit:
            d.popitem(last=False)

    # -- choosing what goes -----------------------------------------------------------
    def _free(self, pinned: Container[int]) -> list[int]:
        """Probation rows not in `pinned`, oldest first, as many as victim() could take in a row: while
        the unpinned ones fill the area (pinned rows count as gone)."""
        if len(self.probation) < self.hold:
            return []
        if not pinned:
            return list(islice(self.probation, len(self.probation) - self.hold + 1))
        free = [r for r in self.probation if r not in pinned]
        return free[:max(0, len(free) - self.hold + 1)]

    def victim(self, pinned: Container[int], usual: Callable[[], int]) -> Optional[int]:
        """The oldest probation row while the area is full (None: the tier's own choice, `usual`,
        applies); notes the row `usual` would have evicted instead as spared."""
        if len(self.probation) < self.hold:
            return None
        if not pinned:
            row = next(iter(self.probation))
        else:
            free = self._free(pinned)
            if not free:
                return None
            row = free[0]
        spared = usual()
        self.evictions += 1
        self._remember(self._ghost, row, 4 * self.capacity)
        if spared != row:
            self._remember(self._spared, spared, self.capacity)
        return row

    def victims(self, k: int, skip: Container[int] = _NOTHING) -> list[int]:
        """The next `k` rows victim() would take from probation with `skip` pinned, none removed."""
        return self._free(skip)[:k]
