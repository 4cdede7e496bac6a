"""The emulated link: a paced call lasts as long as its bytes need on the
link (out or in, whichever is larger), and sleeping is all it does."""

from __future__ import annotations

import time

import pytest

from pymcoll.algorithms.dlrm.link import ExchangeTimer, LinkLimiter


def test_transfer_time_is_the_larger_direction_over_the_bandwidth() -> None:
    link = LinkLimiter(1.0, latency_us=50)
    assert link.transfer_seconds(125_000_000, 1000) == pytest.approx(1.0 + 50e-6)
    assert link.transfer_seconds(1000, 250_000_000) == pytest.approx(2.0 + 50e-6)
    assert LinkLimiter(None).transfer_seconds(10**9, 10**9) == 0.0
    assert not LinkLimiter(None).active and not LinkLimiter(0).active


def test_pace_waits_out_the_rest_of_the_transfer() -> None:
    link = LinkLimiter(0.08)  # 10 MB/s: 200 kB take 20 ms
    started = time.perf_counter()
    link.pace(started, 200_000, 0)
    took = time.perf_counter() - started
    assert 0.019 <= took < 0.2
    assert link.slept_s == pytest.approx(took, abs=0.005)
    # A call that already took longer than the link needs is not delayed.
    before = time.perf_counter()
    link.pace(before - 1.0, 200_000, 0)
    assert time.perf_counter() - before < 0.01


@pytest.mark.parametrize("gbps,latency", [(-1.0, 0.0), (1.0, -5.0)])
def test_bad_settings_name_the_argument(gbps: float, latency: float) -> None:
    with pytest.raises(ValueError, match="link_gbps|latency_us"):
        LinkLimiter(gbps, latency)


def test_timer_sums_per_exchange() -> None:
    t = ExchangeTimer()
    t.add("ids", 0.5, 100)
    t.add("ids", 0.25, 50)
    t.add("pooled", 1.0, 10)
    assert t.seconds["ids"] == 0.75 and t.calls["ids"] == 2 and t.sent_bytes["ids"] == 150
    assert t.total() == 1.75
    t.reset()
    assert t.total() == 0.0


def test_tcp_link_adds_framing_and_the_stack_per_byte() -> None:
    wire = LinkLimiter(1.0)
    tcp = LinkLimiter.tcp(1.0, stack_gbps=10.0)
    nbytes = 125_000_000  # 1 Gbit: 1 s on the bare wire
    framing = 1514 / 1448
    assert tcp.transfer_seconds(nbytes, 0) == pytest.approx(framing + 0.1)
    assert tcp.transfer_seconds(nbytes, 0) > wire.transfer_seconds(nbytes, 0)
    # Without a stack term only the framing remains; no rate, no time.
    assert LinkLimiter.tcp(1.0).transfer_seconds(nbytes, 0) == pytest.approx(framing)
    assert LinkLimiter.tcp(None).transfer_seconds(nbytes, nbytes) == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs,name", [({"efficiency": 0.0}, "efficiency"), ({"efficiency": 1.5}, "efficiency"),
                                         ({"stack_gbps": 0.0}, "stack_gbps"), ({"stack_gbps": -2.0}, "stack_gbps")])
def test_bad_link_terms_name_the_argument(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LinkLimiter(1.0, **kwargs)


def test_exchange_takes_a_link_or_its_settings_not_both() -> None:
    from pymcoll.algorithms.dlrm.exchange import Exchange

    class Solo:
        rank, size, name = 0, 1, "solo"

    link = LinkLimiter.tcp(4.0)
    assert Exchange(Solo(), link=link).limiter is link  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="link"):
        Exchange(Solo(), link=link, link_gbps=4.0)  # type: ignore[arg-type]
