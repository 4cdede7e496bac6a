"""The dual-level adaptive bound: table levels by cardinality (or by the
measured share of distinct rows), and the iteration multiplier's schedules."""

from __future__ import annotations

import numpy as np
import pytest

from pymcoll.algorithms.compression import AdaptiveBound, IterationSchedule, TableBounds


def test_table_levels_follow_cardinality() -> None:
    t = TableBounds()
    assert t.bound(10_131_227) == 0.01 and t.bound(100_000) == 0.01
    assert t.bound(5_683) == 0.03
    assert t.bound(3) == 0.05 and t.bound(1_000) == 0.05
    custom = TableBounds(high=0.005, mid=0.02, low=0.1, high_rows=50, low_rows=10)
    assert [custom.bound(r) for r in (5, 20, 60)] == [0.1, 0.02, 0.005]


def test_measured_share_of_distinct_rows_chooses_the_level() -> None:
    t = TableBounds(measure=True)
    g = np.random.default_rng(0)
    many = g.standard_normal((100, 4)).astype(np.float32)
    few = np.repeat(many[:2], 50, axis=0)
    some = np.repeat(many[:20], 5, axis=0)
    assert t.bound(10, many) == 0.01 and t.bound(10**7, few) == 0.05 and t.bound(10, some) == 0.03


@pytest.mark.parametrize("kind", ["step", "linear", "exponential"])
def test_schedules_start_at_start_and_end_at_end(kind: str) -> None:
    s = IterationSchedule(start=2.0, end=1.0, phase=100, kind=kind)
    assert s.multiplier(0) == 2.0
    assert s.multiplier(100) == 1.0 and s.multiplier(10_000) == 1.0
    values = [s.multiplier(i) for i in range(101)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # never rises
    mid = s.multiplier(50)
    assert {"step": mid == 2.0, "linear": mid == pytest.approx(1.5),
            "exponential": mid == pytest.approx(2 ** 0.5)}[kind]


def test_step_schedule_with_levels() -> None:
    s = IterationSchedule(start=2.0, end=1.0, phase=90, kind="step", steps=4)
    assert [s.multiplier(i) for i in (0, 29, 30, 59, 60, 89, 90)] == pytest.approx(
        [2.0, 2.0, 2 - 1 / 3, 2 - 1 / 3, 2 - 2 / 3, 2 - 2 / 3, 1.0])


def test_adaptive_bound_multiplies_the_levels() -> None:
    b = AdaptiveBound(TableBounds(), IterationSchedule(phase=10, kind="linear"))
    assert b(10**7, 0) == pytest.approx(0.02) and b(10**7, 10) == pytest.approx(0.01)
    assert b(3, 5) == pytest.approx(0.05 * 1.5)


@pytest.mark.parametrize("bad", [dict(high=0), dict(low=-1), dict(low_rows=10, high_rows=5),
                                 dict(low_share=0.6, high_share=0.5)])
def test_bad_table_settings_name_the_argument(bad: dict) -> None:
    with pytest.raises(ValueError, match="|".join(bad)):
        TableBounds(**bad)


@pytest.mark.parametrize("bad", [dict(kind="cosine"), dict(start=0), dict(phase=-1), dict(steps=1)])
def test_bad_schedules_name_the_argument(bad: dict) -> None:
    with pytest.raises(ValueError, match="|".join(bad)):
        IterationSchedule(**bad)
