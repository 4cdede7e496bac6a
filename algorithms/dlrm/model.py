"""The DLRM model: a bottom MLP over the dense features, embedding bags over
the sparse ones, their pairwise dot products, and a top MLP to a logit.

The embedding part is model-parallel (a :class:`~.embedding.ShardedEmbeddingBagCollection`,
or any module mapping sparse features to a ``(batch, features, dim)``
tensor); the MLPs are data-parallel: every rank holds the same copy, and
:class:`DenseGradientAllreduce` sums their gradients over the ranks after
each backward pass with one Allreduce of a flat buffer.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import torch

from .data import NUM_DENSE


def mlp(sizes: Sequence[int], generator: torch.Generator, sigmoid_last: bool = False) -> torch.nn.Sequential:
    """Linear layers sizes[0] -> sizes[1] -> ... with ReLU between (and after the
    last unless it is the top's output), initialized from `generator`."""
    layers: list[torch.nn.Module] = []
    for k, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        lin = torch.nn.Linear(n_in, n_out)
        with torch.no_grad():
            # DLRM's initialization: normal weights scaled by fan-in plus fan-out, normal biases.
            lin.weight.copy_(torch.randn(n_out, n_in, generator=generator) * math.sqrt(2.0 / (n_in + n_out)))
            lin.bias.copy_(torch.randn(n_out, generator=generator) * math.sqrt(1.0 / n_out))
        layers.append(lin)
        if k < len(sizes) - 2 or not sigmoid_last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def dot_interaction(bottom: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
    """[bottom, the dot products of every pair of (bottom, embeddings)]: (batch, d + (F+1)F/2)."""
    z = torch.cat([bottom.unsqueeze(1), embedded], dim=1)
    products = torch.bmm(z, z.transpose(1, 2))
    n = z.shape[1]
    i, j = torch.tril_indices(n, n, offset=-1)
    return torch.cat([bottom, products[:, i, j]], dim=1)


class DLRM(torch.nn.Module):
    """DLRM with dot interaction.

    Args:
        embeddings: the sparse part (its ``dim`` and ``num_features`` are read).
        dense_features: the number of dense inputs per sample.
        bottom: hidden sizes of the bottom MLP; its output size is the embedding
            dimension.
        top: hidden sizes of the top MLP (the output, 1, is added).
        seed: the MLPs' initial weights, the same on every rank.
    """

    def __init__(self, embeddings: torch.nn.Module, *, dense_features: int = NUM_DENSE,
                 bottom: Sequence[int] = (64,), top: Sequence[int] = (128, 64), seed: int = 0) -> None:
        super().__init__()
        dim, features = int(embeddings.dim), int(embeddings.num_features)
        g = torch.Generator().manual_seed(seed)
        self.embeddings = embeddings
        self.bottom = mlp([dense_features, *bottom, dim], g)
        interactions = dim + (features + 1) * features // 2
        self.top = mlp([interactions, *top, 1], g, sigmoid_last=True)

    def forward(self, dense: torch.Tensor, sparse: Any, per_sample_weights: Optional[Any] = None) -> torch.Tensor:
        """Logits (batch,) for this rank's samples."""
        x = self.bottom(dense)
        if per_sample_weights is None:
            e = self.embeddings(sparse)
        else:
            e = self.embeddings(sparse, per_sample_weights)
        return self.top(dot_interaction(x, e)).squeeze(1)

    def dense_parameters(self) -> list[torch.nn.Parameter]:
        """The data-parallel parameters (the MLPs')."""
        return [*self.bottom.parameters(), *self.top.parameters()]


class DenseGradientAllreduce:
    """Sums the gradients of `params` over the ranks of `transport` (one
    Allreduce of a flat float32 buffer), optionally scaled."""

    def __init__(self, params: Sequence[torch.nn.Parameter], transport: Any) -> None:
        self.params = list(params)
        self.transport = transport
        self._flat = np.zeros(sum(p.numel() for p in self.params), np.float32)

    def __call__(self, scale: float = 1.0) -> None:
        flat, at = self._flat, 0
        for p in self.params:
            n = p.numel()
            flat[at:at + n] = 0 if p.grad is None else p.grad.detach().reshape(-1).numpy()
            at += n
        self.transport.allreduce_sum(flat)
        at = 0
        for p in self.params:
            n = p.numel()
            g = torch.from_numpy(flat[at:at + n]).view(p.shape)
            if scale != 1.0:
                g = g * scale
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            at += n
