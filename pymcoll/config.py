"""Every tunable of pymcoll: its environment name, default and meaning.

An empty environment value means unset. Keyword arguments of
:class:`pymcoll.Comm` win over the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str, name: str) -> int:
    """Parse '4194304', '4M', '64k' or '1G' into bytes; ValueError names `name`."""
    s = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = s[-1:] if s[-1:] in _SUFFIXES else ""
    number = s[: len(s) - len(unit)]
    try:
        value = int(float(number) * _SUFFIXES[unit])
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a size; use bytes or a K/M/G suffix, e.g. 4M") from None
    if value <= 0:
        raise ValueError(f"{name}={text!r} must be positive")
    return value


def parse_seconds(text: str, name: str) -> float:
    """Parse a non-negative number of seconds (0 = no deadline)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number of seconds (0 = no deadline)") from None
    if value < 0:
        raise ValueError(f"{name}={text!r} must be >= 0 (0 = no deadline)")
    return value


def parse_positive_int(text: str, name: str) -> int:
    """Parse an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{name}={text!r} must be >= 1")
    return value


def parse_node_layout(text: str, name: str) -> str:
    """Parse 'block' or 'cyclic'."""
    value = text.strip().lower()
    if value not in ("block", "cyclic"):
        raise ValueError(f"{name}={text!r}: expected 'block' or 'cyclic'")
    return value


def parse_flag(text: str, name: str) -> bool:
    """Parse 1/0, on/off, yes/no, true/false."""
    value = text.strip().lower()
    if value in ("1", "on", "yes", "true"):
        return True
    if value in ("0", "off", "no", "false"):
        return False
    raise ValueError(f"{name}={text!r}: expected 1 or 0")


def parse_shm_mode(text: str, name: str) -> str:
    """Parse 'auto' or 'off'."""
    value = text.strip().lower()
    if value in ("off", "0", "no", "false"):
        return "off"
    if value in ("auto", "on", "1", "yes", "true"):
        return "auto"
    raise ValueError(f"{name}={text!r}: expected 'auto' or 'off'")


@dataclass(frozen=True)
class Option:
    """One tunable: environment name, default (None = unset), parser and meaning."""

    name: str
    default: object
    parse: Callable[[str, str], object]
    meaning: str

    def current(self) -> object:
        """The value from the environment, or the default."""
        raw = os.environ.get(self.name, "")
        if raw.strip() == "":
            return self.default
        return self.parse(raw, self.name)

    def raw(self) -> Optional[str]:
        """The environment text, or None when unset (empty counts as unset)."""
        raw = os.environ.get(self.name, "")
        return raw if raw.strip() else None


OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("PYMCOLL_TIMEOUT", 300.0, parse_seconds,
               "seconds a collective may wait for a local rank before raising pymcoll.TimeoutError "
               "(0 = wait forever); keyword timeout="),
        Option("PYMCOLL_NODE_SIZE", None, parse_positive_int,
               "group consecutive ranks into virtual nodes of this many ranks (unset = real nodes); "
               "keyword node_size="),
        Option("PYMCOLL_NODE_LAYOUT", "block", parse_node_layout,
               "how virtual nodes take ranks: 'block' (consecutive ranks) or 'cyclic' (rank r on "
               "node r mod nodes, like a by-node placement)"),
        Option("PYMCOLL_LANES", None, parse_positive_int,
               "cap on the number of lanes between nodes (unset = fewest ranks on any node); "
               "keyword lanes="),
        Option("PYMCOLL_CHECK", False, parse_flag,
               "1: before each collective the ranks agree on collective, count, type, op and root, "
               "and a mismatch raises ValueError on every rank instead of hanging (one small "
               "MPI_Allreduce per call)"),
        Option("PYMCOLL_PROGRESS_THREAD", False, parse_flag,
               "1: a background thread per communicator moves started non-blocking and persistent "
               "collectives, so they complete without Test/Wait calls (needs MPI_THREAD_MULTIPLE)"),
        Option("PYMCOLL_SHM", "auto", parse_shm_mode,
               "'off' runs every collective through the wrapped MPI communicator"),
        Option("PYMCOLL_SHM_SIZE", 4 << 20, parse_bytes,
               "bytes of the node segment's data area (copy-in/copy-out cells)"),
        Option("PYMCOLL_SHM_DIR", "/dev/shm", lambda t, n: t,
               "directory (a tmpfs) where the node segment is created; unlinked once mapped"),
        Option("PYMCOLL_CHUNK_SIZE", 64 << 10, parse_bytes,
               "pipeline chunk of the copy-in/copy-out broadcast, in bytes"),
    )
}


def value(name: str, override: object = None) -> object:
    """The effective value of option `name`: the override if given, else env or default."""
    if override is not None:
        return override
    return OPTIONS[name].current()
