"""The learned caching policy: a small model says which rows are worth keeping.

For each lookup the model predicts the probability that Belady's optimum,
with the same capacity, would still hold the row at its next lookup (the
next-access outcome; a row with no next lookup is a 0). It is trained on a
past stretch of the trace: the policy serves the warm-up as LRU while it
records the lookups and their features, then labels them by replaying the
optimum over that stretch and fits the model. It can retrain on the most
recent stretch every `retrain_every` lookups (labels need only the past).

Eviction: a row's priority is ``t + horizon * capacity * log(p)``, where t is
its last lookup and p the prediction made then; the smallest goes first.
So rows the model calls worth keeping age like LRU, and a row with a low p
counts as if it had been looked up ``horizon * capacity * log(1/p)`` lookups
earlier. With an untrained model (p = 1) the order is LRU's. With a perfect
predictor it is Belady's as long as no row worth keeping was last looked up
more than ``horizon * capacity * log(p_keep / p_drop)`` lookups before a row
not worth keeping: the offset is finite on purpose, so that a row predicted
worth keeping but never looked up again ages out instead of holding its slot
for ever (tested both ways).

The model runs a batch ahead: :meth:`prepare` computes the next batch's
features and predictions (the simulator runs it in a background thread
while the current batch is served) and :meth:`observe` picks them up.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from .features import N_FEATURES, AccessFeatures
from .model import TinyMLP
from .policies import _HeapPolicy, opt_next_hit


class LearnedCachePolicy(_HeapPolicy):
    """Keep rows by a learned prediction of Belady's next-access outcome (see the module docstring).

    `n_rows` is the table size (for the per-row access state). `horizon`
    scales how far back a low prediction pushes a row, in capacities.
    `window` is how many past lookups a (re)training uses (default: all
    recorded so far, up to 1,000,000); `retrain_every` retrains after that
    many lookups since the last training (None: train once, when asked).
    `prefetch_age` is how many lookups older than a row just looked up a
    prefetched row ranks when it comes in (0: as if just looked up), so an
    unused prefetch leaves sooner.
    """

    name = "learned"

    def __init__(self, n_rows: int, *, horizon: float = 10.0, hidden: tuple[int, int] = (16, 8),
                 epochs: int = 8, window: Optional[int] = None, retrain_every: Optional[int] = None,
                 prefetch_age: int = 0, seed: int = 0) -> None:
        super().__init__()
        if horizon <= 0:
            raise ValueError(f"horizon must be positive (in capacities), got {horizon}")
        if retrain_every is not None and retrain_every < 1:
            raise ValueError(f"retrain_every must be a positive number of lookups or None, got {retrain_every}")
        if prefetch_age < 0:
            raise ValueError(f"prefetch_age must be a non-negative number of lookups, got {prefetch_age}")
        self.n_rows = int(n_rows)
        self.horizon = float(horizon)
        self.prefetch_age = int(prefetch_age)
        self.hidden = hidden
        self.epochs = epochs
        self.window = int(window) if window is not None else 1_000_000
        self.retrain_every = retrain_every
        self.seed = seed
        self.model: Optional[TinyMLP] = None
        self.model_seconds = 0.0   # CPU time of features + predictions
        self.train_seconds = 0.0   # CPU time of labelling + fitting
        self.predicted = 0
        self.trainings = 0
        self._reset_stream()

    def _reset_stream(self) -> None:
        self.features = AccessFeatures(self.n_rows)
        self._prepared: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._hist_ids: list[np.ndarray] = []
        self._hist_x: list[np.ndarray] = []
        self._hist_len = 0
        self._since_train = 0
        self._t0 = 0
        self._p = np.ones(0, dtype=np.float32)
        self._next_t = 0

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._reset_stream()

    # -- the model, a batch ahead -------------------------------------------------
    def prepare(self, ids: np.ndarray, t0: int) -> None:
        """Features and predictions of the batch `ids` starting at time `t0` (batches in order)."""
        ids = np.asarray(ids, dtype=np.int64)
        if t0 != self._next_t:
            raise ValueError(f"prepare() expects the batch at time {self._next_t}, got t0={t0}")
        start = time.thread_time()
        x = self.features.batch(ids, t0)
        p = self.model.predict(x) if self.model is not None else np.ones(ids.size, dtype=np.float32)
        self.model_seconds += time.thread_time() - start
        self.predicted += ids.size
        self._prepared[t0] = (ids, x, p)
        self._next_t = t0 + ids.size

    def observe(self, ids: np.ndarray, t0: int) -> None:
        if t0 not in self._prepared:
            self.prepare(ids, t0)
        seen, x, p = self._prepared.pop(t0)
        if seen.size != np.asarray(ids).size:
            raise ValueError(f"the batch at time {t0} was prepared with {seen.size} lookups, served with "
                             f"{np.asarray(ids).size}")
        self._t0, self._p = t0, p
        self._hist_ids.append(seen)
        self._hist_x.append(x)
        self._hist_len += seen.size
        while self._hist_len - self._hist_ids[0].size >= self.window:
            self._hist_len -= self._hist_ids.pop(0).size
            self._hist_x.pop(0)
        self._since_train += seen.size
        if self.retrain_every is not None and self.model is not None and self._since_train >= self.retrain_every:
            self.train()

    def train(self) -> dict:
        """Fit the model on the recorded lookups (labels: Belady's next-access outcome over them)."""
        if self.capacity < 1:
            raise RuntimeError("train() needs a capacity: call reset(capacity) and serve some lookups first")
        if self._hist_len == 0:
            raise RuntimeError("train() needs recorded lookups: serve (observe) some batches first")
        start = time.thread_time()
        ids = np.concatenate(self._hist_ids)
        x = np.concatenate(self._hist_x)
        labels = opt_next_hit(ids, self.capacity)
        # The last lookups' next-access outcome lies beyond the record: leave them out.
        keep = max(1, int(ids.size * 0.9))
        model = TinyMLP(N_FEATURES, self.hidden, seed=self.seed + self.trainings)
        loss = model.fit(x[:keep], labels[:keep], epochs=self.epochs, seed=self.seed + self.trainings)
        self.model = model
        self.trainings += 1
        self._since_train = 0
        spent = time.thread_time() - start
        self.train_seconds += spent
        return {"examples": keep, "positive": float(labels[:keep].mean()), "loss": loss, "seconds": spent}

    # -- replacement ---------------------------------------------------------------
    def _priority(self, t: int) -> tuple:
        i = t - self._t0
        p = float(self._p[i]) if 0 <= i < self._p.size else 1.0
        return (t + self.horizon * self.capacity * np.log(max(p, 1e-6)), t)

    def hit(self, row: int, t: int) -> None:
        self._set(row, self._priority(t))

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        if prefetched:
            # Not looked up yet: ranks as a row looked up prefetch_age lookups ago (its use is expected soon).
            self._set(row, (float(t - self.prefetch_age), t))
        else:
            self._set(row, self._priority(t))
