"""The per-sample cost model a*L + b*L**2 + c: evaluation, its fit from step
times (known coefficients recovered without and with noise, never negative,
optimal under the constraint) and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from pymcoll.algorithms.balance import CostModel, synthetic_lengths
from pymcoll.algorithms.balance.cost import _nnls3


def test_costs() -> None:
    x = np.array([0, 1, 10, 737])
    assert CostModel().costs(x).tolist() == [0.0, 1.0, 10.0, 737.0]
    assert CostModel.quadratic()(x).tolist() == [0.0, 1.0, 100.0, 737.0 ** 2]
    m = CostModel(a=2.0, b=0.5, c=3.0)
    assert m(x).dtype == np.float64
    assert np.allclose(m([4, 6]), [2 * 4 + 0.5 * 16 + 3, 2 * 6 + 0.5 * 36 + 3])
    assert m == CostModel(2, 0.5, 3)  # the fit's residual does not enter equality
    assert CostModel.quadratic()(np.zeros(0)).shape == (0,)


def test_bad_models_and_lengths() -> None:
    with pytest.raises(ValueError, match="b=-1: coefficients must be finite and not negative"):
        CostModel(b=-1)
    with pytest.raises(ValueError, match="a=nan"):
        CostModel(a=float("nan"))
    with pytest.raises(TypeError, match="c='1': a number is needed"):
        CostModel(c="1")
    with pytest.raises(ValueError, match=r"lengths\[1\]=-3.0: lengths must be finite and not negative"):
        CostModel()([1, -3])
    with pytest.raises(ValueError, match=r"lengths has shape \(2, 2\)"):
        CostModel()(np.ones((2, 2)))
    with pytest.raises(TypeError, match="lengths has dtype"):
        CostModel()(["a"])


def steps(n_steps: int, seed: int) -> list[np.ndarray]:
    """Batches of varying size and length mix (median 20 to 300), as calibration steps would run:
    the linear and quadratic terms can only be told apart by steps whose mixes differ."""
    g = np.random.default_rng(seed)
    return [synthetic_lengths(int(g.integers(16, 512)), "lognormal", median=float(g.uniform(20, 300)),
                              seed=int(g.integers(0, 2**31))) for _ in range(n_steps)]


def step_times(batches: list[np.ndarray], a: float, b: float, c: float) -> np.ndarray:
    return np.array([a * x.sum() + b * (x.astype(np.float64) ** 2).sum() + c * x.size for x in batches])


def test_fit_recovers_known_coefficients_without_noise() -> None:
    batches = steps(40, 1)
    a, b, c = 2e-6, 3e-9, 5e-5
    m = CostModel.fit(batches, step_times(batches, a, b, c))
    assert (m.a, m.b, m.c) == pytest.approx((a, b, c), rel=1e-6)
    assert m.residual_rms < 1e-12 and m.residual_rel < 1e-9


def test_fit_with_noise() -> None:
    batches = steps(300, 2)
    a, b, c = 2e-6, 3e-9, 5e-5
    clean = step_times(batches, a, b, c)
    noisy = clean * (1 + 0.02 * np.random.default_rng(3).standard_normal(clean.size))
    m = CostModel.fit(batches, noisy)
    # Seeds 0-4 of this set-up give b within 9%, a within 8%, c within 15%.
    assert m.b == pytest.approx(b, rel=0.15)
    assert m.a == pytest.approx(a, rel=0.2) and m.c == pytest.approx(c, rel=0.3)
    # The step times it predicts are close to the noiseless ones (the noise is 2% per step).
    predicted = np.array([m(x).sum() for x in batches])
    assert np.abs(predicted / clean - 1).max() < 0.05
    assert 0.01 < m.residual_rel < 0.03


def test_fit_never_goes_negative() -> None:
    batches = steps(60, 4)
    clean = step_times(batches, 0.0, 4e-9, 0.0)  # attention only
    g = np.random.default_rng(5)
    for _ in range(20):
        noisy = clean * (1 + 0.05 * g.standard_normal(clean.size))
        m = CostModel.fit(batches, noisy)
        assert min(m.a, m.b, m.c) >= 0.0
        assert m.b == pytest.approx(4e-9, rel=0.1)


def test_nnls_meets_the_optimality_conditions() -> None:
    # Karush-Kuhn-Tucker: the gradient vanishes on free coefficients and is >= 0 on those at 0.
    g = np.random.default_rng(6)
    for trial in range(200):
        design = np.abs(g.standard_normal((int(g.integers(3, 12)), 3)))
        y = design @ g.standard_normal(3) + 0.1 * g.standard_normal(design.shape[0])
        x, res = _nnls3(design, y)
        assert (x >= 0).all()
        assert res == pytest.approx(float(((design @ x - y) ** 2).sum()), rel=1e-9, abs=1e-12)
        grad = design.T @ (design @ x - y)
        scale = np.linalg.norm(design) * (np.linalg.norm(y) + 1)
        assert np.all(np.abs(grad[x > 0]) <= 1e-9 * scale), (trial, x, grad)
        assert np.all(grad[x == 0] >= -1e-9 * scale), (trial, x, grad)


def test_fit_errors() -> None:
    batches = steps(5, 7)
    with pytest.raises(ValueError, match="2 steps given: fitting a, b and c needs at least 3"):
        CostModel.fit(batches[:2], [1.0, 2.0])
    with pytest.raises(ValueError, match="5 steps in lengths_per_step but 4 times"):
        CostModel.fit(batches, [1.0] * 4)
    with pytest.raises(ValueError, match=r"seconds_per_step\[1\]=-1.0"):
        CostModel.fit(batches, [1.0, -1.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"seconds_per_step\[0\]=nan"):
        CostModel.fit(batches, [float("nan")] + [1.0] * 4)
    with pytest.raises(ValueError, match="seconds_per_step has shape"):
        CostModel.fit(batches, np.ones((5, 1)))
    with pytest.raises(ValueError, match=r"lengths_per_step\[2\]\[0\]=-1.0"):
        CostModel.fit([[1], [2], [-1]], [1.0, 2.0, 3.0])
    same = [np.array([10, 20, 30])] * 4
    with pytest.raises(ValueError, match="cannot tell a, b and c apart"):
        CostModel.fit(same, [1.0, 1.1, 0.9, 1.0])
    with pytest.raises(ValueError, match="cannot tell a, b and c apart"):
        CostModel.fit([np.array([5]), np.array([5, 5]), np.array([5, 5, 5])], [1.0, 2.0, 3.0])
