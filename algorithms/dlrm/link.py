"""Emulation of a slower network link on one machine, and the exchange's timers.

Ranks on one host exchange through shared memory, far faster than the
links between the hosts of a real cluster. :class:`LinkLimiter` makes an
exchange last as long as it would if every rank sat behind its own
full-duplex link of ``gbps`` gigabits per second: a call that moved
``out`` bytes to other ranks and ``in`` bytes from them returns no earlier
than ``latency + max(out, in) * 8 / (gbps * 1e9)`` seconds after it
started. Bytes a rank keeps for itself cross no link and are not counted.

Two terms make it a closer stand-in for a real TCP link (:meth:`LinkLimiter.tcp`): the share of
the bytes on the wire that is payload (``efficiency``; TCP over Ethernet at an MTU of 1500 carries
1448 bytes of payload in a 1514-byte frame, 0.956), and the host's network stack, whose CPU time
per byte adds to the wire's (``stack_gbps``: the payload rate one host's stack reaches on an
unlimited link). On pymcoll's multi-host test bed the raw exchange over tbf-limited links runs
5-15% slower than the bare-wire limiter at 1-4 Gb/s, and within 1% of the limiter with both
terms (perf/studies/compression.md).
The wait sleeps (the GIL is released), so a thread computing meanwhile
runs at full speed, as it would beside a real network transfer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional


#: Payload share of a TCP segment's Ethernet frame at an MTU of 1500 with timestamps (1448 / 1514).
TCP_ETHERNET_EFFICIENCY = 1448 / 1514


class LinkLimiter:
    """Paces exchanges to `gbps` per rank (None or 0: no limit), plus `latency_us` per call.

    Args:
        gbps: the link's rate in Gb/s (None or 0: no limit).
        latency_us: added to every call.
        efficiency: payload bytes per byte on the wire (0 < efficiency <= 1; 1: none lost).
        stack_gbps: the host's network stack's payload rate in Gb/s, paid per byte on top of the
            wire (None: free, as with a NIC that needs no CPU per byte).
    """

    def __init__(self, gbps: Optional[float], latency_us: float = 0.0, *, efficiency: float = 1.0,
                 stack_gbps: Optional[float] = None) -> None:
        if gbps is not None and gbps < 0:
            raise ValueError(f"link_gbps={gbps}: a bandwidth in Gb/s > 0 (or None for no limit)")
        if latency_us < 0:
            raise ValueError(f"latency_us={latency_us}: use 0 or more microseconds")
        if not 0 < efficiency <= 1:
            raise ValueError(f"efficiency={efficiency}: the payload share of the wire's bytes, in (0, 1]")
        if stack_gbps is not None and not stack_gbps > 0:
            raise ValueError(f"stack_gbps={stack_gbps}: the stack's rate in Gb/s > 0 (or None: free)")
        self.gbps = gbps or None
        self.latency_s = latency_us * 1e-6
        self.efficiency = float(efficiency)
        self.stack_gbps = stack_gbps
        self.slept_s = 0.0

    @classmethod
    def tcp(cls, gbps: float, latency_us: float = 0.0, stack_gbps: Optional[float] = None) -> "LinkLimiter":
        """A TCP link over Ethernet (MTU 1500) of `gbps` line rate, with the host stack's rate."""
        return cls(gbps, latency_us, efficiency=TCP_ETHERNET_EFFICIENCY, stack_gbps=stack_gbps)

    @property
    def active(self) -> bool:
        return self.gbps is not None or self.latency_s > 0

    def transfer_seconds(self, sent_bytes: int, received_bytes: int) -> float:
        """How long the emulated link needs for a call moving these bytes."""
        if self.gbps is None:
            return self.latency_s
        bits = max(sent_bytes, received_bytes) * 8.0
        stack = 0.0 if self.stack_gbps is None else bits / (self.stack_gbps * 1e9)
        return self.latency_s + bits / (self.gbps * self.efficiency * 1e9) + stack

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
