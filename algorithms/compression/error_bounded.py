"""Error-bounded lossy compression of 2-D embedding tensors (the C codec, ``pymcoll._codec``).

For a (rows, cols) tensor of float32, float16 or bfloat16 and an error
bound, :func:`compress` returns bytes that :func:`decompress` turns back
into a tensor of the same shape and dtype with every element within the
bound of the original: ``|x - decoded| <= bound`` (``relative=True``: bound x
(max - min) of the finite values), checked in double precision against the
value the decoder produces in the tensor's dtype. NaN, infinities and
values no code can represent within the bound are kept exactly.

The pipeline: repeated rows are stored once (pooled embeddings of the same
ids are the same bytes), the distinct rows are quantized linearly (code =
round(x / 2 bound)), and the codes are packed at a fixed width or Huffman
coded, whichever is smaller ("auto"), or as `stage` asks; "exact" stores the
distinct rows as they are. The buffer carries a versioned header with CRCs;
:func:`inspect` reads it, and a corrupt or truncated buffer raises
:class:`CodecError`.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from pymcoll._codec import ffi, lib

STAGES = {"auto": lib.PMC_CODEC_STAGE_AUTO, "exact": lib.PMC_CODEC_STAGE_EXACT,
          "packed": lib.PMC_CODEC_STAGE_PACKED, "huffman": lib.PMC_CODEC_STAGE_HUFFMAN}
_STAGE_NAMES = {v: k for k, v in STAGES.items()}
_DTYPE_NAMES = {lib.PMC_CODEC_F32: "float32", lib.PMC_CODEC_BF16: "bfloat16", lib.PMC_CODEC_F16: "float16"}


class CodecError(ValueError):
    """The buffer is not a valid compressed tensor (corrupt, truncated, another format version)."""


@dataclass(frozen=True)
class CompressedInfo:
    """What a compressed buffer's header says."""

    version: int
    dtype: str  # "float32", "bfloat16" or "float16"
    shape: tuple[int, int]
    stage: str  # "exact", "packed" or "huffman"
    bound: float  # the absolute bound applied (0.0 for exact)
    requested: float  # the bound as given
    relative: bool  # whether `requested` was relative to the value range
    deduplicated: bool  # repeated rows stored once
    wide: bool  # 16-bit codes
    unique_rows: int
    exceptions: int  # elements stored exactly among the coded ones
    code_bits: int  # bits per code for "packed"
    payload_bytes: int
    nbytes: int  # the whole buffer

    @property
    def ratio(self) -> float:
        """Uncompressed bytes over compressed bytes."""
        size = 4 if self.dtype == "float32" else 2
        return self.shape[0] * self.shape[1] * size / self.nbytes


class _Scratch(threading.local):
    """Per thread: the C context (scratch memory) and an output buffer, reused across calls."""

    def __init__(self) -> None:
        self.ctx = ffi.gc(lib.pmc_codec_ctx_new(), lib.pmc_codec_ctx_free)
        if self.ctx == ffi.NULL:
            raise MemoryError("pymcoll codec: no memory for a context")
        self.out = bytearray(0)
        self.out_ptr = ffi.NULL
        self.written = ffi.new("uint64_t *")
        self.msg = ffi.new("char[]", lib.PMC_CODEC_MESSAGE_BYTES)
        self.header = ffi.new("pmc_codec_header *")


_scratch = _Scratch()


def _raise(rc: int, msg: Any, what: str) -> None:
    text = ffi.string(msg).decode(errors="replace")
    if rc in (lib.PMC_CODEC_ECORRUPT, lib.PMC_CODEC_EVERSION):
        raise CodecError(f"{what}: {text}")
    if rc == lib.PMC_CODEC_ENOMEM:
        raise MemoryError(f"{what}: {text}")
    if rc == lib.PMC_CODEC_EINVAL:
        raise ValueError(f"{what}: {text}")
    raise RuntimeError(f"{what}: {text} (status {rc})")


_F32 = np.dtype(np.float32)
# The numpy dtype a decoded tensor of each codec dtype takes (bfloat16 as its bits).
_NP_DTYPES = {lib.PMC_CODEC_F32: np.float32, lib.PMC_CODEC_F16: np.float16, lib.PMC_CODEC_BF16: np.uint16}


