"""Criteo-schema data for DLRM: the file reader (TSV and CSV), jagged sparse
features and their checks, the synthetic generator (power-law ids, labels a
model can learn)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pymcoll.algorithms.dlrm import (CRITEO_KAGGLE_CARDINALITIES, NUM_DENSE, NUM_SPARSE, SparseFeatures,
                                     SyntheticCriteo, cap_table_sizes, read_criteo)

import os

# The project's shared data sit next to the checkout (../shared/data); PYMCOLL_SHARED_DATA points elsewhere.
DATA = Path(os.environ.get("PYMCOLL_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data") / "criteo"
TSV, CSV = DATA / "criteo_sample_200.tsv", DATA / "criteo_sample_200.csv"
needs_data = pytest.mark.skipif(not TSV.exists(), reason="the shared Criteo sample is not next to the checkout")


@needs_data
def test_tsv_and_csv_read_alike() -> None:
    a, b = read_criteo(TSV), read_criteo(CSV)
    assert len(a) == len(b) == 200
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.dense, b.dense)
    assert np.array_equal(a.sparse.values, b.sparse.values)
    assert a.dense.shape == (200, NUM_DENSE) and a.sparse.lengths.shape == (NUM_SPARSE, 200)
    assert set(np.unique(a.labels)) <= {0.0, 1.0}
    a.sparse.check_ids(CRITEO_KAGGLE_CARDINALITIES)


@needs_data
def test_first_row_preprocessed_as_documented() -> None:
    first = TSV.read_text().splitlines()[0].split("\t")
    batch = read_criteo(TSV, max_rows=1)
    for i, text in enumerate(first[1:1 + NUM_DENSE]):
        want = math.log1p(float(text)) if text and float(text) > 0 else 0.0
        assert batch.dense[0, i] == pytest.approx(want, rel=1e-6)
    for f, text in enumerate(first[1 + NUM_DENSE:]):
        size = CRITEO_KAGGLE_CARDINALITIES[f]
        want = 0 if text == "" else 1 + int(text, 16) % (size - 1)
        assert batch.sparse.feature(f)[1].tolist() == [want]


def test_malformed_lines_name_line_and_field(tmp_path: Path) -> None:
    good = ["1"] + ["1"] * NUM_DENSE + ["0a"] * NUM_SPARSE
    cases = [
        (good[:-1], "fields"),
        (["2"] + good[1:], "label"),
        (good[:1] + ["x"] + good[2:], "I1"),
        (good[:-1] + ["zz"], "C26"),
    ]
    for row, what in cases:
        p = tmp_path / "bad.tsv"
        p.write_text("\t".join(good) + "\n" + "\t".join(row) + "\n")
        with pytest.raises(ValueError, match=rf"bad.tsv:2.*{what}|bad.tsv:2: .*{what}"):
            read_criteo(p)
    with pytest.raises(ValueError, match="26 categorical"):
        read_criteo(tmp_path / "bad.tsv", table_sizes=[10] * 3)


def test_sparse_features_are_checked() -> None:
    with pytest.raises(ValueError, match="sum to 3 but 2 ids"):
        SparseFeatures(np.array([[1, 2]]), np.array([0, 1]))
    with pytest.raises(ValueError, match="negative"):
        SparseFeatures(np.array([[1, -1]]), np.array([], np.int64))
    with pytest.raises(ValueError, match="num_features, batch"):
        SparseFeatures(np.array([1, 2]), np.array([0, 1, 2]))
    sf = SparseFeatures(np.array([[1, 1], [2, 0]]), np.array([3, 4, 5, 9]))
    assert sf.feature(1)[1].tolist() == [5, 9]
    with pytest.raises(ValueError, match="feature 1: id 9 lies outside its table of 6 rows"):
        sf.check_ids([10, 6])
    with pytest.raises(ValueError, match="3 table sizes for 2 features"):
        sf.check_ids([10, 6, 1])


def test_cap_table_sizes() -> None:
    capped = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, 1000)
    assert max(capped) == 1000 and capped[8] == 3 and min(capped) >= 2
    assert cap_table_sizes([1, 5], None) == [2, 5]
    with pytest.raises(ValueError, match="at least 2 rows"):
        cap_table_sizes([5], 1)


def auc(score: np.ndarray, y: np.ndarray) -> float:
    order = np.argsort(score, kind="stable")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def test_synthetic_batches_follow_the_schema_and_a_power_law() -> None:
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, 50_000)
    gen = SyntheticCriteo(sizes, seed=3)
    a, b = gen.batch(7, 4096), gen.batch(7, 4096)
    assert np.array_equal(a.sparse.values, b.sparse.values) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(gen.batch(8, 4096).sparse.values, a.sparse.values)
    a.sparse.check_ids(sizes)
    ids = a.sparse.feature(2)[1]  # a 50 000-row table
    counts = np.bincount(ids, minlength=sizes[2])
    assert counts[1] == counts[1:].max() and counts[1] > 20 * max(1, counts[1000])
    assert 0 < (ids == 0).mean() < 0.1  # "missing"
    assert 0.1 < a.labels.mean() < 0.9


def test_synthetic_labels_come_from_the_features() -> None:
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, 100_000)
    gen = SyntheticCriteo(sizes, seed=1)
    x = gen.batch(0, 20_000)
    logit = x.dense.astype(np.float64) @ gen.dense_weights * 0.5 + gen.bias
    for f in range(NUM_SPARSE):
        logit += gen.signal * gen.id_weight(f, x.sparse.feature(f)[1]) / math.sqrt(NUM_SPARSE)
    assert auc(logit, x.labels) > 0.75  # the hidden model separates them: a trained one can learn it


def test_synthetic_multi_hot_and_bad_arguments() -> None:
    gen = SyntheticCriteo([100] * NUM_SPARSE, ids_per_feature=4)
    x = gen.batch(0, 64)
    assert x.sparse.lengths.min() >= 1 and x.sparse.lengths.max() <= 4 and x.sparse.lengths.max() > 1
    for kwargs, what in ((dict(alpha=0), "alpha"), (dict(ids_per_feature=0), "ids_per_feature"),
                         (dict(missing=1.0), "missing")):
        with pytest.raises(ValueError, match=what):
            SyntheticCriteo([100] * NUM_SPARSE, **kwargs)
    with pytest.raises(ValueError, match="batch_size"):
        gen.batch(0, 0)


def test_sample_ranges_partition_a_batch() -> None:
    b = SyntheticCriteo([50, 7, 1000] * 8 + [3, 9], seed=4, ids_per_feature=3).batch(0, 11)
    parts = [b.samples(0, 4), b.samples(4, 4), b.samples(4, 11)]
    assert [len(p) for p in parts] == [4, 0, 7]
    for f in range(NUM_SPARSE):
        _, ids = b.sparse.feature(f)
        assert np.array_equal(np.concatenate([p.sparse.feature(f)[1] for p in parts]), ids)
    assert np.array_equal(np.concatenate([p.dense for p in parts]), b.dense)
    with pytest.raises(ValueError, match="within the batch of 11"):
        b.samples(3, 12)
