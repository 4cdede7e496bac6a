"""The exchange's block codec hook: what a block of embeddings becomes on the wire.

The pooled-embedding exchange cuts its payload into blocks, one per
(sending rank, receiving rank, shard): a (samples, columns) float32 tensor.
With a block codec (a :class:`BlockCodec`), each block is encoded before
the send and decoded after the receive; the encoded sizes are exchanged
first (an all-to-all of counts), then the bytes. Without one (the default)
the floats go as they are, with no size exchange. :class:`BlockInfo` tells the codec which table, shard,
direction and exchange step a block belongs to, so that it can choose a
bound per table and per iteration.

Every block goes through the codec, a rank's own included, unless the codec
sets ``local_exact``: then a rank's blocks to itself, which cross no link,
skip it and stay exact.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

FORWARD = "forward"
BACKWARD = "backward"


@dataclass(frozen=True)
class BlockInfo:
    """One block of an exchange."""

    direction: str  # FORWARD (pooled embeddings) or BACKWARD (their gradients)
    table: int
    table_rows: int  # the table's cardinality
    source: int  # sending rank
    dest: int  # receiving rank
    shape: tuple[int, int]  # (samples, columns)
    step: int  # how many forward exchanges came before this one's


class BlockCodec:
    """Identity block codec, and the interface of every block codec.

    Subclasses override :meth:`encode` and :meth:`decode`, and
    :meth:`applies` to choose the directions they act on (the base class:
    both). :meth:`encode` returns a 1-D uint8 array; :meth:`decode` gets
    exactly those bytes back and returns a float32 tensor of ``info.shape``.
    """

    name = "identity"
    local_exact = False  # True: a rank's blocks to itself skip the codec

    def attach(self, exchange: Any) -> None:
        """Called once by the exchange that uses the codec (it may read the emulated link)."""

    def encodes(self, shards: list[tuple[int, int]], step: int) -> bool:
        """Whether this rank will encode its pooled blocks (of (table, columns) `shards`) at exchange `step`.
        When no rank will, the forward exchange sends plain floats and skips the size exchange."""
        return True

    def applies(self, direction: str) -> bool:
        """Whether blocks of this direction go through the codec."""
        return True

    def encode(self, block: torch.Tensor, info: BlockInfo) -> np.ndarray:
        return np.ascontiguousarray(block.detach().numpy(), dtype=np.float32).reshape(-1).view(np.uint8)

    def decode_into(self, data: np.ndarray, info: BlockInfo, out: np.ndarray) -> None:
        """Decodes into `out`, a float32 array of ``info.shape`` (default: :meth:`decode`, then a copy)."""
        out[...] = self.decode(data, info).numpy()

    def decode(self, data: np.ndarray, info: BlockInfo) -> torch.Tensor:
        expected = info.shape[0] * info.shape[1] * 4
        if data.size != expected:
            raise ValueError(f"identity codec: block of table {info.table} from rank {info.source} has "
                             f"{data.size} bytes, expected {expected}")
        return torch.from_numpy(np.array(data).view(np.float32).reshape(info.shape))


def __getattr__(name: str) -> Any:
    # The interface's name before it said which codec it is: kept working, with a warning.
    if name == "Codec":
        warnings.warn("pymcoll.algorithms.dlrm.block_codec.Codec is deprecated; use BlockCodec",
                      DeprecationWarning, stacklevel=2)
        return BlockCodec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
