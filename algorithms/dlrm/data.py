"""Criteo-schema data for DLRM: a reader of Criteo's files and a synthetic
generator of the same schema.

A sample is a label, 13 integer ("dense") features and 26 categorical
("sparse") features. Criteo's files are tab-separated without a header
(label, I1..I13, C1..C26; any field may be empty, categorical values are
32-bit hex strings); a CSV with a header row of those names is read too.

Dense features become ``log(1 + max(x, 0))`` (0 when missing), the usual
DLRM preprocessing. A categorical value maps to ``1 + int(hex) mod
(size - 1)`` of its table, id 0 standing for "missing".

Sparse features are held jagged, as the exchange sends them: per feature,
the lengths of the samples' id lists and their ids, concatenated feature
after feature (:class:`SparseFeatures`). Criteo samples hold one id per
feature; the synthetic generator can draw several (pooled by the model).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

NUM_DENSE = 13
NUM_SPARSE = 26

#: Rows of the 26 tables of the Criteo Kaggle (Display Advertising Challenge) data set.
CRITEO_KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306,
    10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)


def cap_table_sizes(sizes: Sequence[int], cap: Optional[int]) -> list[int]:
    """Table sizes limited to `cap` rows each (None: unchanged); every table keeps >= 2 rows."""
    if cap is not None and cap < 2:
        raise ValueError(f"cap={cap}: a table needs at least 2 rows (id 0 is 'missing')")
    out = []
    for i, s in enumerate(sizes):
        if int(s) < 1:
            raise ValueError(f"sizes[{i}]={s}: a table needs at least one row")
        out.append(max(2, min(int(s), cap) if cap is not None else int(s)))
    return out


@dataclass
class SparseFeatures:
    """Jagged sparse input of a batch: ``lengths[f, b]`` ids of feature f for
    sample b; ``values`` the ids, feature 0's (sample after sample) first."""

    lengths: np.ndarray  # (num_features, batch) int64
    values: np.ndarray   # (lengths.sum(),) int64

    def __post_init__(self) -> None:
        self.lengths = np.ascontiguousarray(self.lengths, dtype=np.int64)
        self.values = np.ascontiguousarray(self.values, dtype=np.int64)
        if self.lengths.ndim != 2:
            raise ValueError(f"lengths has shape {self.lengths.shape}; expected (num_features, batch)")
        if (self.lengths < 0).any():
            raise ValueError("lengths holds a negative length")
        if int(self.lengths.sum()) != self.values.size:
            raise ValueError(f"lengths sum to {int(self.lengths.sum())} but {self.values.size} ids were given")

    @property
    def num_features(self) -> int:
        return self.lengths.shape[0]

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[1]

    def feature(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, ids) of feature f."""
        per = self.lengths.sum(axis=1)
        start = int(per[:f].sum())
        return self.lengths[f], self.values[start:start + int(per[f])]

    def samples(self, start: int, end: int) -> "SparseFeatures":
        """Samples [start, end) of the batch (every feature's ids for them)."""
        if not 0 <= start <= end <= self.batch_size:
            raise ValueError(f"samples({start}, {end}): a range within the batch of {self.batch_size}")
        per_sample = np.concatenate([np.zeros((self.num_features, 1), np.int64), np.cumsum(self.lengths, axis=1)],
                                    axis=1)
        feature_start = np.concatenate([[0], np.cumsum(self.lengths.sum(axis=1))])
        parts = [self.values[feature_start[f] + per_sample[f, start]:feature_start[f] + per_sample[f, end]]
                 for f in range(self.num_features)]
        values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return SparseFeatures(self.lengths[:, start:end], values)

    def check_ids(self, table_sizes: Sequence[int]) -> None:
        """ValueError naming the feature when an id lies outside its table."""
        if len(table_sizes) != self.num_features:
            raise ValueError(f"{len(table_sizes)} table sizes for {self.num_features} features")
        for f, size in enumerate(table_sizes):
            _, ids = self.feature(f)
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= size):
                bad = int(ids[(ids < 0) | (ids >= size)][0])
                raise ValueError(f"feature {f}: id {bad} lies outside its table of {size} rows")


@dataclass
class CriteoBatch:
    """Labels (batch,) float32, dense features (batch, 13) float32, sparse features."""

    labels: np.ndarray
    dense: np.ndarray
    sparse: SparseFeatures

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def samples(self, start: int, end: int) -> "CriteoBatch":
        """Samples [start, end) of the batch."""
        return CriteoBatch(self.labels[start:end], self.dense[start:end], self.sparse.samples(start, end))


def _dense_value(text: str, where: str) -> float:
    if text == "":
        return 0.0
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"{where}: integer feature {text!r} is not a number") from None
    return math.log1p(x) if x > 0 else 0.0


def _sparse_id(text: str, size: int, where: str) -> int:
    if text == "":
        return 0
    try:
        v = int(text, 16)
    except ValueError:
        raise ValueError(f"{where}: categorical feature {text!r} is not hexadecimal") from None
    return 1 + v % (size - 1)


