"""A sequence recommendation model on the sharded embedding exchange.

Item ids of every history and every target are looked up in one item table sharded over the
ranks (:class:`~pymcoll.algorithms.dlrm.embedding.ShardedEmbeddingBagCollection`, a bag of one id
per token, so the exchange returns one row per token). Histories go through transformer
encoder layers, then attention pooling with the target item as the query; an MLP over
[pooled, target, pooled * target] gives the click logit.

Histories are run in buckets of similar length (one length class, classes `spread` apart; at
most `bucket_tokens` padded tokens; padded to the bucket's longest) so that a rank's compute
grows with its samples' lengths and squared lengths, not with its longest sample times its
batch, and a bucket's fixed cost is shared by many short histories: the per-sample cost that
load balancing models.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from ..dlrm.data import SparseFeatures
from ..dlrm.model import mlp
from .sequences import SequenceBatch


def buckets(sorted_lengths: np.ndarray, tokens: int, spread: float) -> list[tuple[int, int]]:
    """[start, end) ranges of ascending `sorted_lengths`, padded to their longest: samples of one
    length class (classes are fixed powers of `spread`, the same on every rank, so ranks with
    similar samples run similar buckets) and at most `tokens` padded tokens (or one sample)."""
    out, n = [], sorted_lengths.size
    if n == 0:
        return out
    classes = np.floor(np.log(np.maximum(sorted_lengths, 1)) / math.log(spread)).astype(np.int64)
    starts = np.flatnonzero(np.diff(classes, prepend=classes[0] - 1))
    for c0, c1 in zip(starts.tolist(), starts[1:].tolist() + [n], strict=True):
        start = c0
        while start < c1:
            # the longest of [start, end) is sorted_lengths[end - 1]: grow while (end - start) * it fits
            end = start + 1
            while end < c1 and (end + 1 - start) * int(sorted_lengths[end]) <= tokens:
                end += 1
            out.append((start, end))
            start = end
    return out


class SequenceRecModel(torch.nn.Module):
    """Click model over user histories (see the module docstring).

    Arguments: embeddings (a sharded collection with one item table), layers, heads, ff (the encoder's
    feed-forward width), top (hidden sizes of the MLP), bucket_tokens (padded tokens per bucket at
    most), spread (the ratio of one length class to the next; a bucket holds one class), seed
    (initial dense weights: the same on every rank).
    """

    def __init__(self, embeddings: torch.nn.Module, *, layers: int = 1, heads: int = 2, ff: int = 64,
                 top: Sequence[int] = (64,), bucket_tokens: int = 2048, spread: float = 1.25,
                 seed: int = 0) -> None:
        super().__init__()
        if getattr(embeddings, "num_features", 1) != 1:
            raise ValueError("embeddings: one item table (history and target ids share it)")
        dim = int(embeddings.dim)
        if dim % heads:
            raise ValueError(f"heads={heads}: must divide the embedding dimension {dim}")
        if layers < 1:
            raise ValueError(f"layers={layers}: at least one encoder layer")
        if bucket_tokens < 1:
            raise ValueError(f"bucket_tokens={bucket_tokens}: at least 1 (padded) token per bucket")
        if spread <= 1:
            raise ValueError(f"spread={spread}: the ratio of one length class to the next, above 1")
        self.embeddings = embeddings
        self.dim, self.bucket_tokens, self.spread = dim, int(bucket_tokens), float(spread)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, batch_first=True) for _ in range(layers))
        g = torch.Generator().manual_seed(seed + 1)
        self.top = mlp([3 * dim, *top, 1], g, sigmoid_last=True)  # a logit: no ReLU on the output

    def dense_parameters(self) -> list[torch.nn.Parameter]:
        """The data-parallel parameters (everything but the sharded item table)."""
        return [p for n, p in self.named_parameters() if not n.startswith("embeddings.")]

    def embed(self, batch: SequenceBatch) -> torch.Tensor:
        """Rows (tokens + batch, dim) of every history item, then every target. A collective (the
        embedding exchange); its backward is one too."""
        ids = np.concatenate([batch.history, batch.targets]).astype(np.int64)
        return self.embeddings(SparseFeatures(np.ones((1, ids.size), np.int64), ids))[:, 0, :]

    def head(self, batch: SequenceBatch, rows: torch.Tensor) -> torch.Tensor:
        """Click logits (batch,) from the rows :meth:`embed` returned. Local: no communication."""
        lengths = np.asarray(batch.lengths, dtype=np.int64)
        n, tokens = lengths.size, int(lengths.sum())
        if rows.shape != (tokens + n, self.dim):
            raise ValueError(f"rows: shape {tuple(rows.shape)}, expected ({tokens + n}, {self.dim}) for this batch")
        tok, tgt = rows[:tokens], rows[tokens:]
        if n == 0:
            return tgt.sum(dim=1)
        padded = torch.cat([tok, tok.new_zeros(1, self.dim)])  # row `tokens`: padding
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        order = np.argsort(lengths, kind="stable")
        pooled_parts = []
        for g, h in buckets(lengths[order], self.bucket_tokens, self.spread):
            idx = order[g:h]
            span = lengths[idx]
            width = int(span.max())
            pos = np.arange(width)
            pad = pos[None, :] >= span[:, None]
            gather = np.where(pad, tokens, starts[idx][:, None] + pos[None, :])
            mask = torch.from_numpy(pad)
            h = padded[torch.from_numpy(gather)]
            for layer in self.encoder:
                h = layer(h, src_key_padding_mask=mask)
            q = tgt[torch.from_numpy(idx)]
            scores = torch.einsum("bld,bd->bl", h, q) / math.sqrt(self.dim)
            weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=1)
            pooled_parts.append(torch.einsum("bl,bld->bd", weights, h))
        inverse = torch.from_numpy(np.argsort(order, kind="stable"))
        pooled = torch.cat(pooled_parts)[inverse]
        return self.top(torch.cat([pooled, tgt, pooled * tgt], dim=1)).squeeze(1)

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        """Click logits (batch,) of this rank's samples. A collective (the embedding exchange)."""
        return self.head(batch, self.embed(batch))
