"""Sequence-length distributions: the real MovieLens-100K lengths (reader,
default path, malformed files), the synthetic generator (shape, tail, cap,
determinism) and batches drawn from them, with clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pymcoll.algorithms.balance import load_lengths, sample_batch, shared_data_dir, synthetic_lengths
from pymcoll.algorithms.balance.lengths import ML100K_LENGTHS

# The project's shared data sit next to the checkout (../shared/data); PYMCOLL_SHARED_DATA points elsewhere.
DATA = Path(os.environ.get("PYMCOLL_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
ML100K = DATA / ML100K_LENGTHS
needs_data = pytest.mark.skipif(not ML100K.exists(), reason="the shared MovieLens-100K lengths are not here")


@needs_data
def test_real_lengths_are_movielens_100k() -> None:
    lengths = load_lengths(ML100K)
    assert lengths.dtype == np.int64 and lengths.shape == (943,)
    assert (lengths.min(), int(np.median(lengths)), lengths.max(), lengths.sum()) == (20, 65, 737, 100_000)


@needs_data
def test_default_path_follows_pymcoll_shared_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMCOLL_SHARED_DATA", str(DATA))
    assert shared_data_dir() == DATA
    assert np.array_equal(load_lengths(), load_lengths(ML100K))


def test_default_path_missing_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYMCOLL_SHARED_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"ml100k_user_history_lengths.txt not found \(set PYMCOLL_SHARED"):
        load_lengths()
    (tmp_path / "sequences").mkdir()
    (tmp_path / ML100K_LENGTHS).write_text("3\n\n4\n")
    assert load_lengths().tolist() == [3, 4]  # blank lines are skipped


def test_empty_environment_value_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMCOLL_SHARED_DATA", "")
    assert shared_data_dir().parts[-2:] == ("shared", "data")


def test_malformed_files_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "lengths.txt"
    bad.write_text("12\n7\nseven\n")
    with pytest.raises(ValueError, match=r"lengths.txt, line 3: 'seven' is not an integer length"):
        load_lengths(bad)
    bad.write_text("12\n-4\n")
    with pytest.raises(ValueError, match=r"line 2: length -4 is negative"):
        load_lengths(bad)
    bad.write_text("\n\n")
    with pytest.raises(ValueError, match="holds no lengths"):
        load_lengths(bad)
    with pytest.raises(FileNotFoundError, match="nowhere.txt not found"):
        load_lengths(tmp_path / "nowhere.txt")


@pytest.mark.parametrize("kind", ["lognormal", "powerlaw"])
def test_synthetic_is_deterministic_and_within_limits(kind: str) -> None:
    a = synthetic_lengths(5000, kind, seed=4)
    assert a.dtype == np.int64 and a.shape == (5000,)
    assert np.array_equal(a, synthetic_lengths(5000, kind, seed=4))
    assert not np.array_equal(a, synthetic_lengths(5000, kind, seed=5))
    assert a.min() >= 1 and a.max() <= 1024
    b = synthetic_lengths(5000, kind, min_len=20, cap=300, seed=4)
    assert b.min() >= 20 and b.max() == 300
    assert synthetic_lengths(0, kind).shape == (0,)


def test_lognormal_median_and_spread() -> None:
    a = synthetic_lengths(50_000, "lognormal", median=65, sigma=0.88, cap=None, seed=1)
    assert abs(np.median(a) - 65) <= 2
    assert np.std(np.log(a)) == pytest.approx(0.88, abs=0.03)
    assert np.all(synthetic_lengths(100, "lognormal", median=40, sigma=0, seed=2) == 40)


def test_powerlaw_tail_follows_alpha() -> None:
    # P(L > 4 * median) = (x_m / (4 median)) ** alpha = 4 ** -alpha / 2.
    for alpha in (1.5, 2.0, 3.0):
        a = synthetic_lengths(200_000, "powerlaw", median=65, alpha=alpha, cap=None, seed=3)
        assert abs(np.median(a) - 65) <= 2
        assert np.mean(a > 4 * 65) == pytest.approx(4.0 ** -alpha / 2, rel=0.1)
    heavy = synthetic_lengths(50_000, "powerlaw", alpha=1.2, cap=None, seed=3)
    assert heavy.max() > 10_000 and synthetic_lengths(50_000, "powerlaw", alpha=1.2, seed=3).max() == 1024


def test_synthetic_bad_arguments() -> None:
    with pytest.raises(ValueError, match="kind='gamma': use one of lognormal, powerlaw"):
        synthetic_lengths(10, "gamma")
    with pytest.raises(ValueError, match="median=0"):
        synthetic_lengths(10, median=0)
    with pytest.raises(ValueError, match="sigma=-1"):
        synthetic_lengths(10, sigma=-1)
    with pytest.raises(ValueError, match="alpha=0"):
        synthetic_lengths(10, "powerlaw", alpha=0)
    with pytest.raises(ValueError, match="min_len=0: use 1 or more"):
        synthetic_lengths(10, min_len=0)
    with pytest.raises(ValueError, match="cap=5: use 10 or more"):
        synthetic_lengths(10, min_len=10, cap=5)
    with pytest.raises(ValueError, match="n=-1"):
        synthetic_lengths(-1)
    with pytest.raises(TypeError, match="n=2.5: an integer"):
        synthetic_lengths(2.5)


def test_sample_batch_draws_with_replacement_deterministically() -> None:
    pool = np.array([3, 10, 200], dtype=np.int64)
    a = sample_batch(pool, 1000, seed=9)
    assert a.dtype == np.int64 and a.shape == (1000,)
    assert set(a.tolist()) == {3, 10, 200}
    assert np.array_equal(a, sample_batch(pool, 1000, seed=9))
    assert not np.array_equal(a, sample_batch(pool, 1000, seed=10))
    assert sample_batch(pool, 0, seed=0).shape == (0,)
    assert sample_batch([5, 6], 3, seed=1).dtype == np.int64


def test_sample_batch_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"lengths has shape \(0,\)"):
        sample_batch([], 4, 0)
    with pytest.raises(ValueError, match=r"lengths has shape \(2, 2\)"):
        sample_batch(np.ones((2, 2), np.int64), 4, 0)
    with pytest.raises(TypeError, match="lengths has dtype float64"):
        sample_batch([1.5, 2.0], 4, 0)
    with pytest.raises(ValueError, match=r"lengths\[1\] is negative"):
        sample_batch([1, -2], 4, 0)
    with pytest.raises(ValueError, match="batch_size=-1"):
        sample_batch([1, 2], -1, 0)
