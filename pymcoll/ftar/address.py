"""Where an FTAR coordinator is and how its job is authenticated: "HOST:PORT" addresses and the job token.

The coordinator and every member of a group share one job token. It comes
from an argument, a file, ``PYMCOLL_FTAR_TOKEN`` (its UTF-8 bytes) or the file
that ``PYMCOLL_FTAR_TOKEN_FILE`` names; it is never taken from a command line,
which every user of the machine can read.
"""

from __future__ import annotations

import os
import socket
from typing import Optional, Union

from .._ftar import lib

__all__ = ["parse_address", "route_address", "resolve_token", "TOKEN_ENV", "TOKEN_FILE_ENV"]

TOKEN_ENV = "PYMCOLL_FTAR_TOKEN"
TOKEN_FILE_ENV = "PYMCOLL_FTAR_TOKEN_FILE"

_MAX_TOKEN_BYTES = 1 << 16


def parse_address(text: str, name: str, *, allow_port_zero: bool = False) -> str:
    """Check a "HOST:PORT" address (IPv6 as "[::1]:PORT"); return it stripped.

    ValueError names `name` and the expected form.
    """
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a 'HOST:PORT' string, not {type(text).__name__}")
    value = text.strip()
    host, sep, port = value.rpartition(":")
    low = 0 if allow_port_zero else 1
    hint = "e.g. 127.0.0.1:29400" + (" (port 0 picks a free port)" if allow_port_zero else "")
    if not sep or not host or not port.isdigit() or not low <= int(port) <= 65535:
        raise ValueError(f"{name}={text!r} is not HOST:PORT with a port in {low}..65535; {hint}")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ValueError(f"{name}={text!r}: write an IPv6 host in brackets, e.g. [::1]:29400")
    elif ":" in host:
        raise ValueError(f"{name}={text!r}: write an IPv6 host in brackets, e.g. [::1]:29400")
    if len(value) >= lib.PMC_FTAR_ADDR_BYTES or any(c.isspace() or c == "\0" for c in value):
        raise ValueError(f"{name}={text!r}: not an address (spaces, NUL or longer than "
                         f"{lib.PMC_FTAR_ADDR_BYTES - 1} characters)")
    return value


def route_address(coordinator: str) -> str:
    """The address of this host on the way to `coordinator` ("HOST:PORT"): where a member
    listens so that every other member, wherever the coordinator reaches it, reaches it too.

    A coordinator on loopback gives 127.0.0.1; one on another host gives the address of the
    interface the route to it leaves by (asked of the kernel; no packet is sent). ValueError
    when the coordinator's host does not resolve.
    """
    host, _, port = parse_address(coordinator, "coordinator").rpartition(":")
    host = host.strip("[]")
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as exc:
        raise ValueError(f"coordinator={coordinator!r}: its host does not resolve ({exc.strerror}); "
                         f"give an address, or pass bind_host=") from None
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.connect(where)
        except OSError as exc:
            raise ValueError(f"coordinator={coordinator!r}: no route from this host ({exc.strerror}); "
                             f"pass bind_host=") from None
        return str(probe.getsockname()[0])


def _read_token_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{what}={path!r}: cannot read the token file ({exc.strerror or exc}); "
                         f"name a readable file that holds the job token") from None
    token = data.strip()
    if not token:
        raise ValueError(f"{what}={path!r}: the token file is empty; write the job token into it")
    if len(token) > _MAX_TOKEN_BYTES:
        raise ValueError(f"{what}={path!r}: the token is longer than {_MAX_TOKEN_BYTES} bytes")
    return token


def resolve_token(token: Union[str, bytes, None] = None, token_file: Optional[str] = None, *,
                  token_arg: str = "token", token_file_arg: str = "token_file") -> bytes:
    """The job token as bytes, from the first of: `token`, `token_file`,
    ``PYMCOLL_FTAR_TOKEN`` (its UTF-8 bytes), ``PYMCOLL_FTAR_TOKEN_FILE``.

    A token file's content counts with surrounding whitespace (a trailing
    newline) removed. ValueError when no token is found or it is empty; the
    message names the environment variables and the arguments
    (`token_arg`, `token_file_arg`, e.g. the command-line option names).
    """
    if token is not None and token_file is not None:
        raise ValueError(f"pass either {token_arg} or {token_file_arg}, not both")
    if token is not None:
        if isinstance(token, str):
            value = token.encode("utf-8")
        elif isinstance(token, (bytes, bytearray, memoryview)):
            value = bytes(token)
        else:
            raise TypeError(f"{token_arg} must be str or bytes, not {type(token).__name__}")
        if not value:
            raise ValueError(f"{token_arg} is empty; pass the job token shared with the coordinator")
        if len(value) > _MAX_TOKEN_BYTES:
            raise ValueError(f"{token_arg} is longer than {_MAX_TOKEN_BYTES} bytes")
        return value
    if token_file is not None:
        return _read_token_file(os.fspath(token_file), token_file_arg)
    env = os.environ.get(TOKEN_ENV, "")
    if env:
        value = env.encode("utf-8")
        if len(value) > _MAX_TOKEN_BYTES:
            raise ValueError(f"{TOKEN_ENV} is longer than {_MAX_TOKEN_BYTES} bytes")
        return value
    env_file = os.environ.get(TOKEN_FILE_ENV, "")
    if env_file:
        return _read_token_file(env_file, TOKEN_FILE_ENV)
    raise ValueError(f"no FTAR job token: set {TOKEN_ENV} (or {TOKEN_FILE_ENV} to a file holding it), or pass "
                     f"{token_arg} or {token_file_arg}; the coordinator and every member need the same token")
