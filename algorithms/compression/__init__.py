"""Compression of the embedding exchange (imported as ``pymcoll.algorithms.compression``).

:func:`compress`, :func:`decompress` and :func:`inspect` run the C codec
(:mod:`.codec`): error-bounded linear quantization, repeated rows stored
once, codes packed or Huffman coded, in a self-describing, checked format.
"""

from .codec import STAGES, CodecError, CompressedInfo, compress, decompress, inspect

__all__ = ["STAGES", "CodecError", "CompressedInfo", "compress", "decompress", "inspect"]
