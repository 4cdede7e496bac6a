"""The coordinator of an FTAR group, run inside this process.

The coordinator owns the membership of the replicas (quorum per step, epochs,
heartbeats and eviction, COMMIT/ABORT decisions); it never carries tensor
data. ``python -m pymcoll ftar-coordinator`` is a command-line front end to
:class:`Coordinator`; a program can also host one itself::

    from pymcoll.ftar import Coordinator

    with Coordinator("127.0.0.1:0", token=secret, min_replicas=2) as coord:
        print("members connect to", coord.address)
        coord.serve()            # until SIGINT or SIGTERM

or run it in a background thread with :meth:`Coordinator.start` and end it
with :meth:`Coordinator.close`. Restarted on the same address, a coordinator
rebuilds its state from the members that reconnect.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
import threading
from typing import Any, Optional, Sequence, Union

from .._ftar import ffi, lib
from .address import parse_address, resolve_token
from .member import FtarError, log_descriptor

__all__ = ["Coordinator", "write_addr_file", "token_file_warning", "DEFAULT_HEARTBEAT_MS", "DEFAULT_EVICT_MS",
           "DEFAULT_JOIN_TIMEOUT_MS"]

DEFAULT_HEARTBEAT_MS: int = lib.PMC_FTAR_DEFAULT_HEARTBEAT_MS
DEFAULT_EVICT_MS: int = lib.PMC_FTAR_DEFAULT_EVICT_MS
DEFAULT_JOIN_TIMEOUT_MS: int = lib.PMC_FTAR_DEFAULT_JOIN_TIMEOUT_MS

_MAX_MS = 3600 * 1000
_MAX_REPLICAS = 1024


def _check_count(value: Any, name: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not 1 <= value <= high:
        raise ValueError(f"{name}={value} must be in 1..{high}")
    return value


class Coordinator:
    """An FTAR coordinator listening on `bind`, served by this process.

    Parameters:
        bind: "HOST:PORT" to listen on; port 0 picks a free port (:attr:`address` tells which).
        token: the job token (str: its UTF-8 bytes). Default: `token_file`, else ``PYMCOLL_FTAR_TOKEN``,
            else the file named by ``PYMCOLL_FTAR_TOKEN_FILE``.
        token_file: a file holding the token (surrounding whitespace ignored).
        min_replicas: a quorum formed after the join timeout needs at least this many replicas (1..1024).
        heartbeat_ms: heartbeat period of the coordinator and the members.
        evict_ms: a member silent for this long is evicted; larger than `heartbeat_ms`.
        join_timeout_ms: how long a step's quorum waits for missing previous members.
        log: True writes one line per event to stderr; False none; an int names the file descriptor.

    The socket is bound when the object is made (FtarError if that fails);
    nothing is served until :meth:`serve` (in the calling thread) or
    :meth:`start` (in a background thread). :meth:`close` stops serving and
    releases the socket; use it as a context manager.
    """

    def __init__(self, bind: str = "127.0.0.1:0", token: Union[str, bytes, None] = None, *,
                 token_file: Optional[str] = None, min_replicas: int = 1,
                 heartbeat_ms: int = DEFAULT_HEARTBEAT_MS, evict_ms: int = DEFAULT_EVICT_MS,
                 join_timeout_ms: int = DEFAULT_JOIN_TIMEOUT_MS, log: Union[bool, int] = True) -> None:
        self._ptr: Any = None
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._rc: Optional[int] = None
        bind = parse_address(bind, "bind", allow_port_zero=True)
        token_bytes = resolve_token(token, token_file)
        min_replicas = _check_count(min_replicas, "min_replicas", _MAX_REPLICAS)
        heartbeat_ms = _check_count(heartbeat_ms, "heartbeat_ms", _MAX_MS)
        evict_ms = _check_count(evict_ms, "evict_ms", _MAX_MS)
        join_timeout_ms = _check_count(join_timeout_ms, "join_timeout_ms", _MAX_MS)
        if evict_ms <= heartbeat_ms:
            raise ValueError(f"evict_ms ({evict_ms}) must be larger than heartbeat_ms ({heartbeat_ms}), "
                             f"e.g. 20 heartbeats")
        log_fd = log_descriptor(log)

        cfg = ffi.new("pmc_ftar_coord_config *")
        bind_c = ffi.new("char[]", bind.encode("utf-8"))
        token_c = ffi.new("uint8_t[]", token_bytes)
        cfg.bind = bind_c
        cfg.token = token_c
        cfg.tokenlen = len(token_bytes)
        cfg.min_replicas = min_replicas
        cfg.heartbeat_ms = heartbeat_ms
        cfg.evict_ms = evict_ms
        cfg.join_timeout_ms = join_timeout_ms
        cfg.log_fd = log_fd
        out = ffi.new("pmc_ftar_coord **")
        addr = ffi.new("char[]", lib.PMC_FTAR_ADDR_BYTES)
        msg = ffi.new("char[]", lib.PMC_FTAR_MESSAGE_BYTES)
        rc = lib.pmc_ftar_coord_create(cfg, out, addr, lib.PMC_FTAR_ADDR_BYTES, msg, lib.PMC_FTAR_MESSAGE_BYTES)
        if rc != 0 or out[0] == ffi.NULL:
            reason = ffi.string(msg).decode("utf-8", "replace") or f"code {rc}"
            raise FtarError(f"cannot start the FTAR coordinator on {bind}: {reason}")
        self._ptr = out[0]
        self.bind = bind
        self.address: str = ffi.string(addr).decode("utf-8", "replace")
        """The bound "HOST:PORT" (the port chosen when `bind` named port 0)."""

    # --- serving ------------------------------------------------------------

    def _loop(self) -> None:
        self._rc = int(lib.pmc_ftar_coord_run(self._ptr))

    def start(self) -> "Coordinator":
        """Serve in a background thread (the C loop runs without the GIL); returns self."""
        with self._lock:
            if self._ptr is None:
                raise FtarError(f"start: the coordinator on {self.address} is closed; create a new Coordinator")
            if self._thread is not None:
                raise FtarError(f"start: the coordinator on {self.address} is already serving")
            self._thread = threading.Thread(target=self._loop, name="ftar-coordinator", daemon=True)
            self._thread.start()
        return self

    @property
    def serving(self) -> bool:
        """True while the loop runs."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def stop(self) -> None:
        """Ask the loop to end (any thread, also a signal handler); :meth:`wait` for it."""
        ptr = self._ptr
        if ptr is not None:
            lib.pmc_ftar_coord_stop(ptr)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to `timeout` seconds (None: no limit) for the loop to end; True when it has ended.

        FtarError when the loop ended with a failure.
        """
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            return False
        if self._rc not in (None, 0):
            raise FtarError(f"the FTAR coordinator on {self.address} failed (code {self._rc})")
        return True

    def serve(self, stop_signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Optional[int]:
        """Serve in the calling thread until :meth:`stop` or one of `stop_signals` arrives.

        Returns the signal that stopped it (None: stopped by :meth:`stop`).
        The signals' handlers are restored on return. Outside the main thread
        pass ``stop_signals=()`` (Python handles signals in the main thread
        only). FtarError when the loop fails.
        """
        if stop_signals and threading.current_thread() is not threading.main_thread():
            raise ValueError("stop_signals: signal handlers can only be set in the main thread; pass "
                             "stop_signals=() and call stop() from elsewhere")
        received: list[int] = []

        def on_signal(signum: int, frame: Any) -> None:
            received.append(signum)
            self.stop()

        previous = {s: signal.signal(s, on_signal) for s in stop_signals}
        try:
            self.start()
            # Short joins, so that the main thread runs its signal handlers.
            while not self.wait(0.25):
                pass
        finally:
            if self.serving:  # an exception in the wait: stop the loop before anything is released
                self.stop()
                self.wait()
            for s, handler in previous.items():
                signal.signal(s, handler)
        return received[0] if received else None

    # --- life cycle ---------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._ptr is None

    def close(self) -> None:
        """Stop serving and release the socket (idempotent); the members see the coordinator go."""
        with self._lock:
            ptr, thread = self._ptr, self._thread
            if ptr is None:
                return
            if thread is not None:
                lib.pmc_ftar_coord_stop(ptr)
                thread.join()
            self._ptr = None
        lib.pmc_ftar_coord_destroy(ptr)

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr is not None and not self.serving:
            self._ptr = None
            try:
                lib.pmc_ftar_coord_destroy(ptr)
            except Exception:  # interpreter shutdown: nothing left to do
                pass

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else "serving" if self.serving else "not serving"
        return f"<pymcoll.ftar.Coordinator {self.address} {state}>"


def write_addr_file(path: str, addr: str) -> None:
    """Write `addr` + newline to `path` atomically (a temporary file in the same directory, then rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ftar-addr.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(addr + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def token_file_warning(path: str) -> Optional[str]:
    """A warning when the token file `path` can be read by other users (None when it cannot, or is missing)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        return f"the token file {path} is readable by other users; chmod 600 it"
    return None
