"""Other ways to shrink an embedding block, behind one interface, to compare against.

Every :class:`Method` has ``compress(x, bound) -> bytes`` and
``decompress(buf) -> np.ndarray`` for a 2-D float32 array, and says whether
it honours an error bound (``error_bounded``; ``bound`` is relative to the
value range, as for the codec) or is a fixed-precision cast (the bound is
ignored). The buffers start with the shape, so they decode alone.

* ``pymcoll``: this package's codec (:mod:`.error_bounded`).
* ``fp16``, ``bf16``: casts, 2x.
* ``int8-rowwise``: per row, 8-bit codes over [min, max] with a float32
  scale and offset (the usual row-wise INT8 of embedding communication).
* ``fp8-rowwise``: per row, float8 e4m3 of the row scaled so that its largest
  magnitude maps to 448 (needs torch), with a float32 scale.
* ``sz3`` (PyPI ``pysz``) and ``zfp`` (PyPI ``zfpy``): general error-bounded
  compressors, when installed; absolute bound = relative x value range.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import numpy as np

from . import error_bounded

_SHAPE = struct.Struct("<II")


def _with_shape(x: np.ndarray, body: bytes) -> bytes:
    return _SHAPE.pack(*x.shape) + body


def _shape_of(buf: bytes) -> tuple[tuple[int, int], memoryview]:
    if len(buf) < _SHAPE.size:
        raise ValueError("buffer shorter than its shape header")
    rows, cols = _SHAPE.unpack_from(buf)
    return (rows, cols), memoryview(buf)[_SHAPE.size:]


def _absolute(x: np.ndarray, bound: float) -> float:
    finite = x[np.isfinite(x)]
    return bound * float(finite.max() - finite.min()) if finite.size else 0.0


class Method:
    """A compressor of 2-D float32 arrays."""

    name = "method"
    error_bounded = False

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        raise NotImplementedError

    def decompress(self, buf: bytes) -> np.ndarray:
        raise NotImplementedError


class Pymcoll(Method):
    name, error_bounded = "pymcoll", True

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        return error_bounded.compress(x, bound, relative=True)

    def decompress(self, buf: bytes) -> np.ndarray:
        return error_bounded.decompress(buf)


class FP16(Method):
    name = "fp16"

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        return _with_shape(x, x.astype(np.float16).tobytes())

    def decompress(self, buf: bytes) -> np.ndarray:
        shape, body = _shape_of(buf)
        return np.frombuffer(body, np.float16).reshape(shape).astype(np.float32)


class BF16(Method):
    name = "bf16"

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        return _with_shape(x, rounded.astype(np.uint16).tobytes())

    def decompress(self, buf: bytes) -> np.ndarray:
        shape, body = _shape_of(buf)
        half = np.frombuffer(body, np.uint16).astype(np.uint32) << np.uint32(16)
        return half.view(np.float32).reshape(shape)


class Int8Rowwise(Method):
    name = "int8-rowwise"

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        lo = x.min(axis=1, keepdims=True)
        scale = (x.max(axis=1, keepdims=True) - lo) / 255.0
        safe = np.where(scale > 0, scale, 1.0)
        q = np.clip(np.rint((x - lo) / safe), 0, 255).astype(np.uint8)
        return _with_shape(x, scale.astype(np.float32).tobytes() + lo.astype(np.float32).tobytes() + q.tobytes())

    def decompress(self, buf: bytes) -> np.ndarray:
        (rows, cols), body = _shape_of(buf)
        scale = np.frombuffer(body, np.float32, rows).reshape(rows, 1)
        lo = np.frombuffer(body, np.float32, rows, offset=4 * rows).reshape(rows, 1)
        q = np.frombuffer(body, np.uint8, rows * cols, offset=8 * rows).reshape(rows, cols)
        return (q.astype(np.float32) * scale + lo).astype(np.float32)


class FP8Rowwise(Method):
    name = "fp8-rowwise"

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        import torch

        amax = np.abs(x).max(axis=1, keepdims=True)
        scale = np.where(amax > 0, amax / 448.0, 1.0).astype(np.float32)
        q = torch.from_numpy(np.ascontiguousarray(x / scale, np.float32)).to(torch.float8_e4m3fn)
        return _with_shape(x, scale.tobytes() + q.view(torch.uint8).numpy().tobytes())

    def decompress(self, buf: bytes) -> np.ndarray:
        import torch

        (rows, cols), body = _shape_of(buf)
        scale = np.frombuffer(body, np.float32, rows).reshape(rows, 1)
        q = np.frombuffer(body, np.uint8, rows * cols, offset=4 * rows).reshape(rows, cols).copy()
        values = torch.from_numpy(q).view(torch.float8_e4m3fn).to(torch.float32).numpy()
        return values * scale


class SZ3(Method):
    name, error_bounded = "sz3", True

    def __init__(self) -> None:
        from pysz import sz, szConfig, szErrorBoundMode  # noqa: F401 - fails here when not installed

        self._sz, self._config, self._mode = sz, szConfig, szErrorBoundMode

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        config = self._config()
        config.errorBoundMode = self._mode.ABS
        config.absErrorBound = max(_absolute(x, bound), 1e-30)
        data, _ = self._sz.compress(np.ascontiguousarray(x, np.float32), config)
        return _with_shape(x, np.asarray(data, np.uint8).tobytes())

    def decompress(self, buf: bytes) -> np.ndarray:
        shape, body = _shape_of(buf)
        out, _ = self._sz.decompress(np.frombuffer(body, np.uint8), np.float32, shape)
        return np.asarray(out, np.float32).reshape(shape)


class ZFP(Method):
    name, error_bounded = "zfp", True

    def __init__(self) -> None:
        import zfpy

        self._zfpy = zfpy

    def compress(self, x: np.ndarray, bound: float) -> bytes:
        return self._zfpy.compress_numpy(np.ascontiguousarray(x, np.float32), tolerance=max(_absolute(x, bound), 1e-30))

    def decompress(self, buf: bytes) -> np.ndarray:
        return self._zfpy.decompress_numpy(bytes(buf)).astype(np.float32)


def available() -> dict[str, Method]:
    """Every method usable here (SZ3, ZFP and FP8 only when their packages are installed)."""
    out: dict[str, Any] = {}
    for cls in (Pymcoll, FP16, BF16, Int8Rowwise, FP8Rowwise, SZ3, ZFP):
        try:
            m = cls()
            if cls is FP8Rowwise:
                importlib.import_module("torch")  # its fp8 dtype: ImportError leaves the method out
            out[m.name] = m
        except ImportError:
            continue
    return out
