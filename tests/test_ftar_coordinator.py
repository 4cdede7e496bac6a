"""FTAR's coordinator against a small member written here in Python: the
handshake, refused and malformed connections, quorums (order, epochs, the
join timeout, healing members and their donors), votes and decisions,
failures (closed sockets, silence, replacement, reports), unknown epochs,
and a coordinator restart. No MPI: only pymcoll._ftar."""

from __future__ import annotations

import hashlib
import hmac
import os
import select
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass

import pytest
from pymcoll import ftar
from pymcoll._ftar import ffi, lib

TOKEN = b"coordinator-test-token"
HEARTBEAT_MS = 20
EVICT_MS = 300
HEADER = struct.Struct("<4sBBHIIQQQ")
MAC_BYTES = 32
COORD = 0xFFFFFFFF
T = lib  # frame types and statuses, by their C names

pytestmark = pytest.mark.timeout(30)


# ---- the coordinator, run in a thread ------------------------------------

class Coordinator:
    """pymcoll.ftar.Coordinator serving in a thread, with its event log in a file the tests read."""

    def __init__(self, bind: str = "127.0.0.1:0", *, min_replicas: int = 1, heartbeat_ms: int = HEARTBEAT_MS,
                 evict_ms: int = EVICT_MS, join_timeout_ms: int = 1000, log_path: str | None = None) -> None:
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="ftar-coord-", suffix=".log")
            os.close(fd)
        self.log_path = log_path
        self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self.served = ftar.Coordinator(bind, TOKEN, min_replicas=min_replicas, heartbeat_ms=heartbeat_ms,
                                       evict_ms=evict_ms, join_timeout_ms=join_timeout_ms, log=self._log_fd).start()
        self.addr = self.served.address

    def close(self) -> None:
        if self.served.closed:
            return
        self.served.stop()
        assert self.served.wait(10), "pmc_ftar_coord_run did not return after stop"  # (raises unless it returned 0)
        self.served.close()
        os.close(self._log_fd)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_log(self, text: str, timeout: float = 3.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log()
            if text in log:
                return log
            time.sleep(0.01)
        raise AssertionError(f"{text!r} not in the coordinator's log:\n{self.log()}")


@pytest.fixture
def coord_factory():
    made: list[Coordinator] = []

    def make(**kwargs) -> Coordinator:
        c = Coordinator(**kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
        os.unlink(c.log_path)


@pytest.fixture
def coord(coord_factory) -> Coordinator:
    return coord_factory()


# ---- a member, in Python --------------------------------------------------

def frame(ftype: int, payload: bytes = b"", *, key: bytes | None = None, seq: int = 0, epoch: int = 0,
          step: int = 0, sender: int = 0, length: int | None = None) -> bytes:
    """A frame exactly as frame.c writes it (length may lie, for the bad-frame tests)."""
    flags = 1 if key is not None else 0
    head = HEADER.pack(b"PMFT", 1, ftype, flags, len(payload) if length is None else length, sender,
                       epoch % 2**64, step % 2**64, seq)
    body = head + payload
    return body + (hmac.new(key, body, hashlib.sha256).digest() if key is not None else b"")


def s8(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


class Reader:
    def __init__(self, payload: bytes) -> None:
        self.p, self.pos = payload, 0

    def take(self, fmt: str):
        v = struct.unpack_from("<" + fmt, self.p, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def str(self) -> str:
        n = self.take("B")
        s = self.p[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def done(self) -> None:
        assert self.pos == len(self.p), "payload longer than its fields"


@dataclass
class Frame:
    type: int
    epoch: int
    step: int
    payload: bytes

    @property
    def signed_step(self) -> int:
        return self.step - 2**64 if self.step >= 2**63 else self.step

    def abort(self) -> tuple[int, str]:
        assert self.type == T.PMC_FTAR_ABORT, self
        r = Reader(self.payload)
        status, reason = r.take("I"), r.str()
        r.done()
        return status, reason

    def quorum(self) -> dict:
        assert self.type == T.PMC_FTAR_QUORUM, self
        r = Reader(self.payload)
        q = {"status": r.take("I"), "n": r.take("I"), "index": r.take("I"), "n_healing": r.take("I"),
             "epoch": self.epoch, "step": self.signed_step, "members": []}
        for _ in range(q["n"]):
            q["members"].append({"healing": r.take("B"), "donor": r.take("i"), "id": r.str(), "ring": r.str(),
                                 "state": r.str()})
        r.done()
        return q


class Closed(Exception):
    pass


class Member:
    """The member's side of the wire: handshake, MAC'ed frames in sequence, heartbeats from a thread."""

    def __init__(self, addr: str, replica_id: str, *, token: bytes = TOKEN, identity: str | None = None,
                 heartbeat: bool = True) -> None:
        host, port = addr.rsplit(":", 1)
        self.id = replica_id
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        # As a real member's connection: without it, Nagle holds a small frame back until the
        # coordinator acknowledges the last one, and a frame sent before another socket's close
        # can reach the coordinator after that close.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.committed_epoch = 0           # the epoch of the commit whose state this member holds
        self.key: bytes | None = None      # member -> coordinator
        self.key_rx: bytes | None = None   # coordinator -> member
        self.send_seq = self.recv_seq = 0
        self.lock = threading.Lock()
        self.heartbeats_seen = 0
        self.beating = threading.Event()  # heartbeats start after JOIN, which must come first
        self.stopped = threading.Event()
        self.heartbeat = heartbeat
        self._handshake(token, identity if identity is not None else f"member:{replica_id}")
        self._beat_thread = threading.Thread(target=self._beat, daemon=True)
        self._beat_thread.start()

    def _handshake(self, token: bytes, identity: str) -> None:
        hello = self.recv_raw(2.0)
        assert hello.type == T.PMC_FTAR_HELLO and len(hello.payload) == 32
        nonce_s, nonce_c = hello.payload, os.urandom(32)
        proof = ffi.new("uint8_t[32]")
        lib.pmc_ftar_auth_proof(token, len(token), lib.PMC_FTAR_ROLE_CLIENT, nonce_s, nonce_c, identity.encode(),
                                proof)
        self.send_raw(frame(T.PMC_FTAR_AUTH, nonce_c + bytes(proof) + identity.encode(), seq=self.send_seq))
        self.send_seq += 1
        key = ffi.new("uint8_t[32]")
        lib.pmc_ftar_session_key(token, len(token), nonce_s, nonce_c, lib.PMC_FTAR_CLIENT_TO_SERVER, key)
        self.key = bytes(key)
        lib.pmc_ftar_session_key(token, len(token), nonce_s, nonce_c, lib.PMC_FTAR_SERVER_TO_CLIENT, key)
        self.key_rx = bytes(key)
        ok = self.recv_raw(2.0)
        want = ffi.new("uint8_t[32]")
        lib.pmc_ftar_auth_proof(token, len(token), lib.PMC_FTAR_ROLE_SERVER, nonce_s, nonce_c, identity.encode(),
                                want)
        assert ok.type == T.PMC_FTAR_AUTH_OK and ok.payload == bytes(want)

    def _beat(self) -> None:
        while not self.stopped.wait(HEARTBEAT_MS / 1000):
            if self.beating.is_set():
                try:
                    self.send(T.PMC_FTAR_HEARTBEAT)
                except OSError:
                    return

    # raw bytes and frames
    def send_raw(self, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(data)

    def send(self, ftype: int, payload: bytes = b"", *, epoch: int = 0, step: int = 0) -> None:
        with self.lock:
            data = frame(ftype, payload, key=self.key, seq=self.send_seq, epoch=epoch, step=step)
            self.send_seq += 1
            self.sock.sendall(data)

    def recv_raw(self, timeout: float) -> Frame:
        """The next frame of any type; Closed on EOF; TimeoutError when none came."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= HEADER.size:
                magic, version, ftype, flags, length, sender, epoch, step, seq = HEADER.unpack_from(self.buf)
                assert magic == b"PMFT" and version == 1 and sender == COORD
                need = HEADER.size + length + (MAC_BYTES if flags & 1 else 0)
                if len(self.buf) >= need:
                    body = self.buf[:HEADER.size + length]
                    if self.key_rx is not None:
                        assert flags & 1, "the coordinator sent a frame without a MAC after the handshake"
                        assert hmac.compare_digest(hmac.new(self.key_rx, body, hashlib.sha256).digest(),
                                                   self.buf[HEADER.size + length:need])
                    assert seq == self.recv_seq, (seq, self.recv_seq)
                    self.recv_seq += 1
                    self.buf = self.buf[need:]
                    if ftype == T.PMC_FTAR_COMMIT:  # as a member does: the state is now that commit's
                        self.committed_epoch = epoch
                    return Frame(ftype, epoch, step, body[HEADER.size:])
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.id}: no frame within {timeout} s")
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed(self.id)
            self.buf += chunk

    def recv(self, timeout: float = 3.0) -> Frame:
        """The next frame that is not a heartbeat."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.recv_raw(max(0.0, deadline - time.monotonic()))
            if f.type != T.PMC_FTAR_HEARTBEAT:
                return f
            self.heartbeats_seen += 1

    def expect(self, ftype: int, timeout: float = 3.0) -> Frame:
        f = self.recv(timeout)
        assert f.type == ftype, f"{self.id}: expected type {ftype}, got {f}"
        return f

    def quiet(self, timeout: float) -> bool:
        """True if nothing but heartbeats came within timeout."""
        try:
            f = self.recv(timeout)
        except TimeoutError:
            return True
        raise AssertionError(f"{self.id}: unexpected {f}")

    def wait_closed(self, timeout: float = 3.0) -> list[Frame]:
        """Frames received until the coordinator closed the connection."""
        got: list[Frame] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                got.append(self.recv(max(0.0, deadline - time.monotonic())))
            except Closed:
                return got

    # the protocol
    def join(self, committed: int = -1, last_epoch: int = 0, *, ring: str | None = None,
             state: str | None = None, committed_epoch: int | None = None) -> tuple[Frame, dict]:
        if committed_epoch is not None:
            self.committed_epoch = committed_epoch
        payload = (struct.pack("<qQ", committed, last_epoch) + s8(self.id) + s8(ring or f"ring-{self.id}:1")
                   + s8(state or f"state-{self.id}:2") + struct.pack("<Q", self.committed_epoch))
        self.send(T.PMC_FTAR_JOIN, payload)
        f = self.expect(T.PMC_FTAR_JOIN)
        if self.heartbeat:
            self.beating.set()
        r = Reader(f.payload)
        welcome = {"heartbeat_ms": r.take("I"), "evict_ms": r.take("I"), "incarnation": r.take("Q")}
        r.done()
        return f, welcome

    def request(self, step: int, committed: int, committed_epoch: int | None = None) -> None:
        """Ask for a quorum; the state held is (committed, the epoch that committed it)."""
        if committed_epoch is not None:
            self.committed_epoch = committed_epoch
        self.send(T.PMC_FTAR_QUORUM, struct.pack("<qqQ", step, committed, self.committed_epoch))

    def vote(self, epoch: int, step: int, ok: bool = True) -> None:
        self.send(T.PMC_FTAR_VOTE, bytes([int(ok)]), epoch=epoch, step=step)

    def report(self, epoch: int, step: int, reason: str) -> None:
        self.send(T.PMC_FTAR_ABORT, struct.pack("<I", T.PMC_FTAR_ST_ABORTED) + s8(reason), epoch=epoch, step=step)

    def ask_donor(self, epoch: int, failed: int) -> tuple[int, str]:
        self.send(T.PMC_FTAR_DONOR, struct.pack("<I", failed), epoch=epoch)
        r = Reader(self.expect(T.PMC_FTAR_DONOR).payload)
        index, addr = r.take("i"), r.str()
        r.done()
        return index, addr

    def sync(self) -> None:
        """A round trip that changes nothing: the coordinator has handled every frame sent before.
        (Frames on different connections may be handled in any order.)"""
        self.vote(2**64 - 1, 0)
        assert self.expect(T.PMC_FTAR_ABORT).abort() == (T.PMC_FTAR_ST_ABORTED, "unknown epoch")

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def members():
    made: list[Member] = []

    def make(addr: str, replica_id: str, **kwargs) -> Member:
        m = Member(addr, replica_id, **kwargs)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def joined(members, coord: Coordinator, *specs: tuple[str, int, int]) -> list[Member]:
    """Members (id, committed, last_epoch) connected and joined, in the order given."""
    out = []
    for rid, committed, last_epoch in specs:
        m = members(coord.addr, rid)
        m.join(committed, last_epoch)
        out.append(m)
    return out


def ask(ms: list[Member], committed: int) -> list[dict]:
    """Every member (in this order) asks for the step after `committed`; the QUORUM each gets."""
    for m in ms:
        m.request(committed + 1, committed)
    return [m.expect(T.PMC_FTAR_QUORUM).quorum() for m in ms]


def commit_all(ms: list[Member], q: dict) -> None:
    for m in ms:
        m.vote(q["epoch"], q["step"], True)
    for m in ms:
        f = m.expect(T.PMC_FTAR_COMMIT)
        assert (f.epoch, f.signed_step) == (q["epoch"], q["step"])


# ---- configuration ---------------------------------------------------------

@pytest.mark.parametrize("field,value,text", [
    ("token", b"", "token"), ("min_replicas", 0, "min_replicas"), ("evict_ms", 20, "evict_ms"),
    ("bind", "nonsense", "HOST:PORT")])
def test_bad_configuration_refused(field: str, value, text: str) -> None:
    keep = {"bind": ffi.new("char[]", b"127.0.0.1:0"), "token": ffi.new("uint8_t[]", TOKEN)}
    cfg = ffi.new("pmc_ftar_coord_config *")
    cfg.bind, cfg.token, cfg.tokenlen = keep["bind"], keep["token"], len(TOKEN)
    cfg.min_replicas, cfg.heartbeat_ms, cfg.evict_ms, cfg.log_fd = 1, 50, 300, -1
    if field == "token":
        cfg.tokenlen = 0
    elif field == "bind":
        keep["bind"] = ffi.new("char[]", value.encode())
        cfg.bind = keep["bind"]
    else:
        setattr(cfg, field, value)
    out = ffi.new("pmc_ftar_coord **")
    msg = ffi.new("char[]", 256)
    assert lib.pmc_ftar_coord_create(cfg, out, ffi.NULL, 0, msg, 256) != 0
    assert out[0] == ffi.NULL
    assert text in ffi.string(msg).decode()


def test_defaults_and_stop_before_run() -> None:
    keep = [ffi.new("char[]", b"127.0.0.1:0"), ffi.new("uint8_t[]", TOKEN)]
    cfg = ffi.new("pmc_ftar_coord_config *")
    cfg.bind, cfg.token, cfg.tokenlen, cfg.min_replicas, cfg.log_fd = keep[0], keep[1], len(TOKEN), 1, -1
    out = ffi.new("pmc_ftar_coord **")
    addr = ffi.new("char[]", 128)
    assert lib.pmc_ftar_coord_create(cfg, out, addr, 128, ffi.NULL, 0) == 0
    assert ffi.string(addr).decode().startswith("127.0.0.1:")
    lib.pmc_ftar_coord_stop(out[0])
    assert lib.pmc_ftar_coord_run(out[0]) == 0  # a stop before run is not lost
    lib.pmc_ftar_coord_destroy(out[0])


def test_welcome_carries_the_timers(coord, members) -> None:
    m = members(coord.addr, "r0")
    time.sleep(5 * HEARTBEAT_MS / 1000)
    m.send(T.PMC_FTAR_JOIN, struct.pack("<qQ", -1, 0) + s8("r0") + s8("127.0.0.1:1") + s8("127.0.0.1:2") + struct.pack("<Q", 0))
    f = m.recv_raw(3.0)  # the welcome is the first frame after AUTH_OK: no heartbeat before it
    assert f.type == T.PMC_FTAR_JOIN
    r = Reader(f.payload)
    welcome = {"heartbeat_ms": r.take("I"), "evict_ms": r.take("I"), "incarnation": r.take("Q")}
    r.done()
    m.beating.set()
    assert welcome["heartbeat_ms"] == HEARTBEAT_MS and welcome["evict_ms"] == EVICT_MS
    assert f.epoch == 0
    time.sleep(5 * HEARTBEAT_MS / 1000)
    assert m.quiet(0.1) and m.heartbeats_seen >= 2
    coord.wait_log("member r0 joined from 127.0.0.1:")


# ---- refused and malformed connections -------------------------------------

def test_wrong_token_and_bad_identity_refused(coord, members) -> None:
    with pytest.raises((Closed, AssertionError, ConnectionError)):
        members(coord.addr, "intruder", token=b"not the token")
    coord.wait_log("authentication failed")
    with pytest.raises((Closed, ConnectionError)):
        m = members(coord.addr, "x", identity="admin:x")
        m.join()
    coord.wait_log("is not member:<replica id>")
    with pytest.raises((Closed, ConnectionError)):
        m = members(coord.addr, "x", identity="member:bad id")
        m.join()
    # The coordinator keeps serving the others.
    a = members(coord.addr, "a")
    a.join()
    [q] = ask([a], -1)
    assert q["n"] == 1 and q["index"] == 0


def raw_connection(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


def closed_by_peer(s: socket.socket, timeout: float = 3.0) -> bool:
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_garbage_truncated_oversized_frames_close_only_that_connection(coord, members) -> None:
    a = members(coord.addr, "a")
    a.join()
    cases = {
        "bad magic": b"GET / HTTP/1.0\r\n\r\n",
        "unsupported FTAR frame version": b"PMFT\x09" + bytes(40),
        "longer than the receiver accepts": frame(T.PMC_FTAR_AUTH, b"", length=1 << 24),
        "unknown frame type": frame(T.PMC_FTAR_AUTH, b"")[:5] + b"\x77" + frame(T.PMC_FTAR_AUTH, b"")[6:],
        "expected AUTH": frame(T.PMC_FTAR_JOIN, b"x" * 10),
    }
    for why, data in cases.items():
        s = raw_connection(coord.addr)
        s.sendall(data)
        assert closed_by_peer(s), why
        s.close()
        coord.wait_log(why)
    # Truncated: half a frame, then the peer closes.
    s = raw_connection(coord.addr)
    s.sendall(frame(T.PMC_FTAR_AUTH, bytes(80))[:50])
    s.shutdown(socket.SHUT_WR)
    assert closed_by_peer(s)
    s.close()
    coord.wait_log("closed in the middle of a frame")
    # After authentication: a wrong MAC, a replayed sequence number, a short payload, a frame without a MAC.
    b = members(coord.addr, "b")
    b.join()
    b.send_raw(frame(T.PMC_FTAR_HEARTBEAT, key=b"k" * 32, seq=b.send_seq))
    b.wait_closed()
    coord.wait_log("member b (127.0.0.1:")
    coord.wait_log("MAC missing or wrong")
    c = members(coord.addr, "c")
    c.join()
    c.send_raw(frame(T.PMC_FTAR_HEARTBEAT, key=c.key, seq=c.send_seq - 1))
    c.wait_closed()
    coord.wait_log("out of sequence")
    d = members(coord.addr, "d")
    d.join()
    d.send(T.PMC_FTAR_QUORUM, b"\x01\x02\x03")
    d.wait_closed()
    coord.wait_log("bad QUORUM payload")
    e = members(coord.addr, "e")
    e.join()
    e.send_raw(frame(T.PMC_FTAR_HEARTBEAT, seq=e.send_seq))
    e.wait_closed()
    f = members(coord.addr, "f")
    f.join()
    f.send(T.PMC_FTAR_DATA, b"tensor")
    f.wait_closed()
    coord.wait_log("unexpected frame type")
    g = members(coord.addr, "g")
    g.send(T.PMC_FTAR_HEARTBEAT)  # the first frame after AUTH must be JOIN
    g.wait_closed()
    coord.wait_log("expected JOIN")
    h = members(coord.addr, "h")
    with pytest.raises((Closed, ConnectionError)):
        h.join(ring="127.0.0.1:1\nftar-coordinator: forged line")
    coord.wait_log("bad JOIN payload")
    assert "forged" not in coord.log()
    # Member a never noticed: it forms a quorum alone (the others are gone) and commits.
    [q] = ask([a], -1)
    assert q["n"] == 1
    commit_all([a], q)


@pytest.mark.timeout(30)
def test_connection_without_auth_dropped(coord) -> None:
    s = raw_connection(coord.addr)
    t0 = time.monotonic()
    assert closed_by_peer(s, timeout=5.0)
    assert 1.5 < time.monotonic() - t0 < 4.0
    s.close()
    coord.wait_log("no AUTH within 2000 ms")


def test_connection_without_join_dropped(coord, members) -> None:
    m = members(coord.addr, "idle")
    t0 = time.monotonic()
    assert m.wait_closed() == []
    assert EVICT_MS / 1000 * 0.8 < time.monotonic() - t0 < EVICT_MS / 1000 + 1.0
    coord.wait_log(f"no JOIN within {EVICT_MS} ms")


# ---- quorums and decisions -------------------------------------------------

def test_two_members_quorum_in_id_order_and_commit(coord, members) -> None:
    r1, r0 = joined(members, coord, ("r1", -1, 0), ("r0", -1, 0))
    q1, q0 = ask([r1, r0], -1)
    assert (q0["index"], q1["index"]) == (0, 1)
    assert q0["epoch"] == q1["epoch"] == 1 and q0["step"] == q1["step"] == 0
    assert [m["id"] for m in q0["members"]] == ["r0", "r1"] and q0["members"] == q1["members"]
    assert q0["members"][1]["ring"] == "ring-r1:1" and q0["members"][0]["state"] == "state-r0:2"
    assert q0["status"] == T.PMC_FTAR_ST_OK and q0["n_healing"] == 0
    assert all(not m["healing"] and m["donor"] == -1 for m in q0["members"])
    # One vote is not enough.
    r0.vote(q0["epoch"], q0["step"])
    assert r0.quiet(0.1)
    r1.vote(q0["epoch"], q0["step"])
    for m in (r0, r1):
        f = m.expect(T.PMC_FTAR_COMMIT)
        assert (f.epoch, f.step) == (1, 0)
    # The next step: same members, no failure, same epoch.
    q1, q0 = ask([r1, r0], 0)
    assert q0["epoch"] == 1 and q0["step"] == 1
    log = coord.wait_log("commit: epoch 1, step 0")
    assert "quorum formed: epoch 1, step 0, 2 members, 0 healing: r0, r1" in log


def test_vote_not_ok_aborts_everyone_and_the_next_quorum_is_a_new_epoch(coord, members) -> None:
    a, b = joined(members, coord, ("a", -1, 0), ("b", -1, 0))
    qa, qb = ask([a, b], -1)
    a.vote(qa["epoch"], qa["step"], True)
    a.sync()  # a's vote counts before b's
    b.vote(qb["epoch"], qb["step"], False)
    for m in (a, b):
        f = m.expect(T.PMC_FTAR_ABORT)
        status, reason = f.abort()
        assert status == T.PMC_FTAR_ST_ABORTED and "b voted not ok" in reason
        assert (f.epoch, f.step) == (qa["epoch"], qa["step"])
    qa2, _ = ask([a, b], -1)
    assert qa2["epoch"] == qa["epoch"] + 1 and qa2["step"] == qa["step"]
    # A late vote for the aborted quorum gets that decision again.
    a.vote(qa["epoch"], qa["step"], True)
    assert a.expect(T.PMC_FTAR_ABORT).abort() == (T.PMC_FTAR_ST_ABORTED, "member b voted not ok")


def test_member_failure_report_aborts_the_quorum(coord, members) -> None:
    a, b, c = joined(members, coord, ("a", -1, 0), ("b", -1, 0), ("c", -1, 0))
    q = ask([a, b, c], -1)[0]
    a.vote(q["epoch"], q["step"])
    a.sync()  # a's vote counts before b's report
    b.report(q["epoch"], q["step"], "peer c\x01 stopped sending")
    for m in (a, b, c):
        status, reason = m.expect(T.PMC_FTAR_ABORT).abort()
        assert status == T.PMC_FTAR_ST_ABORTED
        assert "member b reported a failure" in reason and "peer c? stopped sending" in reason
    # Votes after the decision change nothing.
    c.vote(q["epoch"], q["step"])
    assert c.expect(T.PMC_FTAR_ABORT).abort()[0] == T.PMC_FTAR_ST_ABORTED
    assert ask([a, b, c], -1)[0]["epoch"] == q["epoch"] + 1


def test_closed_socket_mid_quorum_aborts_the_other_at_once(coord, members) -> None:
    a, b = joined(members, coord, ("a", -1, 0), ("b", -1, 0))
    qa, _ = ask([a, b], -1)
    a.vote(qa["epoch"], qa["step"])
    # a's vote counts before b's close: the coordinator may handle both sockets in one poll round,
    # and a vote handled after the decision is answered with the decision again.
    a.sync()
    t0 = time.monotonic()
    b.close()
    f = a.expect(T.PMC_FTAR_ABORT, timeout=2.0)
    elapsed = time.monotonic() - t0
    assert elapsed < 0.1 or (elapsed < 0.5 and os.environ.get("LD_PRELOAD")), elapsed
    status, reason = f.abort()
    assert status == T.PMC_FTAR_ST_ABORTED and "member b lost" in reason
    coord.wait_log("member b (127.0.0.1:")
    # a carries on alone (min_replicas 1) in a new epoch; b's id is free again.
    [q] = ask([a], -1)
    assert q["n"] == 1 and q["epoch"] == qa["epoch"] + 1
    commit_all([a], q)


def test_silent_member_evicted_with_fenced(coord, members) -> None:
    a, b = joined(members, coord, ("a", -1, 0), ("b", -1, 0))
    q = ask([a, b], -1)[0]
    commit_all([a, b], q)
    b.beating.clear()
    t0 = time.monotonic()
    got = b.wait_closed(timeout=3.0)
    elapsed = time.monotonic() - t0
    assert EVICT_MS / 1000 * 0.8 < elapsed < EVICT_MS / 1000 + 1.0, elapsed
    assert len(got) == 1
    status, reason = got[0].abort()
    assert status == T.PMC_FTAR_ST_FENCED and reason.startswith("evicted: silent for ")
    log = coord.wait_log("member b (127.0.0.1:")
    assert "evicted: silent for" in log
    assert b.heartbeats_seen > 0
    # a, which kept beating, stays, and the next quorum (without b) is a new epoch.
    [q2] = ask([a], 0)
    assert q2["n"] == 1 and q2["epoch"] == q["epoch"] + 1 and q2["step"] == 1


def test_eviction_mid_quorum_aborts_it(coord, members) -> None:
    a, b = joined(members, coord, ("a", -1, 0), ("b", -1, 0))
    q = ask([a, b], -1)[0]
    b.beating.clear()
    a.vote(q["epoch"], q["step"])
    f = a.expect(T.PMC_FTAR_ABORT, timeout=2.0)
    assert "member b evicted" in f.abort()[1]
    assert b.wait_closed()[-1].abort()[0] == T.PMC_FTAR_ST_FENCED


def test_replacing_a_member_aborts_its_quorum(coord, members) -> None:
    a, b = joined(members, coord, ("a", -1, 0), ("b", -1, 0))
    q = ask([a, b], -1)[0]
    b2 = members(coord.addr, "b")
    b2.join(-1, q["epoch"])
    assert "replaced by a new connection" in a.expect(T.PMC_FTAR_ABORT).abort()[1]
    b.wait_closed()
    assert b2.quiet(0.05)  # the newcomer was in no quorum
    # b2 asks first: a, the only member left of the last quorum, would not wait for it.
    b2.request(0, -1)
    b2.sync()
    a.request(0, -1)
    qb, qa = (m.expect(T.PMC_FTAR_QUORUM).quorum() for m in (b2, a))
    assert qa["epoch"] == q["epoch"] + 1 and [m["id"] for m in qb["members"]] == ["a", "b"]


def test_vote_from_outside_the_quorum_and_early_request(coord, members) -> None:
    a, b = joined(members, coord, ("a", -1, 0), ("b", -1, 0))
    qa, _ = ask([a, b], -1)
    c = members(coord.addr, "c")
    c.join()
    c.vote(qa["epoch"], qa["step"])
    assert c.expect(T.PMC_FTAR_ABORT).abort() == (T.PMC_FTAR_ST_ABORTED, "not a member of this quorum")
    # The quorum is still undecided: a asking for the next one gives it up.
    b.vote(qa["epoch"], qa["step"])
    b.sync()
    a.request(1, -1)
    for m in (a, b):
        assert "asked for a new quorum before the decision" in m.expect(T.PMC_FTAR_ABORT).abort()[1]


def test_unknown_epoch_vote_gets_abort(coord, members) -> None:
    [a] = joined(members, coord, ("a", -1, 0))
    a.vote(42, 3)
    f = a.expect(T.PMC_FTAR_ABORT)
    assert f.abort() == (T.PMC_FTAR_ST_ABORTED, "unknown epoch") and (f.epoch, f.step) == (42, 3)
    a.report(42, 3, "whatever")
    assert a.expect(T.PMC_FTAR_ABORT).abort() == (T.PMC_FTAR_ST_ABORTED, "unknown epoch")
    # After a commit, a repeated vote gets the commit again.
    [q] = ask([a], -1)
    commit_all([a], q)
    a.vote(q["epoch"], q["step"])
    f = a.expect(T.PMC_FTAR_COMMIT)
    assert (f.epoch, f.step) == (q["epoch"], q["step"])


def test_join_timeout_and_min_replicas(coord_factory, members) -> None:
    coord = coord_factory(min_replicas=2, join_timeout_ms=200)
    a, b, c = joined(members, coord, ("a", -1, 0), ("b", -1, 0), ("c", -1, 0))
    q = ask([a, b, c], -1)[0]
    assert q["n"] == 3
    commit_all([a, b, c], q)
    # c does not ask: a and b wait for it until the join timeout.
    t0 = time.monotonic()
    qa, qb = ask([a, b], 0)
    waited = time.monotonic() - t0
    assert 0.15 < waited < 1.5, waited
    assert qa["n"] == 2 and qa["epoch"] == q["epoch"] + 1 and qa["step"] == 1 and qb["members"] == qa["members"]
    commit_all([a, b], qa)
    assert c.quiet(0.05)
    # One requester is never a quorum with min_replicas 2, however long it waits.
    a.request(2, 1)
    assert a.quiet(0.5)
    b.request(2, 1)
    qa = a.expect(T.PMC_FTAR_QUORUM).quorum()
    assert b.expect(T.PMC_FTAR_QUORUM).quorum()["members"] == qa["members"]
    assert qa["n"] == 2 and qa["epoch"] == q["epoch"] + 1  # the same members as before: same epoch
    # c, asking now with a stale step, is in the next quorum as a healing member.
    commit_all([a, b], qa)
    c.request(1, 0)
    c.sync()
    qs = ask([a, b], 2) + [c.expect(T.PMC_FTAR_QUORUM).quorum()]
    assert qs[2]["step"] == 3 and qs[2]["n_healing"] == 1 and qs[2]["members"][2]["healing"]


def test_fresh_member_heals_from_a_donor(coord, members) -> None:
    a, b = joined(members, coord, ("a", 4, 3), ("b", 4, 3))
    q = ask([a, b], 4)[0]
    assert q["step"] == 5 and q["epoch"] == 4  # above every member's last epoch
    commit_all([a, b], q)
    c, d = joined(members, coord, ("c", -1, 0), ("d", -1, 0))
    c.request(0, -1)
    d.request(0, -1)
    c.sync()
    d.sync()
    a.request(6, 5)
    b.request(6, 5)
    qs = [m.expect(T.PMC_FTAR_QUORUM).quorum() for m in (a, b, c, d)]
    assert [x["index"] for x in qs] == [0, 1, 2, 3]
    q = qs[2]
    assert q["step"] == 6 and q["epoch"] == 5 and q["n_healing"] == 2
    healing = [m["healing"] for m in q["members"]]
    donors = [m["donor"] for m in q["members"]]
    assert healing == [0, 0, 1, 1]
    assert donors[:2] == [-1, -1] and sorted(donors[2:]) == [0, 1]  # spread over the healthy members
    coord.wait_log("healing from")
    # c's donor failed: the coordinator names the other healthy member, with its state address.
    index, addr = c.ask_donor(q["epoch"], donors[2])
    assert index == 1 - donors[2] and addr == f"state-{'ab'[index]}:2"
    # With that one failed, the first again: a healing member is never named.
    index2, _ = c.ask_donor(q["epoch"], index)
    assert index2 == donors[2]
    a.close()
    b.close()
    for m in (c, d):
        assert m.expect(T.PMC_FTAR_ABORT).abort()[0] == T.PMC_FTAR_ST_ABORTED
    coord.wait_log("member b (")
    assert c.ask_donor(q["epoch"], 0) == (-1, "")


def test_everyone_behind_the_group_restarts_from_the_newest(coord, members) -> None:
    a, b = joined(members, coord, ("a", 9, 1), ("b", 9, 1))
    q = ask([a, b], 9)[0]
    commit_all([a, b], q)  # the group is at step 10
    a.close()
    b.close()
    coord.wait_log("member b (")
    a2, b2 = joined(members, coord, ("a", 7, 2), ("b", 6, 2))
    a2.request(8, 7)
    b2.request(7, 6)
    qa = a2.expect(T.PMC_FTAR_QUORUM).quorum()
    assert qa["step"] == 8 and [m["healing"] for m in qa["members"]] == [0, 1]
    assert qa["members"][1]["donor"] == 0
    coord.wait_log("the group's state is step 7")


def test_coordinator_restart(coord_factory, members) -> None:
    first = coord_factory()
    a, b = members(first.addr, "a"), members(first.addr, "b")
    _, w1 = a.join()
    b.join()
    q = ask([a, b], -1)[0]
    commit_all([a, b], q)
    qa = ask([a, b], 0)[0]  # undecided when the coordinator goes
    addr = first.addr
    first.close()
    for m in (a, b):
        m.wait_closed()
    second = coord_factory(bind=addr)
    assert second.addr == addr
    a2, b2 = members(addr, "a"), members(addr, "b")
    _, w2 = a2.join(7, qa["epoch"] + 5)
    b2.join(6, qa["epoch"])
    # The vote of the quorum the old coordinator formed: nobody knows that epoch now.
    a2.vote(qa["epoch"], qa["step"])
    assert a2.expect(T.PMC_FTAR_ABORT).abort() == (T.PMC_FTAR_ST_ABORTED, "unknown epoch")
    a2.request(8, 7)
    b2.request(7, 6)
    q2a = a2.expect(T.PMC_FTAR_QUORUM).quorum()
    q2b = b2.expect(T.PMC_FTAR_QUORUM).quorum()
    assert q2a["step"] == q2b["step"] == 8
    assert q2a["epoch"] == qa["epoch"] + 6
    assert q2b["index"] == 1 and q2b["members"][1]["healing"] and q2b["members"][1]["donor"] == 0
    commit_all([a2, b2], q2a)
    assert w2["incarnation"] != w1["incarnation"]


# ---- the group's state is (step, epoch of its commit) ----------------------

def test_same_step_from_an_older_epoch_heals(coord, members) -> None:
    """A member whose step was committed in an older epoch (a coordinator lost
    between its COMMIT messages, then the others re-formed that step) holds
    another state: it heals from a member of the newer lineage."""
    a, b, c = joined(members, coord, ("a", 4, 3), ("b", 4, 7), ("c", 4, 7))
    a.request(5, 4, committed_epoch=2)
    b.request(5, 4, committed_epoch=6)
    c.request(5, 4, committed_epoch=6)
    qs = [m.expect(T.PMC_FTAR_QUORUM).quorum() for m in (a, b, c)]
    assert qs[0]["step"] == 5
    assert [m["healing"] for m in qs[0]["members"]] == [1, 0, 0]
    assert qs[0]["members"][0]["donor"] in (1, 2)
    assert qs[0]["epoch"] > 7  # above every epoch a member reported


def test_a_step_ahead_of_the_requesters_is_waited_for(coord, members) -> None:
    """The newest state is with a live member that has not asked yet: no
    quorum re-forms an older step without it; when it asks, the others heal."""
    a, b, c = joined(members, coord, ("a", 5, 4), ("b", 4, 4), ("c", 4, 4))
    for m, committed in ((b, 4), (c, 4)):
        m.request(committed + 1, committed, committed_epoch=4)
    assert b.quiet(1.5)  # past the join timeout: still no quorum, a holds step 5
    a.request(6, 5, committed_epoch=4)
    qs = [m.expect(T.PMC_FTAR_QUORUM).quorum() for m in (a, b, c)]
    assert qs[0]["step"] == 6
    assert [m["healing"] for m in qs[0]["members"]] == [0, 1, 1]
    assert {m["donor"] for m in qs[0]["members"][1:]} == {0}


def test_restarted_coordinator_waits_for_reconnections(coord_factory, members) -> None:
    """After a (re)start no quorum forms within the join timeout unless every
    connected member asks: a member reconnecting late still counts."""
    co = coord_factory(join_timeout_ms=800)
    b, c = members(co.addr, "b"), members(co.addr, "c")
    b.join(4, 4, committed_epoch=4)
    c.join(4, 4, committed_epoch=4)
    t0 = time.monotonic()
    b.request(5, 4)
    c.request(5, 4)
    time.sleep(0.3)
    a = members(co.addr, "a")
    a.join(5, 4, committed_epoch=4)  # it got the COMMIT of step 5 the others missed
    a.request(6, 5)
    qs = [m.expect(T.PMC_FTAR_QUORUM, timeout=3.0).quorum() for m in (a, b, c)]
    assert time.monotonic() - t0 < 3.0
    assert qs[0]["step"] == 6 and qs[0]["n"] == 3
    assert [m["healing"] for m in qs[0]["members"]] == [0, 1, 1]


def test_silent_strangers_do_not_crowd_out_a_member(coord, members) -> None:
    host, port = coord.addr.rsplit(":", 1)
    strangers = [socket.create_connection((host, int(port)), timeout=5) for _ in range(80)]
    try:
        m = members(coord.addr, "r0")  # connects after 80 silent handshakes: the oldest give way
        m.join()
        q = ask([m], -1)[0]
        assert q["n"] == 1
        coord.wait_log("too many connections waiting to authenticate")
    finally:
        for s in strangers:
            s.close()
