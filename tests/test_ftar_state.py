"""FTAR state snapshots (pymcoll.ftar.state): round trips of nested structures,
numpy arrays and torch tensors; every corruption (truncation, flipped or
appended bytes, forged headers with a valid CRC) raises ValueError; the state
hash tells equal replicas from different ones. No MPI, no network."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pymcoll.ftar.state import MAGIC, VERSION, decode_state, encode_state, load_model_state, model_state, state_hash

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NUMPY_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                "float32", "float64", "complex64", "complex128", "<f4", ">f8", ">i2"]

arrays = hnp.arrays(
    dtype=st.sampled_from(NUMPY_DTYPES).map(np.dtype),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
)
leaves = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**200), max_value=2**200)
          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20) | arrays)
keys = st.text(max_size=10) | st.integers(min_value=-(2**70), max_value=2**70)
structures = st.recursive(
    leaves,
    lambda children: (st.lists(children, max_size=4) | st.lists(children, max_size=4).map(tuple)
                      | st.dictionaries(keys, children, max_size=4)),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Bit-exact structural equality (NaN equals NaN, -0.0 differs from 0.0, types kept)."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype.name == b.dtype.name and a.shape == b.shape
                and b.dtype.isnative and np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="))).tobytes()
                == np.ascontiguousarray(b).tobytes())
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def forge(root: Any, data: bytes = b"", version: int = VERSION, magic: bytes = MAGIC) -> bytes:
    """A snapshot with the given JSON root and data section and a correct CRC (to reach the validator)."""
    header = json.dumps({"root": root}).encode()
    body = struct.pack("<8sIQ", magic, version, len(header)) + header + struct.pack("<Q", len(data)) + data
    return body + struct.pack("<I", zlib.crc32(body))


def placeholder(tag: str = "ndarray", dtype: str = "float32", shape: Any = (2,), offset: int = 0,
                nbytes: int = 8) -> dict[str, Any]:
    return {"t": tag, "dtype": dtype, "shape": list(shape), "offset": offset, "nbytes": nbytes}


@given(structures)
@FUZZ
def test_round_trip(obj: Any) -> None:
    assert same(obj, decode_state(encode_state(obj)))


@given(arrays)
@FUZZ
def test_arrays_keep_dtype_shape_and_bits(a: np.ndarray) -> None:
    b = decode_state(encode_state(a))
    assert isinstance(b, np.ndarray) and b.shape == a.shape and b.dtype == a.dtype.newbyteorder("=")
    assert b.flags.writeable and b.flags.c_contiguous
    assert same(a, b)


def test_non_contiguous_empty_and_zero_d_arrays() -> None:
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    for x in (a.T, a[::2, 1::3], a[:0], np.zeros((3, 0, 2), np.int16), np.array(5, np.uint64), np.array(True)):
        y = decode_state(encode_state(x))
        assert y.shape == x.shape and y.dtype == x.dtype and np.array_equal(x, y)


def test_numpy_scalars_and_python_scalars() -> None:
    obj = {"f": np.float32(1.25), "d": np.float64(-0.0), "b": np.bool_(False), "i": np.int64(-3), "p": 1.5,
           "n": None, "t": True, 7: "seven", -1: (1, [2, (3,)])}
    out = decode_state(encode_state(obj))
    assert same(obj["p"], out["p"]) and out[7] == "seven" and out[-1] == (1, [2, (3,)])
    for k in ("f", "d", "b", "i"):
        assert type(out[k]) is type(obj[k]) and out[k] == obj[k]
    assert math.copysign(1, out["d"]) == -1


def test_unsupported_objects_are_refused() -> None:
    for bad in ({"x": {1, 2}}, {"x": object()}, {(1, 2): 3}, {True: 1}, {"a": [np.array([object()])]},
                {"s": np.zeros(2, dtype=[("a", "<i4")])}, b"bytes"):
        with pytest.raises(TypeError):
            encode_state(bad)
    with pytest.raises(TypeError, match=r"state\['a'\]\[0\]"):
        encode_state({"a": [lambda: 0]})


def test_deep_nesting_is_refused() -> None:
    obj: Any = 0
    for _ in range(150):
        obj = [obj]
    with pytest.raises(ValueError, match="nested"):
        encode_state(obj)


# --- corruption ----------------------------------------------------------

VALID = encode_state({"w": np.arange(10, dtype=np.float32), "meta": {"step": 3, "lr": 0.1}, "t": (1, "a")})


@given(st.integers(min_value=0, max_value=len(VALID) - 1))
@FUZZ
def test_truncated_buffers_raise(cut: int) -> None:
    with pytest.raises(ValueError):
        decode_state(VALID[:cut])


@given(st.integers(min_value=0, max_value=len(VALID) - 1), st.integers(min_value=1, max_value=255))
@FUZZ
def test_flipped_bytes_raise(pos: int, xor: int) -> None:
    buf = bytearray(VALID)
    buf[pos] ^= xor
    with pytest.raises(ValueError):
        decode_state(bytes(buf))


@given(st.binary(min_size=1, max_size=64))
@FUZZ
def test_appended_bytes_raise(extra: bytes) -> None:
    with pytest.raises(ValueError):
        decode_state(VALID + extra)


@given(st.binary(max_size=400))
@FUZZ
def test_garbage_raises(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_state(data)
    with pytest.raises(ValueError):
        decode_state(MAGIC + data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["t", "items", "dtype", "shape", "offset",
                                                                          "nbytes", "meta", "x"]), c, max_size=5)
    | st.fixed_dictionaries({"t": st.sampled_from(["dict", "tuple", "ndarray", "npscalar", "tensor", "set"])},
                            optional={"items": c, "dtype": st.sampled_from(["float32", "object", "bfloat16", 1]),
                                      "shape": c, "offset": c, "nbytes": c, "meta": c}),
    max_leaves=15,
)


@given(json_values, st.binary(max_size=64))
@FUZZ
def test_forged_headers_decode_or_raise_value_error(root: Any, data: bytes) -> None:
    """Past the CRC (forged correctly), any JSON either decodes or raises ValueError; nothing else."""
    try:
        decode_state(forge(root, data))
    except ValueError:
        pass


@pytest.mark.parametrize("root,data,match", [
    (placeholder(offset=4), bytes(8), "outside"),
    (placeholder(offset=2**64), bytes(8), "outside"),
    (placeholder(nbytes=4), bytes(8), "needs 8 bytes"),
    (placeholder(dtype="object"), bytes(8), "dtype"),
    (placeholder(dtype="bfloat16", nbytes=4), bytes(8), "dtype"),           # numpy arrays have no bfloat16
    (placeholder(shape=(-2,)), bytes(8), "shape"),
    (placeholder(shape=(True, 2)), bytes(8), "shape"),
    (placeholder(shape=(2**40, 2**40), nbytes=8), bytes(8), "needs"),
    (placeholder(offset=-1), bytes(8), "non-negative"),
    (placeholder(offset=1.5), bytes(8), "non-negative"),
    (placeholder(tag="npscalar", shape=(1,), nbytes=4), bytes(8), "npscalar"),
    (dict(placeholder(), extra=1), bytes(8), "keys"),
    ({"t": "pickle", "items": []}, b"", "tag"),
    ({"t": "dict", "items": [["a", 1], ["a", 2]]}, b"", "duplicate"),
    ({"t": "dict", "items": [[1.5, 1]]}, b"", "key"),
    ({"t": "dict", "items": [[None, 1]]}, b"", "key"),
    ({"t": "dict", "items": [["a"]]}, b"", "item"),
    ({"t": "dict", "items": {}}, b"", "dict"),
    ({"t": "tuple", "items": 3}, b"", "tuple"),
    ({"t": "dict", "items": [], "meta": 3}, b"", "metadata"),
])
def test_forged_placeholders_are_refused(root: Any, data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_state(forge(root, data))


def test_header_checks() -> None:
    assert decode_state(forge(placeholder(), bytes(8))).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="version"):
        decode_state(forge(None, version=VERSION + 1))
    with pytest.raises(ValueError, match="magic"):
        decode_state(forge(None, magic=b"NOTSTATE"))
    deep = b"[" * 100000 + b"]" * 100000
    body = struct.pack("<8sIQ", MAGIC, VERSION, len(deep) + 9) + b'{"root":' + deep + b"}" + struct.pack("<Q", 0)
    with pytest.raises(ValueError):
        decode_state(body + struct.pack("<I", zlib.crc32(body)))
    nested: Any = None
    for _ in range(300):
        nested = [nested]
    with pytest.raises(ValueError, match="nested"):
        decode_state(forge(nested))
    with pytest.raises(ValueError, match="not JSON"):
        body = struct.pack("<8sIQ", MAGIC, VERSION, 2) + b"\xff{" + struct.pack("<Q", 0)
        decode_state(body + struct.pack("<I", zlib.crc32(body)))
    with pytest.raises(TypeError):
        decode_state("a string")  # type: ignore[arg-type]


def test_decode_accepts_any_bytes_like() -> None:
    for buf in (bytearray(VALID), memoryview(VALID), np.frombuffer(VALID, np.uint8)):
        assert decode_state(buf)["meta"] == {"step": 3, "lr": 0.1}


# --- torch ---------------------------------------------------------------

torch = pytest.importorskip("torch")

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]


def tensor_bits(t: Any) -> bytes:
    t = t.detach().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 3), (2, 3, 4)])
def test_tensor_round_trip(dtype: Any, shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    t = (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    out = decode_state(encode_state({"t": t, "nested": [t, (t,)]}))
    for u in (out["t"], out["nested"][0], out["nested"][1][0]):
        assert isinstance(u, torch.Tensor) and u.dtype == dtype and tuple(u.shape) == shape
        assert u.device.type == "cpu" and u.is_contiguous()
        assert tensor_bits(u) == tensor_bits(t)


def test_special_tensors() -> None:
    base = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
    for t in (base.t(), base[::2, 1::2], torch.tensor(float("nan"), dtype=torch.bfloat16),
              torch.randn(3, requires_grad=True), torch.nn.Parameter(torch.ones(2)),
              torch.randn(3, dtype=torch.complex64).conj()):
        u = decode_state(encode_state(t))
        assert u.dtype == t.dtype and u.shape == t.shape and not u.requires_grad
        assert tensor_bits(u) == tensor_bits(t.resolve_conj())
    with pytest.raises(TypeError, match="sparse"):
        encode_state(torch.eye(3).to_sparse())
    mixed = decode_state(encode_state({"np": np.ones(2), "pt": torch.ones(2)}))
    assert isinstance(mixed["np"], np.ndarray) and isinstance(mixed["pt"], torch.Tensor)


def test_forged_tensor_placeholders() -> None:
    out = decode_state(forge(placeholder(tag="tensor", dtype="bfloat16", shape=(4,), nbytes=8), bytes(8)))
    assert out.dtype == torch.bfloat16 and out.tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="dtype"):
        decode_state(forge(placeholder(tag="tensor", dtype="float128", shape=(1,), nbytes=16), bytes(16)))
    with pytest.raises(ValueError, match="outside"):
        decode_state(forge(placeholder(tag="tensor", shape=(3,), nbytes=12), bytes(8)))


def make_model(seed: int) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 2).to(torch.bfloat16).float())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    return model, opt


def train(model: Any, opt: Any, steps: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(16, 4, generator=g)).square().mean().backward()
        opt.step()


def test_state_hash_equal_and_different() -> None:
    a, opt_a = make_model(1)
    b, opt_b = make_model(1)
    assert state_hash(a, opt_a) == state_hash(b, opt_b) == state_hash(b, opt_b)
    train(a, opt_a, 3)
    train(b, opt_b, 3)
    assert state_hash(a, opt_a) == state_hash(b, opt_b)
    assert state_hash(a) != state_hash(a, opt_a)
    with torch.no_grad():  # one bit of one parameter
        p = next(b.parameters())
        p.view(-1).view(torch.int32)[0] ^= 1
    assert state_hash(a) != state_hash(b)
    c, opt_c = make_model(1)
    train(c, opt_c, 3)
    opt_c.param_groups[0]["lr"] = 0.5  # hyperparameters count too
    assert state_hash(a, opt_a) != state_hash(c, opt_c)
    d, opt_d = make_model(1)
    train(d, opt_d, 3)
    next(iter(opt_d.state.values()))["exp_avg"].view(-1)[0] += 1  # optimizer state counts
    assert state_hash(a) == state_hash(d) and state_hash(a, opt_a) != state_hash(d, opt_d)


def test_model_state_round_trip_makes_replicas_identical() -> None:
    donor, opt_donor = make_model(1)
    train(donor, opt_donor, 4)
    joiner, opt_joiner = make_model(2)  # a fresh replica: other weights, no optimizer state
    assert state_hash(donor, opt_donor) != state_hash(joiner, opt_joiner)
    snapshot = encode_state(model_state(donor, opt_donor))
    load_model_state(joiner, opt_joiner, decode_state(snapshot))
    assert state_hash(donor, opt_donor) == state_hash(joiner, opt_joiner)
    train(donor, opt_donor, 2, seed=5)   # the same updates afterwards keep them identical
    train(joiner, opt_joiner, 2, seed=5)
    assert state_hash(donor, opt_donor) == state_hash(joiner, opt_joiner)


def test_load_model_state_checks_its_input() -> None:
    model, opt = make_model(1)
    with pytest.raises(ValueError, match="model_state"):
        load_model_state(model, opt, {"weights": {}})
    with pytest.raises(ValueError, match="optimizer"):
        load_model_state(model, opt, model_state(model))
    load_model_state(model, None, model_state(model))


def test_import_loads_neither_torch_nor_mpi(tmp_path: Any) -> None:
    code = ("import sys, pymcoll.ftar.state as s; s.decode_state(s.encode_state({'a': [1.0]}));"
            "bad = [m for m in ('torch', 'mpi4py', 'pymcoll._core') if m in sys.modules];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-P", "-c", code], check=True, timeout=120, cwd=tmp_path)
