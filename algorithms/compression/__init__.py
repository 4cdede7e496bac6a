"""Compression of the embedding exchange (imported as ``pymcoll.algorithms.compression``).

:func:`compress`, :func:`decompress` and :func:`inspect` run the C codec
(:mod:`.codec`): error-bounded linear quantization, repeated rows stored
once, codes packed or Huffman coded, in a self-describing, checked format.
:class:`AdaptiveBound` (:mod:`.adaptive`) chooses the bound per table and
per iteration. The exchange's codec, which needs torch, is
:class:`pymcoll.algorithms.compression.exchange_codec.ErrorBoundedCodec`.
"""

from .adaptive import SCHEDULES, AdaptiveBound, IterationSchedule, TableBounds
from .codec import STAGES, CodecError, CompressedInfo, compress, decompress, inspect

__all__ = ["SCHEDULES", "STAGES", "AdaptiveBound", "CodecError", "CompressedInfo", "IterationSchedule",
           "TableBounds", "compress", "decompress", "inspect"]
