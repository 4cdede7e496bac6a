"""Deprecated: the exchange's block codec hook is
:mod:`pymcoll.algorithms.dlrm.block_codec` (:class:`BlockCodec`, formerly
``Codec``). This module re-exports it under its former names and warns."""

import warnings

from .block_codec import BACKWARD, FORWARD, BlockCodec, BlockInfo

Codec = BlockCodec

__all__ = ["BACKWARD", "FORWARD", "BlockCodec", "BlockInfo", "Codec"]

warnings.warn("pymcoll.algorithms.dlrm.codec is deprecated; import BlockCodec (formerly Codec) and BlockInfo "
              "from pymcoll.algorithms.dlrm.block_codec",
              DeprecationWarning, stacklevel=2)
