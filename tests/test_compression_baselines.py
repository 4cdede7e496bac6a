"""The baselines behind the codec's interface: each round trips a block's
shape, the error-bounded ones keep the bound, the casts their precision."""

from __future__ import annotations

import numpy as np
import pytest

from pymcoll.algorithms.compression.baselines import available

METHODS = available()


def block() -> np.ndarray:
    g = np.random.default_rng(3)
    pool = (g.standard_normal((40, 24)) * 0.1).astype(np.float32)
    return pool[g.integers(0, 40, 300)]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_round_trip(name: str) -> None:
    m = METHODS[name]
    x = block()
    buf = m.compress(x, 0.02)
    y = m.decompress(buf)
    assert y.shape == x.shape and y.dtype == np.float32
    rel = float(np.abs(y.astype(np.float64) - x).max()) / float(x.max() - x.min())
    if m.error_bounded:
        assert rel <= 0.02
    else:
        assert rel <= {"fp16": 1e-3, "bf16": 5e-3, "int8-rowwise": 5e-3, "fp8-rowwise": 0.05}[name]
    assert len(buf) < x.nbytes


def test_the_always_available_methods() -> None:
    assert {"pymcoll", "fp16", "bf16", "int8-rowwise"} <= set(METHODS)
    x = block()
    assert x.nbytes / len(METHODS["fp16"].compress(x, 0)) == pytest.approx(2, rel=0.01)
    assert x.nbytes / len(METHODS["pymcoll"].compress(x, 0.02)) > 10
