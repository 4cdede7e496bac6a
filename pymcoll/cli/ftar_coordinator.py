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
import importlib
import os
import sys
import warnings
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


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 then, 2 for a bad option or missing token, 1 when the coordinator fails."""
    from ..ftar.address import TOKEN_ENV, TOKEN_FILE_ENV, parse_address, resolve_token
    from ..ftar.coordinator import (DEFAULT_EVICT_MS, DEFAULT_HEARTBEAT_MS, DEFAULT_JOIN_TIMEOUT_MS, Coordinator,
                                    token_file_warning, write_addr_file)
    from ..ftar.member import FtarError

    def fail(message: str, status: int = 2) -> int:
        print(f"ftar-coordinator: error: {message}", file=sys.stderr)
        return status

    # The options are checked here, so that the messages name them as typed.
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
        warning = token_file_warning(args.token_file)
        if warning:
            print(f"ftar-coordinator: warning: {warning}", file=sys.stderr)
    if args.addr_file is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.addr_file))):
        return fail(f"--addr-file {args.addr_file}: its directory does not exist; name a file in an existing "
                    f"directory")
    heartbeat_ms = args.heartbeat_ms if args.heartbeat_ms is not None else DEFAULT_HEARTBEAT_MS
    evict_ms = args.evict_ms if args.evict_ms is not None else DEFAULT_EVICT_MS
    if evict_ms <= heartbeat_ms:
        return fail(f"--evict-ms ({evict_ms}) must be larger than --heartbeat-ms ({heartbeat_ms}), e.g. 20 heartbeats")

    try:
        coord = Coordinator(bind, token, min_replicas=args.min_replicas, heartbeat_ms=heartbeat_ms,
                            evict_ms=evict_ms, log=not args.quiet,
                            join_timeout_ms=(args.join_timeout_ms if args.join_timeout_ms is not None
                                             else DEFAULT_JOIN_TIMEOUT_MS))
    except FtarError as exc:
        return fail(str(exc), 1)
    with coord:
        if args.addr_file is not None:
            try:
                write_addr_file(args.addr_file, coord.address)
            except OSError as exc:
                return fail(f"cannot write --addr-file {args.addr_file}: {exc.strerror or exc}", 1)
        print(f"ftar-coordinator listening on {coord.address}", file=sys.stderr, flush=True)
        try:
            stopped_by = coord.serve()
        except FtarError as exc:
            return fail(str(exc), 1)
    if stopped_by is not None:
        print("ftar-coordinator stopped", file=sys.stderr, flush=True)
    return 0


# Moved to pymcoll.ftar.coordinator; still reachable here, with a warning.
_MOVED = {"write_addr_file": "pymcoll.ftar.coordinator"}


def __getattr__(name: str) -> Any:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {where}.{name}; import it from there", DeprecationWarning,
                  stacklevel=2)
    return getattr(importlib.import_module(where), name)
