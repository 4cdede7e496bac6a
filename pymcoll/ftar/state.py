"""Safe state snapshots for FTAR catch-up: nothing is ever unpickled.

:func:`encode_state` turns a nested structure of dicts (str or int keys),
lists, tuples, None, bool, int, float, str, numpy arrays and torch tensors into
bytes; :func:`decode_state` turns them back, validating everything, and
raises ValueError on any corruption. The format (all integers little-endian)::

    magic "PMCSTATE" (8 bytes) | u32 version | u64 header length
    header: UTF-8 JSON {"root": <node>}  (the structure; arrays and tensors are
            placeholders {"t": "ndarray"|"npscalar"|"tensor", "dtype", "shape",
            "offset", "nbytes"} into the data section)
    u64 data length | data: the raw little-endian buffers, each 64-byte aligned
    u32 CRC-32 of everything before it

Tagged JSON nodes: {"t": "dict", "items": [[key, node], ...], "meta"?: node}
(ordered; "meta" keeps a torch state dict's ``_metadata``), {"t": "tuple",
"items": [...]}; JSON lists, strings, numbers, true/false and null stand for
themselves. Tensors come back as CPU torch tensors (dtype and shape kept),
arrays as numpy arrays, numpy scalars as numpy scalars.

:func:`model_state`, :func:`load_model_state` and :func:`state_hash` apply it
to a torch model and optimizer; :func:`state_hash` is what tests compare to
check that replicas are bit-identical.
"""

from __future__ import annotations

import collections
import hashlib
import json
import struct
import sys
import zlib
from typing import Any, Optional

__all__ = ["encode_state", "decode_state", "model_state", "load_model_state", "state_hash", "MAGIC", "VERSION"]

MAGIC = b"PMCSTATE"
VERSION = 1

_PREFIX = struct.Struct("<8sIQ")     # magic, version, header length
_U64 = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_ALIGN = 64
_MAX_DEPTH = 100
_MAX_NDIM = 64

# dtype name -> item size. Only these are ever encoded or decoded.
_NUMPY_DTYPES = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "float16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16,
}
_TORCH_DTYPES = dict(_NUMPY_DTYPES, bfloat16=2, float8_e4m3fn=1, float8_e5m2=1, float8_e4m3fnuz=1,
                     float8_e5m2fnuz=1)
_ARRAY_TAGS = ("ndarray", "npscalar", "tensor")
_ARRAY_KEYS = frozenset(("t", "dtype", "shape", "offset", "nbytes"))


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.split(".", 1)[0] == "torch"


def _is_numpy(obj: Any) -> bool:
    return type(obj).__module__.split(".", 1)[0] == "numpy"


def _where(path: tuple[Any, ...]) -> str:
    return "state" + "".join(f"[{p!r}]" for p in path)


def _numpy_bytes(a: Any) -> Any:
    """The array's elements as a flat little-endian uint8 array (no copy when already so)."""
    import numpy as np

    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _torch_cpu(t: Any, where: str) -> Any:
    """A detached, contiguous, CPU copy-or-view of tensor `t` (TypeError for tensors that have no bytes)."""
    import torch

    t = t.detach()
    if t.layout != torch.strided:
        raise TypeError(f"{where} is a {t.layout} tensor; pass a dense tensor (t.to_dense())")
    if t.is_quantized:
        raise TypeError(f"{where} is a quantized tensor; dequantize it first")
    if t.device.type == "meta":
        raise TypeError(f"{where} is on the meta device and holds no data")
    if t.device.type != "cpu":
        t = t.cpu()
    return t.resolve_conj().resolve_neg().contiguous()


def _torch_bytes(t: Any) -> Any:
    """A contiguous CPU tensor's elements as a flat uint8 numpy array (a view)."""
    import torch

    if sys.byteorder != "little":
        raise NotImplementedError("encoding torch tensors needs a little-endian host")
    if t.numel() == 0:
        import numpy as np

        return np.empty(0, np.uint8)
    return t.reshape(-1).view(torch.uint8).numpy()


