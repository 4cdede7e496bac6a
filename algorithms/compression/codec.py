"""Deprecated: the C codec's Python functions are in
:mod:`pymcoll.algorithms.compression.error_bounded` (or import them from
:mod:`pymcoll.algorithms.compression`). This module re-exports them and warns."""

import warnings

from .error_bounded import STAGES, CodecError, CompressedInfo, compress, decompress, inspect

__all__ = ["STAGES", "CodecError", "CompressedInfo", "compress", "decompress", "inspect"]

warnings.warn("pymcoll.algorithms.compression.codec is deprecated; import "
              "pymcoll.algorithms.compression.error_bounded (or pymcoll.algorithms.compression)",
              DeprecationWarning, stacklevel=2)
