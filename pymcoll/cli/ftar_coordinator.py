"""Run the coordinator of a fault-tolerant allreduce (FTAR) group.

The coordinator owns the membership of the replicas (quorum per step, epochs,
heartbeats and eviction, COMMIT/ABORT decisions); it never carries tensor
data. Members connect to it with pymcoll.ftar.Member("HOST:PORT", ...).

The job token, shared by the coordinator and every member, comes from
--token-file FILE or the PYMCOLL_FTAR_TOKEN environment variable (or the file
that PYMCOLL_FTAR_TOKEN_FILE names). It is never taken from the command line,
which other users can read with ps.

    export PYMCOLL_FTAR_TOKEN=$(openssl rand -hex 32)
    python -m pymcoll ftar-coordinator --bind 127.0.0.1:29400 --min-replicas 2
    python -m pymcoll ftar-coordinator --bind 127.0.0.1:0 --addr-file coord.addr   # scripts

It serves until SIGINT or SIGTERM and then exits with status 0. Restarted on
the same address, it rebuilds its state from the members that reconnect.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import tempfile
import threading
from typing import Any, Optional

HELP = "run the coordinator of a fault-tolerant allreduce group (membership, quorum, commit; no tensor data)"

DEFAULT_BIND = "127.0.0.1:29400"


class _NoTokenOnCommandLine(argparse.Action):
    """Refuses --token: the command line is visible to every user (ps)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        parser.error(f"{option_string} is not an option: the token is never taken from the command line "
                     f"(ps shows it to every user); use --token-file FILE or the PYMCOLL_FTAR_TOKEN "
                     f"environment variable")