class _Encoder:
    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.size = 0

    def add(self, raw: Any) -> tuple[int, int]:
        pad = -self.size % _ALIGN
        if pad:
            self.chunks.append(bytes(pad))
            self.size += pad
        offset, n = self.size, raw.nbytes
        if n:
            self.chunks.append(raw)
            self.size += n
        return offset, n

    def placeholder(self, tag: str, dtype: str, shape: tuple[int, ...], raw: Any) -> dict[str, Any]:
        offset, n = self.add(raw)
        return {"t": tag, "dtype": dtype, "shape": [int(d) for d in shape], "offset": offset, "nbytes": n}

    def enc(self, obj: Any, path: tuple[Any, ...]) -> Any:
        if len(path) > _MAX_DEPTH:
            raise ValueError(f"{_where(path[:3])}...: nested deeper than {_MAX_DEPTH} levels")
        if _is_numpy(obj):  # first: numpy's float64 is a float, its bool_ and ints are not
            import numpy as np

            if isinstance(obj, (np.ndarray, np.generic)):
                arr = np.asarray(obj)
                if arr.dtype.name not in _NUMPY_DTYPES or arr.dtype.fields is not None:
                    raise TypeError(f"{_where(path)} has dtype {arr.dtype}; encode_state takes "
                                    f"{', '.join(_NUMPY_DTYPES)}")
                tag = "ndarray" if isinstance(obj, np.ndarray) else "npscalar"
                return self.placeholder(tag, arr.dtype.name, arr.shape, _numpy_bytes(arr))
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, dict):
            items = []
            for key, value in obj.items():
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise TypeError(f"{_where(path)} has a key {key!r} of type {type(key).__name__}; "
                                    f"dict keys must be str or int")
                items.append([key if isinstance(key, str) else int(key), self.enc(value, path + (key,))])
            node: dict[str, Any] = {"t": "dict", "items": items}
            meta = getattr(obj, "_metadata", None)
            if isinstance(meta, dict):
                node["meta"] = self.enc(meta, path + ("<_metadata>",))
            return node
        if isinstance(obj, list):
            return [self.enc(v, path + (i,)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"t": "tuple", "items": [self.enc(v, path + (i,)) for i, v in enumerate(obj)]}
        if _is_torch(obj):
            import torch

            if isinstance(obj, torch.Tensor):
                name = str(obj.dtype).removeprefix("torch.")
                if name not in _TORCH_DTYPES:
                    raise TypeError(f"{_where(path)} has dtype {obj.dtype}; encode_state takes "
                                    f"{', '.join(_TORCH_DTYPES)}")
                t = _torch_cpu(obj, _where(path))
                return self.placeholder("tensor", name, tuple(t.shape), _torch_bytes(t))
        raise TypeError(f"{_where(path)} is a {type(obj).__module__}.{type(obj).__qualname__}; encode_state takes "
                        f"dicts, lists, tuples, None, bool, int, float, str, numpy arrays and torch tensors "
                        f"(nothing is pickled)")


def encode_state(obj: Any) -> bytes:
    """Encode `obj` (see the module docstring for what it may hold) as bytes; TypeError names what cannot be."""
    enc = _Encoder()
    root = enc.enc(obj, ())
    try:
        header = json.dumps({"root": root}, allow_nan=True, separators=(",", ":")).encode("utf-8")
    except ValueError as exc:  # e.g. an int too large to print
        raise ValueError(f"cannot encode the state: {exc}") from None
    head = _PREFIX.pack(MAGIC, VERSION, len(header)) + header + _U64.pack(enc.size)
    crc = zlib.crc32(head)
    for chunk in enc.chunks:
        crc = zlib.crc32(chunk, crc)
    return b"".join([head, *enc.chunks, _CRC.pack(crc)])


class _Decoder:
    def __init__(self, data: memoryview) -> None:
        self.data = data

    @staticmethod
    def _bad(what: str) -> ValueError:
        return ValueError(f"corrupt state snapshot: {what}")

    def _int(self, node: dict[str, Any], key: str) -> int:
        value = node[key]
        if type(value) is not int or value < 0:
            raise self._bad(f"{node.get('t')} {key} {value!r} is not a non-negative integer")
        return value

    def array(self, node: dict[str, Any]) -> Any:
        import numpy as np

        tag = node["t"]
        if set(node) != _ARRAY_KEYS:
            raise self._bad(f"{tag} placeholder with keys {sorted(node)}")
        name = node["dtype"]
        sizes = _TORCH_DTYPES if tag == "tensor" else _NUMPY_DTYPES
        if not isinstance(name, str) or name not in sizes:
            raise self._bad(f"{tag} dtype {name!r} is not one of {', '.join(sizes)}")
        shape = node["shape"]
        if not isinstance(shape, list) or len(shape) > _MAX_NDIM or \
                any(type(d) is not int or d < 0 for d in shape):
            raise self._bad(f"{tag} shape {shape!r} is not a list of at most {_MAX_NDIM} non-negative integers")
        if tag == "npscalar" and shape:
            raise self._bad(f"npscalar with shape {shape!r}")
        offset, nbytes = self._int(node, "offset"), self._int(node, "nbytes")
        count = 1
        for d in shape:
            count *= d
        if count * sizes[name] != nbytes:
            raise self._bad(f"{tag} of dtype {name} and shape {shape} needs {count * sizes[name]} bytes, "
                            f"not {nbytes}")
        if offset > len(self.data) or nbytes > len(self.data) - offset:
            raise self._bad(f"{tag} bytes {offset}..{offset + nbytes} lie outside the {len(self.data)}-byte data")
        if tag == "tensor":
            return self.tensor(name, shape, offset, nbytes)
        dtype = np.dtype(name)
        if count:
            arr = np.frombuffer(self.data, dtype=dtype.newbyteorder("<"), count=count, offset=offset)
            arr = arr.astype(dtype, copy=True).reshape(shape)
        else:
            arr = np.empty(shape, dtype)
        return arr[()] if tag == "npscalar" else arr

    def tensor(self, name: str, shape: list[int], offset: int, nbytes: int) -> Any:
        import numpy as np
        import torch

        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype) or dtype.itemsize != _TORCH_DTYPES[name]:
            raise ValueError(f"the state holds a tensor of dtype {name}, which this torch ({torch.__version__}) "
                             f"lacks; use a torch that has it")
        if sys.byteorder != "little":
            raise NotImplementedError("decoding torch tensors needs a little-endian host")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        raw = np.frombuffer(self.data, dtype=np.uint8, count=nbytes, offset=offset).copy()
        return torch.from_numpy(raw).view(dtype).reshape(shape)

    def dec(self, node: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise self._bad(f"nested deeper than {_MAX_DEPTH} levels")
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            return [self.dec(v, depth + 1) for v in node]
        if not isinstance(node, dict):
            raise self._bad(f"unexpected JSON value of type {type(node).__name__}")
        tag = node.get("t")
        if tag in _ARRAY_TAGS:
            return self.array(node)
        if tag == "tuple":
            if set(node) != {"t", "items"} or not isinstance(node["items"], list):
                raise self._bad("malformed tuple")
            return tuple(self.dec(v, depth + 1) for v in node["items"])
        if tag == "dict":
            if not {"t", "items"} <= set(node) <= {"t", "items", "meta"} or not isinstance(node["items"], list):
                raise self._bad("malformed dict")
            out: dict[Any, Any] = collections.OrderedDict() if "meta" in node else {}
            for item in node["items"]:
                if not isinstance(item, list) or len(item) != 2:
                    raise self._bad("malformed dict item")
                key, value = item
                if not (isinstance(key, str) or type(key) is int):
                    raise self._bad(f"dict key {key!r} is neither str nor int")
                if key in out:
                    raise self._bad(f"duplicate dict key {key!r}")
                out[key] = self.dec(value, depth + 1)
            if "meta" in node:
                meta = self.dec(node["meta"], depth + 1)
                if not isinstance(meta, dict):
                    raise self._bad("dict metadata is not a dict")
                out._metadata = meta  # type: ignore[attr-defined]
            return out
        raise self._bad(f"unknown node tag {tag!r}")


def decode_state(buf: Any) -> Any:
    """Decode bytes made by :func:`encode_state`.

    ValueError on anything wrong: magic, version, lengths (truncated or
    trailing bytes), the CRC, the JSON structure, dtypes outside the
    whitelist, buffers outside the data section.
    """
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError(f"buf must be bytes-like, not {type(buf).__name__}") from None
    if not mv.c_contiguous:
        raise ValueError("buf must be a contiguous buffer")
    mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
    n = len(mv)
    fixed = _PREFIX.size + _U64.size + _CRC.size
    if n < fixed:
        raise ValueError(f"corrupt state snapshot: {n} bytes is shorter than the smallest snapshot ({fixed})")
    magic, version, hlen = _PREFIX.unpack_from(mv, 0)
    if magic != MAGIC:
        raise ValueError(f"not a pymcoll state snapshot: magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise ValueError(f"state snapshot version {version} is not supported (this pymcoll reads {VERSION})")
    if hlen > n - fixed:
        raise ValueError(f"corrupt state snapshot: header of {hlen} bytes in a {n}-byte buffer (truncated?)")
    pos = _PREFIX.size + hlen
    (dlen,) = _U64.unpack_from(mv, pos)
    pos += _U64.size
    if dlen != n - pos - _CRC.size:
        raise ValueError(f"corrupt state snapshot: data of {dlen} bytes, but {n - pos - _CRC.size} follow the "
                         f"header (truncated or trailing bytes)")
    (crc,) = _CRC.unpack_from(mv, n - _CRC.size)
    if zlib.crc32(mv[: n - _CRC.size]) != crc:
        raise ValueError("corrupt state snapshot: CRC-32 mismatch")
    try:
        tree = json.loads(bytes(mv[_PREFIX.size: _PREFIX.size + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"corrupt state snapshot: the header is not JSON ({type(exc).__name__})") from None
    if not isinstance(tree, dict) or set(tree) != {"root"}:
        raise ValueError("corrupt state snapshot: the header is not {\"root\": ...}")
    try:
        return _Decoder(mv[pos: pos + dlen]).dec(tree["root"], 0)
    except RecursionError:
        raise ValueError("corrupt state snapshot: nested too deep") from None


def model_state(model: Any, optimizer: Optional[Any] = None) -> dict[str, Any]:
    """``{"model": model.state_dict(), "optimizer": optimizer.state_dict() or None}``, ready for encode_state."""
    return {"model": model.state_dict(), "optimizer": None if optimizer is None else optimizer.state_dict()}


def load_model_state(model: Any, optimizer: Optional[Any], state: dict[str, Any]) -> None:
    """Load a :func:`model_state` dict (e.g. from :func:`decode_state`) into `model` and `optimizer`.

    ValueError when `state` is not such a dict or lacks the optimizer's part.
    """
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise ValueError("state must be a dict made by model_state(model, optimizer): {'model': ..., 'optimizer': ...}")
    if optimizer is not None and not isinstance(state.get("optimizer"), dict):
        raise ValueError("state holds no optimizer state: make it with model_state(model, optimizer), "
                         "or pass optimizer=None")
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])


def _key_order(key: Any) -> tuple[str, str]:
    return type(key).__name__, key if isinstance(key, str) else f"{key!r:>40}"


def _hash_into(h: Any, obj: Any) -> None:
    if _is_torch(obj):
        import torch

        if isinstance(obj, torch.Tensor):
            t = _torch_cpu(obj, "tensor")
            h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
            h.update(memoryview(_torch_bytes(t)))
            return
    if _is_numpy(obj):
        import numpy as np

        if isinstance(obj, (np.ndarray, np.generic)):
            arr = np.asarray(obj)
            h.update(f"A{arr.dtype.name}{arr.shape}:".encode())
            h.update(memoryview(_numpy_bytes(arr)))
            return
    if isinstance(obj, dict):
        h.update(b"{")
        for key in sorted(obj, key=_key_order):
            h.update(f"{key!r}:".encode())
            _hash_into(h, obj[key])
            h.update(b",")
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for v in obj:
            _hash_into(h, v)
            h.update(b",")
        h.update(b"]" if isinstance(obj, list) else b")")
    else:
        h.update(f"{type(obj).__name__}:{obj!r};".encode())


def state_hash(model: Any, optimizer: Optional[Any] = None) -> str:
    """SHA-256 (hex) of the model's and optimizer's state: every tensor's bytes, dtype and shape, and every
    scalar, in a deterministic order (dict keys sorted). Equal hashes: bit-identical replicas."""
    h = hashlib.sha256()
    _hash_into(h, {"model": model.state_dict()})
    if optimizer is not None:
        _hash_into(h, {"optimizer": optimizer.state_dict()})
    return h.hexdigest()
