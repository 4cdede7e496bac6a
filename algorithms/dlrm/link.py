"""Emulation of a slower network link on one machine, and the exchange's timers.

Ranks on one host exchange through shared memory, far faster than the
links between the hosts of a real cluster. :class:`LinkLimiter` makes an
exchange last as long as it would if every rank sat behind its own
full-duplex link of ``gbps`` gigabits per second: a call that moved
``out`` bytes to other ranks and ``in`` bytes from them returns no earlier
than ``latency + max(out, in) * 8 / (gbps * 1e9)`` seconds after it
started. Bytes a rank keeps for itself cross no link and are not counted.
The wait sleeps (the GIL is released), so a thread computing meanwhile
runs at full speed, as it would beside a real network transfer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional


class LinkLimiter:
    """Paces exchanges to `gbps` per rank (None or 0: no limit), plus `latency_us` per call."""

    def __init__(self, gbps: Optional[float], latency_us: float = 0.0) -> None:
        if gbps is not None and gbps < 0:
            raise ValueError(f"link_gbps={gbps}: a bandwidth in Gb/s > 0 (or None for no limit)")
        if latency_us < 0:
            raise ValueError(f"latency_us={latency_us}: use 0 or more microseconds")
        self.gbps = gbps or None
        self.latency_s = latency_us * 1e-6
        self.slept_s = 0.0

    @property
    def active(self) -> bool:
        return self.gbps is not None or self.latency_s > 0

    def transfer_seconds(self, sent_bytes: int, received_bytes: int) -> float:
        """How long the emulated link needs for a call moving these bytes."""
        wire = 0.0 if self.gbps is None else max(sent_bytes, received_bytes) * 8.0 / (self.gbps * 1e9)
        return self.latency_s + wire

    def pace(self, started: float, sent_bytes: int, received_bytes: int) -> None:
        """Sleeps until the link would have finished a call begun at `started` (time.perf_counter())."""
        if not self.active:
            return
        left = started + self.transfer_seconds(sent_bytes, received_bytes) - time.perf_counter()
        if left > 0:
            time.sleep(left)
            self.slept_s += left


@dataclass
class ExchangeTimer:
    """Seconds, calls and bytes sent to other ranks, per named exchange."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    sent_bytes: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, seconds: float, sent_bytes: int) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1
        self.sent_bytes[name] = self.sent_bytes.get(name, 0) + sent_bytes

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.sent_bytes.clear()

    def total(self) -> float:
        return sum(self.seconds.values())
