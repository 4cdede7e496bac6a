"""The cost of a sample as a function of its sequence length.

``cost(L) = a * L + b * L**2 + c``: the linear term covers the layers that
touch each position once (embeddings, feed-forward), the quadratic term
self-attention over the sequence, the constant per-sample overhead. The
partitioner only compares costs, so their unit does not matter; a model
fitted with :meth:`CostModel.fit` from measured step times is in seconds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np


def _lengths_array(lengths: object, name: str) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} has dtype {arr.dtype}; expected sequence lengths (integers or floats)")
    arr = arr.astype(np.float64)
    if arr.ndim > 1:
        raise ValueError(f"{name} has shape {arr.shape}; expected a 1-D array of lengths")
    if not np.isfinite(arr).all() or (arr < 0).any():
        bad = int(np.flatnonzero(~np.isfinite(arr) | (arr < 0))[0]) if arr.ndim else 0
        raise ValueError(f"{name}[{bad}]={arr.reshape(-1)[bad]}: lengths must be finite and not negative")
    return arr


@dataclass(frozen=True)
class CostModel:
    """Per-sample cost ``a * L + b * L**2 + c`` of a sequence of length L.

    a, b, c: finite and not negative. A model from :meth:`fit` also carries
    the fit's residual: ``residual_rms`` (seconds, root mean square over the
    steps) and ``residual_rel`` (norm of the residuals over the norm of the
    step times); both are None for a model built by hand.
    """

    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    residual_rms: Optional[float] = field(default=None, compare=False)
    residual_rel: Optional[float] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name}={v!r}: a number is needed")
            if not (math.isfinite(float(v)) and float(v) >= 0):
                raise ValueError(f"{name}={v}: coefficients must be finite and not negative")
            object.__setattr__(self, name, float(v))

    @classmethod
    def quadratic(cls) -> "CostModel":
        """Attention-dominated cost: ``L**2`` (a = 0, b = 1, c = 0), the hardest to balance."""
        return cls(a=0.0, b=1.0, c=0.0)

    def costs(self, lengths: object) -> np.ndarray:
        """Cost of each length (float64, same shape as the 1-D `lengths`)."""
        x = _lengths_array(lengths, "lengths")
        return (self.b * x + self.a) * x + self.c

    def __call__(self, lengths: object) -> np.ndarray:
        return self.costs(lengths)

    @classmethod
    def fit(cls, lengths_per_step: Sequence[object], seconds_per_step: Sequence[float]) -> "CostModel":
        """The non-negative a, b, c that best explain measured step times (least squares).

        Step i processed the samples of lengths ``lengths_per_step[i]`` in
        ``seconds_per_step[i]`` seconds, so ``a * sum(L) + b * sum(L**2) + c
        * count = seconds``. Needs at least 3 steps whose length mixes differ
        enough to tell the three terms apart. The fit is exact non-negative
        least squares: with 3 unknowns every support (which coefficients are
        free, the others 0) is tried and the best feasible one kept.
        """
        steps = list(lengths_per_step)
        secs = np.asarray(seconds_per_step, dtype=np.float64)
        if secs.ndim != 1:
            raise ValueError(f"seconds_per_step has shape {secs.shape}; expected one time per step")
        if len(steps) != secs.size:
            raise ValueError(f"{len(steps)} steps in lengths_per_step but {secs.size} times in seconds_per_step")
        if secs.size < 3:
            raise ValueError(f"{secs.size} steps given: fitting a, b and c needs at least 3 (more is better)")
        if not np.isfinite(secs).all() or (secs < 0).any():
            bad = int(np.flatnonzero(~np.isfinite(secs) | (secs < 0))[0])
            raise ValueError(f"seconds_per_step[{bad}]={secs[bad]}: a time must be finite and not negative")
        rows = []
        for i, step in enumerate(steps):
            x = _lengths_array(step, f"lengths_per_step[{i}]").reshape(-1)
            rows.append((x.sum(), (x * x).sum(), float(x.size)))
        design = np.asarray(rows, dtype=np.float64)
        # Scale the columns to unit norm: sum(L**2) is orders of magnitude above the count.
        norms = np.linalg.norm(design, axis=0)
        if (norms == 0).any() or np.linalg.matrix_rank(design / np.where(norms > 0, norms, 1.0)) < 3:
            raise ValueError("the steps' lengths cannot tell a, b and c apart: measure steps with different "
                             "numbers of samples and different length mixes")
        scaled = design / norms
        coef, residual = _nnls3(scaled, secs)
        a, b, c = (coef / norms).tolist()
        ynorm = float(np.linalg.norm(secs))
        return cls(a=a, b=b, c=c, residual_rms=math.sqrt(residual / secs.size),
                   residual_rel=math.sqrt(residual) / ynorm if ynorm > 0 else 0.0)


def _nnls3(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """min ||design @ x - y||^2 subject to x >= 0, for a few columns: (x, squared residual).

    The optimum is the unconstrained least-squares solution on its own
    support, so trying every support and keeping the best non-negative
    solution finds it (2**3 = 8 small solves).
    """
    m = design.shape[1]
    best = np.zeros(m)
    best_res = float(y @ y)
    for size in range(1, m + 1):
        for support in itertools.combinations(range(m), size):
            cols = list(support)
            sol, *_ = np.linalg.lstsq(design[:, cols], y, rcond=None)
            if (sol < 0).any():
                continue
            x = np.zeros(m)
            x[cols] = sol
            r = design @ x - y
            res = float(r @ r)
            if res < best_res:
                best, best_res = x, res
    return best, best_res