def _bounded_int(name: str, high: int = 3600 * 1000) -> Any:
    """An argparse type for an integer option in 1..high (milliseconds, or a count)."""
    low = 1

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} {text!r} must be in {low}..{high}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``python -m pymcoll ftar-coordinator``."""
    parser.allow_abbrev = False  # or "--token X" would be read as "--token-file X"
    parser.add_argument("--bind", metavar="HOST:PORT", default=DEFAULT_BIND,
                        help=f"address to listen on (default {DEFAULT_BIND}; port 0 picks a free port; "
                             f"loopback unless you name another interface)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="file holding the job token (default: the PYMCOLL_FTAR_TOKEN environment variable)")
    parser.add_argument("--token", nargs="?", action=_NoTokenOnCommandLine, help=argparse.SUPPRESS)
    parser.add_argument("--min-replicas", metavar="N", type=_bounded_int("--min-replicas", 1024), default=1,
                        help="a quorum formed after the join timeout needs at least N replicas (default 1)")
    parser.add_argument("--heartbeat-ms", metavar="MS", type=_bounded_int("--heartbeat-ms"), default=None,
                        help="heartbeat period of the coordinator and the members (default 100)")
    parser.add_argument("--evict-ms", metavar="MS", type=_bounded_int("--evict-ms"), default=None,
                        help="evict a member silent for this long (default 2000)")
    parser.add_argument("--join-timeout-ms", metavar="MS", type=_bounded_int("--join-timeout-ms"), default=None,
                        help="how long a step's quorum waits for missing previous members (default 1000)")
    parser.add_argument("--addr-file", metavar="FILE",
                        help="write the bound HOST:PORT and a newline to FILE (atomically), for scripts")
    parser.add_argument("--quiet", action="store_true", help="no log line per event on stderr")


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


def _warn_if_readable(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        print(f"ftar-coordinator: warning: the token file {path} is readable by other users; chmod 600 it",
              file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 then, 2 for a bad option or missing token, 1 when the coordinator fails."""
    from ..ftar import TOKEN_ENV, TOKEN_FILE_ENV, parse_address, resolve_token

    def fail(message: str, status: int = 2) -> int:
        print(f"ftar-coordinator: error: {message}", file=sys.stderr)
        return status

    try:
        bind = parse_address(args.bind, "--bind", allow_port_zero=True)
        token = resolve_token(None, args.token_file, token_arg="--token-file", token_file_arg="--token-file")
    except ValueError as exc:
        text = str(exc)
        if "no FTAR job token" in text:
            text = (f"no job token: set the {TOKEN_ENV} environment variable (or {TOKEN_FILE_ENV} to a file "
                    f"holding it) or pass --token-file FILE; the coordinator and every member need the same token")
        return fail(text)
    if args.token_file is not None:
        _warn_if_readable(args.token_file)
    if args.addr_file is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.addr_file))):
        return fail(f"--addr-file {args.addr_file}: its directory does not exist; name a file in an existing "
                    f"directory")

    from .._ftar import ffi, lib

    cfg = ffi.new("pmc_ftar_coord_config *")
    bind_c = ffi.new("char[]", bind.encode("utf-8"))
    token_c = ffi.new("uint8_t[]", token)
    cfg.bind = bind_c
    cfg.token = token_c
    cfg.tokenlen = len(token)
    cfg.min_replicas = args.min_replicas
    cfg.heartbeat_ms = args.heartbeat_ms if args.heartbeat_ms is not None else lib.PMC_FTAR_DEFAULT_HEARTBEAT_MS
    cfg.evict_ms = args.evict_ms if args.evict_ms is not None else lib.PMC_FTAR_DEFAULT_EVICT_MS
    cfg.join_timeout_ms = (args.join_timeout_ms if args.join_timeout_ms is not None
                           else lib.PMC_FTAR_DEFAULT_JOIN_TIMEOUT_MS)
    if cfg.evict_ms <= cfg.heartbeat_ms:
        return fail(f"--evict-ms ({cfg.evict_ms}) must be larger than --heartbeat-ms ({cfg.heartbeat_ms}), "
                    f"e.g. 20 heartbeats")
    cfg.log_fd = -1 if args.quiet else 2

    out = ffi.new("pmc_ftar_coord **")
    addr = ffi.new("char[]", lib.PMC_FTAR_ADDR_BYTES)
    msg = ffi.new("char[]", lib.PMC_FTAR_MESSAGE_BYTES)
    rc = lib.pmc_ftar_coord_create(cfg, out, addr, lib.PMC_FTAR_ADDR_BYTES, msg, lib.PMC_FTAR_MESSAGE_BYTES)
    if rc != 0 or out[0] == ffi.NULL:
        reason = ffi.string(msg).decode("utf-8", "replace") or f"code {rc}"
        return fail(f"cannot start on {bind}: {reason}", 1)
    coord = out[0]
    bound = ffi.string(addr).decode("utf-8", "replace")
    try:
        if args.addr_file is not None:
            try:
                write_addr_file(args.addr_file, bound)
            except OSError as exc:
                return fail(f"cannot write --addr-file {args.addr_file}: {exc.strerror or exc}", 1)
        print(f"ftar-coordinator listening on {bound}", file=sys.stderr, flush=True)
        return _serve(lib, coord)
    finally:
        lib.pmc_ftar_coord_destroy(coord)


def _serve(lib: Any, coord: Any) -> int:
    """Run the C loop in a thread; the main thread waits and turns SIGINT/SIGTERM into a stop."""
    result: dict[str, int] = {}
    stopped = threading.Event()

    def loop() -> None:
        result["rc"] = lib.pmc_ftar_coord_run(coord)

    def on_signal(signum: int, frame: Any) -> None:
        stopped.set()
        lib.pmc_ftar_coord_stop(coord)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=loop, name="ftar-coordinator", daemon=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.25)
    finally:
        if thread.is_alive():  # an exception in the wait: stop the loop before destroy
            lib.pmc_ftar_coord_stop(coord)
            thread.join()
        for s, handler in previous.items():
            signal.signal(s, handler)
    rc = result.get("rc", -1)
    if stopped.is_set():
        print("ftar-coordinator stopped", file=sys.stderr, flush=True)
        return 0
    if rc != 0:
        print(f"ftar-coordinator: error: the coordinator loop failed (code {rc})", file=sys.stderr)
        return 1
    return 0
