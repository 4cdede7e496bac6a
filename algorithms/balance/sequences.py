"""Synthetic user histories for sequence-recommendation training.

Every sample is a user's history of item ids (its length given by the caller, e.g. drawn from the
MovieLens lengths), a target item and a click label. Items belong to hidden clusters; a user
prefers one cluster, most of its history comes from it, and the label says whether the target is
from the preferred cluster (with label noise), so a model that reads the history can learn it.
A sample depends only on (seed, sample id, length): any split of a batch over ranks sees the same
samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

@dataclass
class SequenceBatch:
    """A batch of histories: ``lengths[b]`` ids of sample b in ``history`` (sample after sample)."""

    sample_ids: np.ndarray  # (batch,) int64: global ids of the samples
    lengths: np.ndarray     # (batch,) int64
    history: np.ndarray     # (lengths.sum(),) int64 item ids
    targets: np.ndarray     # (batch,) int64 item ids
    labels: np.ndarray      # (batch,) float32 in {0, 1}

    def __len__(self) -> int:
        return int(self.lengths.size)

    def take(self, index: np.ndarray) -> "SequenceBatch":
        """The samples at `index` (in that order)."""
        index = np.asarray(index, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(self.lengths)])
        parts = [self.history[starts[i]:starts[i + 1]] for i in index.tolist()]
        history = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return SequenceBatch(self.sample_ids[index], self.lengths[index], history, self.targets[index],
                             self.labels[index])


class SyntheticSequences:
    """Histories over `num_items` items in `clusters` hidden clusters (see the module docstring).

    Arguments: num_items (>= clusters), clusters, affinity (share of a history from the
    preferred cluster), noise (share of flipped labels), zipf (the power-law exponent of item
    popularity within a cluster), seed.
    """

    def __init__(self, num_items: int = 50_000, *, clusters: int = 32, affinity: float = 0.7,
                 noise: float = 0.1, zipf: float = 1.1, seed: int = 0) -> None:
        if clusters < 2:
            raise ValueError(f"clusters={clusters}: at least 2")
        if num_items < clusters:
            raise ValueError(f"num_items={num_items}: at least one item per cluster ({clusters})")
        if not 0.0 <= affinity <= 1.0 or not 0.0 <= noise < 0.5:
            raise ValueError(f"affinity={affinity}, noise={noise}: affinity in [0, 1], noise in [0, 0.5)")
        if zipf <= 0:
            raise ValueError(f"zipf={zipf}: a positive exponent")
        self.num_items, self.clusters = int(num_items), int(clusters)
        self.affinity, self.noise, self.seed = float(affinity), float(noise), int(seed)
        # Within a cluster popularity falls as rank^-zipf; slot = rank * clusters + cluster, and the
        # item id is a scrambled slot (slot * A mod N), as hashed ids are: the popular items of
        # every cluster land all over the table, not in the first rows (one shard).
        per = self.num_items // self.clusters
        w = np.arange(1, per + 1, dtype=np.float64) ** -float(zipf)
        self._cdf = np.cumsum(w) / w.sum()
        self._per = per
        self._n = per * self.clusters  # ids in [0, _n); the rest of the table is never drawn
        self._scramble = next(a for a in range(0x9E3779B1 % self._n or 1, 2 * self._n + 3)
                              if math.gcd(a, self._n) == 1)
        self._unscramble = pow(self._scramble, -1, self._n)

    def cluster(self, items: np.ndarray) -> np.ndarray:
        """The hidden cluster of each item id."""
        slots = (np.asarray(items, dtype=np.int64) * self._unscramble) % self._n
        return slots % self.clusters

    def _items(self, rng: np.random.Generator, clusters: np.ndarray) -> np.ndarray:
        rank = np.searchsorted(self._cdf, rng.random(clusters.size), side="right")
        slots = np.minimum(rank, self._per - 1) * self.clusters + clusters
        return (slots * self._scramble) % self._n

    def sample(self, sample_id: int, length: int) -> tuple[np.ndarray, int, float]:
        """(history, target, label) of one sample."""
        rng = np.random.default_rng([self.seed, int(sample_id)])
        liked = int(rng.integers(self.clusters))
        from_liked = rng.random(length) < self.affinity
        clusters = np.where(from_liked, liked, rng.integers(self.clusters, size=length))
        history = self._items(rng, clusters)
        positive = rng.random() < 0.5
        target_cluster = liked if positive else int((liked + 1 + rng.integers(self.clusters - 1)) % self.clusters)
        target = int(self._items(rng, np.array([target_cluster]))[0])
        label = float(positive) if rng.random() >= self.noise else float(not positive)
        return history, target, label

    def batch(self, sample_ids: np.ndarray, lengths: np.ndarray) -> SequenceBatch:
        """The samples `sample_ids` with histories of `lengths` items."""
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        if sample_ids.shape != lengths.shape or sample_ids.ndim != 1:
            raise ValueError(f"sample_ids {sample_ids.shape} and lengths {lengths.shape}: two 1-D arrays, one "
                             "length per sample")
        if lengths.size and int(lengths.min()) < 1:
            raise ValueError("lengths: every history needs at least one item")
        hist, targets, labels = [], np.empty(lengths.size, np.int64), np.empty(lengths.size, np.float32)
        for k, (s, n) in enumerate(zip(sample_ids.tolist(), lengths.tolist(), strict=True)):
            h, targets[k], labels[k] = self.sample(s, n)
            hist.append(h)
        history = np.concatenate(hist) if hist else np.zeros(0, np.int64)
        return SequenceBatch(sample_ids, lengths, history.astype(np.int64), targets, labels)
