"""A small multilayer perceptron in numpy: the learned policies' model.

Two hidden ReLU layers and a logistic output, trained with Adam on the
log loss; inputs are standardized with the training set's mean and spread.
Before that they are clipped to the range each feature had in the training
set: a ReLU network extrapolates linearly past the data it saw, and the
access features drift past it as a stream goes on (a decayed count at a time
scale longer than the training stretch keeps growing; a classical policy
that never hit during the warm-up starts hitting). A feature that was
constant in the training set carries no weight at all (its spread is 0, so
it cannot be standardized; dividing by a floor instead made its first
change later a jump of a million standard deviations, which turned the
predictions upside down).
Small on purpose: a batch of 2048 lookups costs two matrix products of
2048 x 6 x 16 and 2048 x 16 x 8, tens of microseconds on one core.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .native import mlp_predict, pack_mlp


class TinyMLP:
    """Binary classifier ``predict(X) -> P(y = 1)``; `hidden` sizes of the two hidden layers.

    `native`: predict in C (:func:`~.native.mlp_predict`, the default) or
    with numpy (False); training is numpy's either way. The C path packs
    the layers once per :meth:`fit`: layers changed in place by other means
    need :meth:`layers_changed`.
    """

    def __init__(self, n_inputs: int, hidden: tuple[int, int] = (16, 8), seed: int = 0, native: bool = True) -> None:
        if n_inputs < 1:
            raise ValueError(f"n_inputs must be at least 1, got {n_inputs}")
        rng = np.random.default_rng([seed, 0x3e1])
        sizes = (n_inputs,) + tuple(hidden) + (1,)
        self.weights = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
                        for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
        self.biases = [np.zeros(b, dtype=np.float32) for b in sizes[1:]]
        self.mean = np.zeros(n_inputs, dtype=np.float32)
        self.scale = np.ones(n_inputs, dtype=np.float32)
        # The training set's range per feature (None before fit: no clipping).
        self.lo: Optional[np.ndarray] = None
        self.hi: Optional[np.ndarray] = None
        self.n_inputs = n_inputs
        self.native = bool(native)
        self.trained = False
        self.steps = 0  # Adam steps of the last fit
        self._packed: Optional[np.ndarray] = None

    def layers_changed(self) -> None:
        """Drop the packed copy of the layers the C path predicts with (it is packed again when needed)."""
        self._packed = None

    def _forward(self, x: np.ndarray) -> list[np.ndarray]:
        acts = [(x - self.mean) * self.scale]
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0.0) if i < len(self.weights) - 1 else z)
        return acts

    def predict(self, x: np.ndarray) -> np.ndarray:
        """P(label 1) for each row of `x` (n x n_inputs), float32."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.n_inputs:
            raise ValueError(f"inputs must have shape (n, {self.n_inputs}), got {x.shape}")
        if self.lo is not None:
            x = np.clip(x, self.lo, self.hi)  # a copy: the caller's features stay as they were
        if self.native:
            if self._packed is None:
                self._packed = pack_mlp(self.weights, self.biases)
            return mlp_predict(x, self.weights, self.biases, self.mean, self.scale, params=self._packed)
        z = self._forward(x)[-1][:, 0]
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def fit(self, x: np.ndarray, y: np.ndarray, epochs: int = 6, batch: int = 1024, lr: float = 3e-3,
            weight: Optional[np.ndarray] = None, seed: int = 0, min_steps: int = 0,
            warm_start: bool = False) -> float:
        """Train on inputs `x` and 0/1 labels `y`; returns the final mean log loss.

        `epochs` passes over the data, or more where that takes fewer than
        `min_steps` Adam steps (a small training set: 8,000 examples make 7
        steps an epoch). `warm_start`: go on from the layers and the
        standardization of the last fit (the clipping range widens to take
        in `x`) instead of starting over."""
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y, dtype=np.float32).ravel()
        if x.ndim != 2 or x.shape[1] != self.n_inputs or x.shape[0] != y.size:
            raise ValueError(f"fit needs x of shape (n, {self.n_inputs}) and n labels, got {x.shape} and {y.size}")
        if y.size == 0:
            raise ValueError("fit needs at least one example")
        w_ex = np.ones_like(y) if weight is None else np.asarray(weight, dtype=np.float32)
        if min_steps < 0:
            raise ValueError(f"min_steps must be a non-negative number of steps, got {min_steps}")
        if warm_start and self.trained:  # fit set lo and hi with trained
            self.lo, self.hi = np.minimum(self.lo, x.min(axis=0)), np.maximum(self.hi, x.max(axis=0))
        else:
            self.mean = x.mean(axis=0)
            std = x.std(axis=0)
            self.scale = np.where(std > 1e-6, 1.0 / np.maximum(std, 1e-6), 0.0).astype(np.float32)
            self.lo, self.hi = x.min(axis=0), x.max(axis=0)
        self.layers_changed()  # the steps below change the layers in place
        params = self.weights + self.biases
        m = [np.zeros_like(p) for p in params]
        v = [np.zeros_like(p) for p in params]
        rng = np.random.default_rng([seed, 0xf17])
        step = 0
        b1, b2 = 0.9, 0.999
        nl = len(self.weights)
        per_epoch = max(1, y.size // batch)
        epochs = max(epochs, -(-min_steps // per_epoch))
        for _ in range(epochs):
            for idx in np.array_split(rng.permutation(y.size), per_epoch):
                acts = self._forward(x[idx])
                z = acts[-1][:, 0]
                p = 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))
                g = ((p - y[idx]) * w_ex[idx] / idx.size)[:, None].astype(np.float32)
                grads_w, grads_b = [None] * nl, [None] * nl
                for i in range(nl - 1, -1, -1):
                    grads_w[i] = acts[i].T @ g
                    grads_b[i] = g.sum(axis=0)
                    if i:
                        g = (g @ self.weights[i].T) * (acts[i] > 0)
                step += 1
                for j, (p_, gr) in enumerate(zip(params, grads_w + grads_b, strict=True)):
                    m[j] = b1 * m[j] + (1 - b1) * gr
                    v[j] = b2 * v[j] + (1 - b2) * gr * gr
                    p_ -= lr * (m[j] / (1 - b1 ** step)) / (np.sqrt(v[j] / (1 - b2 ** step)) + 1e-8)
        self.trained = True
        self.steps = step
        p = self.predict(x)
        eps = 1e-7
        return float(-np.mean(w_ex * (y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))))
