"""Compression of the embedding exchange (imported as ``pymcoll.algorithms.compression``).

:func:`compress`, :func:`decompress` and :func:`inspect` run the C codec
(:mod:`.error_bounded`): error-bounded linear quantization, repeated rows
stored once, codes packed or Huffman coded, in a self-describing, checked
format. :class:`AdaptiveBound` (:mod:`.adaptive`) chooses the bound per table
and per iteration. The DLRM exchange's block codec built on them, which needs
torch, is
:class:`pymcoll.algorithms.compression.exchange_compressor.ExchangeCompressor`.
"""

from .adaptive import SCHEDULES, AdaptiveBound, IterationSchedule, TableBounds
from .error_bounded import STAGES, CodecError, CompressedInfo, compress, decompress, inspect

__all__ = ["SCHEDULES", "STAGES", "AdaptiveBound", "CodecError", "CompressedInfo", "IterationSchedule",
           "TableBounds", "compress", "decompress", "inspect"]
