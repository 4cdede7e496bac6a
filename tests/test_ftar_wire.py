"""FTAR's wire: SHA-256/HMAC against Python's, frames round-trip, the decoder
fuzzed (garbage, truncation, oversized lengths, flipped bytes), and the
challenge-response. No MPI: importing pymcoll._ftar must not load it."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymcoll._ftar import ffi, lib

MAX_PAYLOAD = 1 << 16
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sha256(data: bytes) -> bytes:
    out = ffi.new("uint8_t[32]")
    lib.pmc_ftar_sha256(data, len(data), out)
    return bytes(out)


def mac(key: bytes, data: bytes) -> bytes:
    out = ffi.new("uint8_t[32]")
    lib.pmc_ftar_hmac(key, len(key), data, len(data), out)
    return bytes(out)


def encode(ftype: int, payload: bytes, key: bytes | None = None, **fields: int) -> bytes:
    h = ffi.new("pmc_ftar_header *")
    h.type = ftype
    for name, value in fields.items():
        setattr(h, name, value)
    cap = lib.pmc_ftar_frame_size(len(payload), key is not None)
    out = ffi.new("uint8_t[]", cap)
    written = ffi.new("size_t *")
    rc = lib.pmc_ftar_frame_encode(h, payload, len(payload), key if key else ffi.NULL, len(key or b""), out, cap,
                                   written)
    assert rc == lib.PMC_FTAR_OK, ffi.string(lib.pmc_ftar_strerror(rc))
    assert written[0] == cap
    return bytes(out)


def decode(buf: bytes, key: bytes | None = None, require_mac: bool = False,
           max_payload: int = MAX_PAYLOAD) -> tuple[int, object, int]:
    h = ffi.new("pmc_ftar_header *")
    need = ffi.new("size_t *")
    rc = lib.pmc_ftar_frame_decode(buf, len(buf), max_payload, key if key else ffi.NULL, len(key or b""),
                                   int(require_mac), h, need)
    return rc, h, need[0]


@given(st.binary(max_size=300))
@FUZZ
def test_sha256_matches_hashlib(data: bytes) -> None:
    assert sha256(data) == hashlib.sha256(data).digest()


def test_sha256_at_every_padding_boundary() -> None:
    for n in list(range(50, 70)) + list(range(115, 130)) + [1000, 4096, 100_000]:
        data = bytes(i % 251 for i in range(n))
        assert sha256(data) == hashlib.sha256(data).digest(), n


@given(st.binary(max_size=200), st.binary(max_size=300))
@FUZZ
def test_hmac_matches_python(key: bytes, data: bytes) -> None:
    assert mac(key, data) == hmac.new(key, data, hashlib.sha256).digest()


FIELDS = st.fixed_dictionaries({
    "sender": st.integers(0, 2**32 - 1), "epoch": st.integers(0, 2**64 - 1),
    "step": st.integers(0, 2**64 - 1), "seq": st.integers(0, 2**64 - 1)})


@given(st.integers(1, lib.PMC_FTAR_TYPE_COUNT - 1), st.binary(max_size=2000), FIELDS,
       st.one_of(st.none(), st.binary(min_size=1, max_size=80)))
@FUZZ
def test_frame_round_trip(ftype: int, payload: bytes, fields: dict, key: bytes | None) -> None:
    frame = encode(ftype, payload, key, **fields)
    rc, h, need = decode(frame, key, require_mac=key is not None)
    assert rc == lib.PMC_FTAR_OK and need == len(frame)
    assert (h.type, h.length, h.version) == (ftype, len(payload), lib.PMC_FTAR_VERSION)
    assert {k: getattr(h, k) for k in fields} == fields
    assert frame[lib.PMC_FTAR_HEADER_BYTES:lib.PMC_FTAR_HEADER_BYTES + len(payload)] == payload
    # Every prefix is incomplete, never an error, and names the whole frame's size once the header is in.
    for cut in sorted({0, 1, 4, 5, lib.PMC_FTAR_HEADER_BYTES - 1, lib.PMC_FTAR_HEADER_BYTES, len(frame) - 1}):
        if 0 <= cut < len(frame):
            rc, _, need = decode(frame[:cut], key)
            assert rc == lib.PMC_FTAR_NEED_MORE, (cut, rc)
            assert need == (len(frame) if cut >= lib.PMC_FTAR_HEADER_BYTES else lib.PMC_FTAR_HEADER_BYTES)


@given(st.binary(min_size=1, max_size=500))
@FUZZ
def test_garbage_is_refused_or_incomplete(data: bytes) -> None:
    rc, _, need = decode(data, b"k", require_mac=True)
    assert rc != lib.PMC_FTAR_OK
    assert rc in (lib.PMC_FTAR_NEED_MORE, lib.PMC_FTAR_BAD_MAGIC, lib.PMC_FTAR_BAD_VERSION, lib.PMC_FTAR_BAD_TYPE,
                  lib.PMC_FTAR_TOO_LONG, lib.PMC_FTAR_BAD_MAC)
    assert need <= lib.pmc_ftar_frame_size(MAX_PAYLOAD, 1)


@given(st.binary(min_size=0, max_size=200), st.data())
@FUZZ
def test_any_flipped_byte_of_a_macd_frame_is_refused(payload: bytes, data: st.DataObject) -> None:
    key = b"job token"
    frame = bytearray(encode(lib.PMC_FTAR_VOTE, payload, key, epoch=3, step=9, seq=1))
    i = data.draw(st.integers(0, len(frame) - 1))
    frame[i] ^= data.draw(st.integers(1, 255))
    rc, _, _ = decode(bytes(frame), key, require_mac=True)
    assert rc != lib.PMC_FTAR_OK


def test_oversized_length_refused_before_the_payload_arrives() -> None:
    frame = bytearray(encode(lib.PMC_FTAR_DATA, b"x" * 10))
    frame[8:12] = (MAX_PAYLOAD + 1).to_bytes(4, "little")
    rc, _, _ = decode(bytes(frame[:lib.PMC_FTAR_HEADER_BYTES]))
    assert rc == lib.PMC_FTAR_TOO_LONG


def test_mac_required_wrong_key_and_stranger() -> None:
    frame = encode(lib.PMC_FTAR_COMMIT, b"", None)
    assert decode(frame, b"k", require_mac=True)[0] == lib.PMC_FTAR_BAD_MAC
    assert decode(encode(lib.PMC_FTAR_COMMIT, b"p", b"key one"), b"key two")[0] == lib.PMC_FTAR_BAD_MAC
    assert decode(b"GET / HTTP/1.1\r\n")[0] == lib.PMC_FTAR_BAD_MAGIC
    bad_version = bytearray(frame)
    bad_version[4] = 99
    assert decode(bytes(bad_version[:6]))[0] == lib.PMC_FTAR_BAD_VERSION
    h = ffi.new("pmc_ftar_header *")
    h.type = lib.PMC_FTAR_TYPE_COUNT
    out = ffi.new("uint8_t[64]")
    assert lib.pmc_ftar_frame_encode(h, ffi.NULL, 0, ffi.NULL, 0, out, 64, ffi.new("size_t *")) == lib.PMC_FTAR_BAD_TYPE
    h.type = lib.PMC_FTAR_DATA
    assert lib.pmc_ftar_frame_encode(h, b"abc", 3, ffi.NULL, 0, out, 42, ffi.new("size_t *")) == lib.PMC_FTAR_NO_ROOM


def nonce() -> bytes:
    out = ffi.new("uint8_t[32]")
    assert lib.pmc_ftar_random(out, 32) == 0
    return bytes(out)


def proof(token: bytes, role: int, ns: bytes, nc: bytes, identity: bytes) -> bytes:
    out = ffi.new("uint8_t[32]")
    lib.pmc_ftar_auth_proof(token, len(token), role, ns, nc, identity, out)
    return bytes(out)


def test_challenge_response() -> None:
    token, ns, nc = b"secret job token", nonce(), nonce()
    assert ns != nc
    client = proof(token, lib.PMC_FTAR_ROLE_CLIENT, ns, nc, b"replica-3")
    # The server recomputes the client's proof from its own copy of the token.
    assert lib.pmc_ftar_proof_equal(client, proof(token, lib.PMC_FTAR_ROLE_CLIENT, ns, nc, b"replica-3"))
    assert not lib.pmc_ftar_proof_equal(client, proof(b"wrong token", lib.PMC_FTAR_ROLE_CLIENT, ns, nc, b"replica-3"))
    assert not lib.pmc_ftar_proof_equal(client, proof(token, lib.PMC_FTAR_ROLE_CLIENT, ns, nc, b"replica-4"))
    assert not lib.pmc_ftar_proof_equal(client, proof(token, lib.PMC_FTAR_ROLE_CLIENT, nonce(), nc, b"replica-3"))
    # A client's proof never passes as the server's, and the token itself never appears.
    assert client != proof(token, lib.PMC_FTAR_ROLE_SERVER, ns, nc, b"replica-3")
    assert token not in client
    keys = []
    for direction in (lib.PMC_FTAR_CLIENT_TO_SERVER, lib.PMC_FTAR_CLIENT_TO_SERVER, lib.PMC_FTAR_SERVER_TO_CLIENT):
        out = ffi.new("uint8_t[32]")
        lib.pmc_ftar_session_key(token, len(token), ns, nc, direction, out)
        keys.append(bytes(out))
    # Deterministic, one key per direction (a frame reflected to its sender fails its MAC).
    assert keys[0] == keys[1] and keys[0] != client and keys[2] != keys[0]


def test_importing_ftar_loads_no_mpi() -> None:
    code = "import sys, pymcoll._ftar, pymcoll.trace; print(sorted(m for m in sys.modules if m.startswith('mpi4py')))"
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
