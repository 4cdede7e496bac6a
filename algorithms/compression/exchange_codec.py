"""Deprecated: the DLRM exchange's compressor is
:class:`pymcoll.algorithms.compression.exchange_compressor.ExchangeCompressor`.
This module re-exports it under its former names and warns."""

import warnings

from .exchange_compressor import COMPRESSED, COPY_Bps, RAW, CompressorStats, ExchangeCompressor

ErrorBoundedCodec = ExchangeCompressor
CodecStats = CompressorStats

__all__ = ["COMPRESSED", "COPY_Bps", "RAW", "CodecStats", "CompressorStats", "ErrorBoundedCodec",
           "ExchangeCompressor"]

warnings.warn("pymcoll.algorithms.compression.exchange_codec is deprecated; import ExchangeCompressor "
              "(formerly ErrorBoundedCodec) from pymcoll.algorithms.compression.exchange_compressor",
              DeprecationWarning, stacklevel=2)