def read_criteo(path: Union[str, Path], table_sizes: Optional[Sequence[int]] = None, *,
                max_rows: Optional[int] = None) -> CriteoBatch:
    """Read a Criteo file (TSV without header, or CSV with the header
    label,I1..I13,C1..C26) into a :class:`CriteoBatch`.

    table_sizes: rows of the 26 tables (default: the Kaggle cardinalities);
    categorical values are hashed into them. ValueError names the line and
    field of anything malformed.
    """
    sizes = cap_table_sizes(table_sizes if table_sizes is not None else CRITEO_KAGGLE_CARDINALITIES, None)
    if len(sizes) != NUM_SPARSE:
        raise ValueError(f"table_sizes has {len(sizes)} entries; Criteo has {NUM_SPARSE} categorical features")
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as f:
        first = f.readline()
        f.seek(0)
        is_csv = first.startswith("label,")
        rows = csv.reader(f, delimiter="," if is_csv else "\t")
        if is_csv:
            next(rows)
        labels, dense, ids = [], [], []
        width = 1 + NUM_DENSE + NUM_SPARSE
        for n, row in enumerate(rows, start=2 if is_csv else 1):
            if max_rows is not None and len(labels) >= max_rows:
                break
            if not row:
                continue
            where = f"{path.name}:{n}"
            if len(row) != width:
                raise ValueError(f"{where}: {len(row)} fields; a Criteo line has {width}")
            if row[0] not in ("0", "1"):
                raise ValueError(f"{where}: label {row[0]!r} is not 0 or 1")
            labels.append(float(row[0]))
            dense.append([_dense_value(t, f"{where} I{i + 1}") for i, t in enumerate(row[1:1 + NUM_DENSE])])
            ids.append([_sparse_id(t, sizes[i], f"{where} C{i + 1}")
                        for i, t in enumerate(row[1 + NUM_DENSE:])])
    batch = len(labels)
    values = np.asarray(ids, dtype=np.int64).reshape(batch, NUM_SPARSE).T.reshape(-1)
    sparse = SparseFeatures(np.ones((NUM_SPARSE, batch), np.int64), values)
    return CriteoBatch(np.asarray(labels, np.float32), np.asarray(dense, np.float32).reshape(batch, NUM_DENSE),
                       sparse)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a fixed pseudo-random function of each uint64."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


class SyntheticCriteo:
    """Batches of the Criteo schema with power-law ids and learnable labels.

    Ids of feature f follow a Zipf-like law over its table (id k+1 drawn
    with weight (k+1)^-alpha; id 0 means missing, with probability
    `missing`); dense features are log-normal counts, preprocessed like
    the reader's. Labels are drawn from a hidden logistic model of the
    features: a weight per dense feature and a pseudo-random weight per
    (feature, id) computed by hashing, so that no table-sized array is
    stored and a model that learns the embeddings can learn the labels.
    The same seed gives the same data on every rank.
    """

    def __init__(self, table_sizes: Sequence[int] = CRITEO_KAGGLE_CARDINALITIES, *, seed: int = 0,
                 alpha: float = 1.1, ids_per_feature: int = 1, missing: float = 0.02,
                 signal: float = 2.5) -> None:
        self.table_sizes = cap_table_sizes(table_sizes, None)
        if alpha <= 0:
            raise ValueError(f"alpha={alpha}: the power law needs alpha > 0")
        if ids_per_feature < 1:
            raise ValueError(f"ids_per_feature={ids_per_feature}: use 1 or more")
        if not 0 <= missing < 1:
            raise ValueError(f"missing={missing}: a probability in [0, 1)")
        self.seed, self.alpha, self.ids_per_feature, self.missing, self.signal = \
            seed, alpha, ids_per_feature, missing, signal
        rng = np.random.default_rng([seed, 0x5EED])
        self.dense_weights = rng.standard_normal(NUM_DENSE).astype(np.float64) / math.sqrt(NUM_DENSE)
        self.bias = float(rng.normal(-0.5, 0.1))

    def _ids(self, rng: np.random.Generator, f: int, n: int) -> np.ndarray:
        size = self.table_sizes[f]
        # Inverse CDF of a continuous power law on [1, size), floored: Zipf-like, any table size.
        u = rng.random(n)
        a = self.alpha
        if abs(a - 1.0) < 1e-9:
            k = np.exp(u * math.log(size))
        else:
            k = (1 + u * (size ** (1 - a) - 1)) ** (1 / (1 - a))
        ids = np.clip(np.floor(k).astype(np.int64), 1, size - 1)
        ids[rng.random(n) < self.missing] = 0
        return ids

    def id_weight(self, f: int, ids: np.ndarray) -> np.ndarray:
        """The hidden model's weight of each id of feature f (0 for 'missing')."""
        h = _mix(ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(self.seed * 131 + f))
        w = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 2.0 - 1.0
        return np.where(ids == 0, 0.0, w)

    def batch(self, index: int, batch_size: int) -> CriteoBatch:
        """Batch number `index` (deterministic in seed, index and batch_size)."""
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: use 1 or more")
        rng = np.random.default_rng([self.seed, index, batch_size])
        counts = rng.lognormal(mean=1.0, sigma=1.5, size=(batch_size, NUM_DENSE))
        dense = np.log1p(np.floor(counts)).astype(np.float32)
        lengths = np.full((NUM_SPARSE, batch_size), self.ids_per_feature, np.int64)
        if self.ids_per_feature > 1:
            lengths = rng.integers(1, self.ids_per_feature + 1, size=(NUM_SPARSE, batch_size))
        values, logit = [], dense.astype(np.float64) @ self.dense_weights * 0.5 + self.bias
        for f in range(NUM_SPARSE):
            ids = self._ids(rng, f, int(lengths[f].sum()))
            values.append(ids)
            sample = np.repeat(np.arange(batch_size), lengths[f])
            per_sample = np.bincount(sample, weights=self.id_weight(f, ids), minlength=batch_size)
            logit += self.signal * per_sample / np.maximum(lengths[f], 1) / math.sqrt(NUM_SPARSE)
        p = 1.0 / (1.0 + np.exp(-logit))
        labels = (rng.random(batch_size) < p).astype(np.float32)
        return CriteoBatch(labels, dense, SparseFeatures(lengths, np.concatenate(values)))