def _as_input(x: Any) -> tuple[np.ndarray, int, tuple[int, int]]:
    """(contiguous array of the raw elements, dtype code, shape)."""
    if type(x) is np.ndarray and x.dtype == _F32 and x.ndim == 2 and x.flags.c_contiguous:
        return x, lib.PMC_CODEC_F32, x.shape  # the common case, checked first: small blocks are many
    if type(x).__module__.startswith("torch"):
        import torch

        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: a {type(x).__name__}; give a 2-D numpy array or torch tensor")
        if x.device.type != "cpu":
            raise ValueError(f"x: a tensor on {x.device}; move it to the CPU first")
        codes = {torch.float32: lib.PMC_CODEC_F32, torch.float16: lib.PMC_CODEC_F16,
                 torch.bfloat16: lib.PMC_CODEC_BF16}
        if x.dtype not in codes:
            raise TypeError(f"x: dtype {x.dtype}; the codec takes float32, float16 or bfloat16")
        if x.dim() != 2:
            raise ValueError(f"x: shape {tuple(x.shape)}; the codec takes a 2-D (rows, cols) tensor")
        t = x.detach().contiguous()
        raw = t.view(torch.int16).numpy() if t.dtype != torch.float32 else t.numpy()
        return raw, codes[x.dtype], (int(x.shape[0]), int(x.shape[1]))
    arr = np.asarray(x)
    codes_np = {np.dtype(np.float32): lib.PMC_CODEC_F32, np.dtype(np.float16): lib.PMC_CODEC_F16}
    if arr.dtype not in codes_np:
        raise TypeError(f"x: dtype {arr.dtype}; the codec takes float32 or float16 arrays "
                        "(bfloat16 as a torch tensor)")
    if arr.ndim != 2:
        raise ValueError(f"x: shape {arr.shape}; the codec takes a 2-D (rows, cols) array")
    return np.ascontiguousarray(arr), codes_np[arr.dtype], (int(arr.shape[0]), int(arr.shape[1]))


def compress(x: Any, bound: float, relative: bool = True, stage: str = "auto") -> bytes:
    """Compressed bytes of the 2-D tensor `x` within error `bound` (relative:
    times the value range of x's finite values)."""
    bound = float(bound)
    if not bound > 0 or math.isinf(bound):
        raise ValueError(f"bound={bound}: a finite error bound > 0")
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: use one of {', '.join(STAGES)}")
    raw, dtype, (rows, cols) = _as_input(x)
    if cols == 0:
        raise ValueError(f"x: shape {(rows, cols)}; rows need at least one column")
    s = _scratch
    cap = lib.pmc_codec_max_bytes(rows, cols, dtype)
    if len(s.out) < cap:
        s.out = bytearray(cap)
        s.out_ptr = ffi.from_buffer(s.out)
    written = s.written
    src = ffi.from_buffer(raw) if raw.size else ffi.NULL
    rc = lib.pmc_codec_compress(s.ctx, src, rows, cols, dtype, bound, 1 if relative else 0, STAGES[stage],
                                s.out_ptr, cap, written, s.msg, lib.PMC_CODEC_MESSAGE_BYTES)
    if rc:
        _raise(rc, s.msg, "compress")
    return bytes(memoryview(s.out)[:written[0]])


def _header(buf: Any) -> tuple[Any, Any, int]:
    """(the buffer for C, its checked header in this thread's scratch, its length)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    cbuf = ffi.from_buffer(view)
    s = _scratch
    h = s.header
    rc = lib.pmc_codec_read_header(cbuf, len(view), h, s.msg, lib.PMC_CODEC_MESSAGE_BYTES)
    if rc:
        _raise(rc, s.msg, "decompress")
    return cbuf, h, len(view)


def inspect(buf: Any) -> CompressedInfo:
    """The header of a compressed buffer (checked; the payload is not read)."""
    _, h, n = _header(buf)
    return CompressedInfo(version=int(h.version), dtype=_DTYPE_NAMES[h.dtype], shape=(int(h.rows), int(h.cols)),
                          stage=_STAGE_NAMES[h.stage], bound=float(h.bound), requested=float(h.requested),
                          relative=bool(h.flags & lib.PMC_CODEC_FLAG_RELATIVE),
                          deduplicated=bool(h.flags & lib.PMC_CODEC_FLAG_DEDUP),
                          wide=bool(h.flags & lib.PMC_CODEC_FLAG_WIDE), unique_rows=int(h.unique_rows),
                          exceptions=int(h.exceptions), code_bits=int(h.code_bits),
                          payload_bytes=int(h.payload_bytes), nbytes=n)


def decompress(buf: Any, out: Optional[np.ndarray] = None) -> Any:
    """The tensor of a compressed buffer: a numpy array of its shape and dtype
    (a torch bfloat16 tensor for bfloat16, numpy uint16 bits without torch).
    `out`: a C-contiguous numpy array of that shape and dtype to fill instead."""
    cbuf, h, n = _header(buf)
    rows, cols, code = int(h.rows), int(h.cols), int(h.dtype)
    np_dtype = _NP_DTYPES[code]
    if out is None:
        target = np.empty((rows, cols), np_dtype)
    else:
        if out.shape != (rows, cols) or out.dtype != np.dtype(np_dtype) or not out.flags.c_contiguous:
            raise ValueError(f"out: a C-contiguous {np.dtype(np_dtype)} array of shape {(rows, cols)} is needed, "
                             f"got {out.dtype} {out.shape}")
        target = out
    s = _scratch
    dst = ffi.from_buffer(target) if target.size else ffi.new("uint8_t[1]")
    rc = lib.pmc_codec_decompress(s.ctx, cbuf, n, dst, target.nbytes, s.msg, lib.PMC_CODEC_MESSAGE_BYTES)
    if rc:
        _raise(rc, s.msg, "decompress")
    if code == lib.PMC_CODEC_BF16 and out is None:
        try:
            import torch
        except ImportError:
            return target
        return torch.from_numpy(target.view(np.int16)).view(torch.bfloat16)
    return target
