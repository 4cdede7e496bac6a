"""Sequence-length distributions for sequence-recommendation training.

A sample of a sequence recommender is a user's history: a sequence whose
length varies from user to user, and the work a sample costs grows with it
(faster than linearly under attention). Three sources of lengths:

* :func:`load_lengths`: the real user-history lengths of MovieLens-100K
  (943 users, 20 to 737 ratings each, median 65) from the project's shared
  data (``../shared/data/sequences/`` next to the checkout, or the folder
  that ``PYMCOLL_SHARED_DATA`` names);
* :func:`synthetic_lengths`: log-normal or power-law (Pareto tail) lengths
  with a chosen median, tail and cap, the same for the same seed;
* :func:`sample_batch`: a global batch drawn from any of them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional, Union

import numpy as np

#: The shared file of real lengths, relative to the shared data folder.
ML100K_LENGTHS = Path("sequences") / "ml100k_user_history_lengths.txt"

KINDS = ("lognormal", "powerlaw")


def shared_data_dir() -> Path:
    """The project's shared data folder.

    ``PYMCOLL_SHARED_DATA`` when set (an empty value means unset), else
    ``<project root>/../shared/data`` as the tests and benchmarks resolve it:
    the source tree's root when this file runs from a checkout, otherwise the
    current directory taken as the project root (the installed package does
    not know where its checkout is).
    """
    env = os.environ.get("PYMCOLL_SHARED_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    # algorithms/balance/lengths.py in a checkout: parents[2] is the project root.
    if len(here.parents) > 3 and (here.parents[2] / "meson.build").is_file():
        return here.parents[3] / "shared" / "data"
    return Path.cwd().resolve().parent / "shared" / "data"


def load_lengths(path: Optional[Union[str, os.PathLike]] = None) -> np.ndarray:
    """Sequence lengths read from `path`, one non-negative integer per line (int64).

    Without `path`: the real MovieLens-100K user-history lengths,
    ``shared_data_dir() / "sequences/ml100k_user_history_lengths.txt"``.
    Blank lines are skipped. FileNotFoundError names the file when it is
    missing; ValueError names the file and line of a malformed entry.
    """
    file = Path(path) if path is not None else shared_data_dir() / ML100K_LENGTHS
    if not file.is_file():
        hint = "" if path is not None else " (set PYMCOLL_SHARED_DATA to the shared data folder, or pass path=)"
        raise FileNotFoundError(f"sequence lengths file {file} not found{hint}")
    out: list[int] = []
    with open(file, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            text = line.strip()
            if not text:
                continue
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{file}, line {lineno}: {text[:40]!r} is not an integer length") from None
            if value < 0:
                raise ValueError(f"{file}, line {lineno}: length {value} is negative")
            out.append(value)
    if not out:
        raise ValueError(f"{file} holds no lengths (one integer per line expected)")
    return np.asarray(out, dtype=np.int64)


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name}={value}: a finite number above 0")
    return v


def _integer(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}={value!r}: an integer is needed")
    if int(value) < low:
        raise ValueError(f"{name}={value}: use {low} or more")
    return int(value)


def synthetic_lengths(n: int, kind: str = "lognormal", *, median: float = 65.0, sigma: float = 0.88,
                      alpha: float = 2.0, min_len: int = 1, cap: Optional[int] = 1024, seed: int = 0) -> np.ndarray:
    """`n` synthetic sequence lengths (int64), the same for the same arguments.

    kind "lognormal": ``median * exp(sigma * Z)``, Z standard normal (the
    defaults match MovieLens-100K: median 65, log-spread 0.88). kind
    "powerlaw": a Pareto tail of index `alpha` with the given median, ``P(L >
    x) = (x_m / x) ** alpha`` for x >= x_m, ``x_m = median / 2 ** (1 /
    alpha)``; smaller alpha means a heavier tail (alpha <= 2: infinite
    variance before the cap). Lengths are rounded to integers and clipped to
    [min_len, cap] (cap None: no upper limit).
    """
    n = _integer("n", n, 0)
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(KINDS)}")
    median = _positive("median", median)
    min_len = _integer("min_len", min_len, 1)
    if cap is not None:
        cap = _integer("cap", cap, min_len)
    g = np.random.default_rng(seed)
    if kind == "lognormal":
        s = float(sigma)
        if not (math.isfinite(s) and s >= 0):
            raise ValueError(f"sigma={sigma}: a finite spread of 0 or more")
        x = median * np.exp(s * g.standard_normal(n))
    else:
        a = _positive("alpha", alpha)
        x_m = median / 2.0 ** (1.0 / a)
        # Inverse transform of a uniform in (0, 1]: never divides by zero.
        x = x_m * (1.0 - g.random(n)) ** (-1.0 / a)
    upper = float(cap) if cap is not None else np.inf
    # Clip before the cast so that a far tail cannot overflow int64.
    return np.clip(np.rint(np.minimum(x, 2.0 ** 62)), min_len, upper).astype(np.int64)


def sample_batch(lengths: np.ndarray, batch_size: int, seed: int) -> np.ndarray:
    """A global batch of `batch_size` lengths drawn from `lengths` with replacement (int64).

    Every rank that passes the same lengths and seed draws the same batch.
    """
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"lengths has shape {arr.shape}; expected a non-empty 1-D array of lengths")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"lengths has dtype {arr.dtype}; expected integers (np.asarray(..., dtype=np.int64))")
    if (arr < 0).any():
        raise ValueError(f"lengths[{int(np.flatnonzero(arr < 0)[0])}] is negative: lengths are counts")
    batch_size = _integer("batch_size", batch_size, 0)
    g = np.random.default_rng(seed)
    return arr[g.integers(0, arr.size, batch_size)].astype(np.int64)
