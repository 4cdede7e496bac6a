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


def _parse_int_from(text: str, name: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if value < low:
        raise ValueError(f"{name}={text!r} must be >= {low}")
    return value


def parse_positive_int(text: str, name: str) -> int:
    """Parse an integer >= 1."""
    return _parse_int_from(text, name, 1)


def parse_count(text: str, name: str) -> int:
    """Parse an integer >= 0."""
    return _parse_int_from(text, name, 0)


def parse_directory(text: str, name: str) -> str:
    """Parse a directory path (made absolute, so that every rank names the same place)."""
    value = text.strip()
    if "\0" in value:
        raise ValueError(f"{name}={text!r}: not a path")
    return os.path.abspath(os.path.expanduser(value))


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


def parse_wait(text: str, name: str) -> str:
    """Parse a wait policy: auto or sleep."""
    value = text.strip().lower()
    if value not in WAIT_POLICIES:
        raise ValueError(f"{name}={text!r}: expected 'auto' or 'sleep'")
    return value


def parse_huge_pages(text: str, name: str) -> str:
    """Parse the huge-page policy for buffers exposed for single copy: auto or off."""
    value = text.strip().lower()
    if value not in ("auto", "off"):
        raise ValueError(f"{name}={text!r}: expected 'auto' (collapse a buffer exposed for single copy into "
                         "huge pages on its second exposure) or 'off'")
    return value


def parse_copy(text: str, name: str) -> str:
    """Parse a data path: auto, inline, cico, cma or direct."""
    value = text.strip().lower()
    if value not in COPY_MODES:
        raise ValueError(f"{name}={text!r}: expected one of {', '.join(COPY_MODES)}")
    return value


def parse_algorithm(text: str, name: str) -> str:
    """Parse an algorithm choice: auto, shm, mpi, leader or lanes."""
    value = text.strip().lower()
    if value not in ALGORITHMS:
        raise ValueError(f"{name}={text!r}: expected one of {', '.join(ALGORITHMS)}")
    return value


def parse_single_copy_min(text: str, name: str) -> object:
    """Parse the single-copy crossover: 'auto' (each collective's measured
    default) or a block size in bytes applied to every collective."""
    if text.strip().lower() == "auto":
        return "auto"
    return parse_bytes(text, name)


def parse_auto_size(text: str, name: str) -> object:
    """Parse a size from which a copy method starts: 'auto' (the core's
    default), a size in bytes, or 'off' (never)."""
    word = text.strip().lower()
    if word in ("off", "never", "0"):
        return "off"
    if word == "auto":
        return "auto"
    try:
        return parse_bytes(text, name)
    except ValueError:
        raise ValueError(f"{name}={text!r} is neither a size (bytes or a K/M/G suffix, e.g. 8M), "
                         f"'auto' nor 'off'") from None


def parse_inline_max(text: str, name: str) -> int:
    """Parse the largest inline payload: 1 to 48 bytes."""
    value = parse_bytes(text, name)
    if value > 48:
        raise ValueError(f"{name}={text!r}: an inline line carries at most 48 bytes")
    return value


# Data paths within a node and algorithm choices, in the core's numbering.
COPY_MODES = ("auto", "inline", "cico", "cma", "direct")
WAIT_POLICIES = ("auto", "sleep")
ALGORITHMS = ("auto", "shm", "mpi", "leader", "lanes")
# Collectives in the core's numbering (PMC_COLL_* - 1), for PYMCOLL_<NAME>_ALGORITHM.
COLLECTIVES = ("Barrier", "Bcast", "Allgather", "Allreduce", "Reduce", "Gather", "Gatherv", "Scatter",
               "Scatterv", "Allgatherv", "Alltoall", "Alltoallv", "Reduce_scatter_block", "Reduce_scatter",
               "Scan", "Exscan")


def algorithm_option(collective: str) -> str:
    """Environment name that forces `collective`'s algorithm."""
    return f"PYMCOLL_{collective.upper()}_ALGORITHM"


_tuning_cache: dict[str, tuple[float, dict[str, str]]] = {}


def tuning_file() -> dict[str, str]:
    """Settings from the file named by PYMCOLL_TUNING: lines NAME=VALUE, '#' comments.

    The environment wins over the file, the file over the defaults.
    """
    path = os.environ.get("PYMCOLL_TUNING", "").strip()
    if not path:
        return {}
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise ValueError(f"PYMCOLL_TUNING={path!r}: cannot read the tuning file ({exc.strerror})") from None
    cached = _tuning_cache.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            key, sep, val = text.partition("=")
            key = key.strip()
            if not sep or key not in OPTIONS or key == "PYMCOLL_TUNING":
                raise ValueError(f"PYMCOLL_TUNING={path!r} line {lineno}: expected NAME=VALUE with a "
                                 f"PYMCOLL_* setting (see `python -m pymcoll info`), got {line.strip()!r}")
            out[key] = val.strip()
    _tuning_cache[path] = (mtime, out)
    return out


@dataclass(frozen=True)
class Option:
    """One tunable: environment name, default (None = unset), parser and meaning."""

    name: str
    default: object
    parse: Callable[[str, str], object]
    meaning: str

    def current(self) -> object:
        """The value from the environment, else the tuning file, else the default."""
        raw = self.raw()
        if raw is None:
            return self.default
        return self.parse(raw, self.name)

    def raw(self) -> Optional[str]:
        """The text that sets this option (environment first, then the
        PYMCOLL_TUNING file), or None when unset (empty counts as unset)."""
        raw = os.environ.get(self.name, "")
        if raw.strip():
            return raw
        if self.name != "PYMCOLL_TUNING":
            raw = tuning_file().get(self.name, "")
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
        Option("PYMCOLL_WAIT", "auto", parse_wait,
               "how a rank waits for others: auto (spin, then yield, then sleep; only yield and sleep when "
               "ranks outnumber CPUs) or sleep (sleep at once: for threads that share a CPU with compute, "
               "such as a communication thread beside torch's)"),
        Option("PYMCOLL_SHM", "auto", parse_shm_mode,
               "'off' runs every collective through the wrapped MPI communicator"),
        Option("PYMCOLL_SHM_SIZE", 4 << 20, parse_bytes,
               "bytes of the node segment's data area (copy-in/copy-out cells)"),
        Option("PYMCOLL_HEAP_SIZE", 16 << 20, parse_bytes,
               "bytes of the shared heap per node for pymcoll.alloc() (each local rank gets an equal "
               "share); collectives on heap arrays copy once, with no system call"),
        Option("PYMCOLL_STREAM_MIN", "auto", parse_auto_size,
               "smallest copy of a rank's own block (single copy), of any block through the shared "
               "heap, or result of a single-copy Reduce_scatter on a rank, written with streaming "
               "(non-temporal) stores on x86-64, which skip reading the "
               "destination into the cache; auto: the last-level cache over twice the node's ranks, "
               "at least 1 MiB (8 MiB for 2 ranks on a 32 MiB cache); 'off' copies with memcpy at "
               "every size; may differ between ranks"),
        Option("PYMCOLL_CELL_MOVSB_MIN", "auto", parse_auto_size,
               "smallest store into a copy-in/copy-out cell done as a string move (rep movsb, x86-64), "
               "whose stores take whole cache lines without first reading each from the core that "
               "read the cell last; auto: 1280 bytes where the CPU announces fast string moves (ERMS), "
               "else never; 'off': memcpy at every size; may differ between ranks"),
        Option("PYMCOLL_HUGE_PAGES", "auto", parse_huge_pages,
               "a buffer a rank exposes for single copy (peers copy from or into it through the "
               "kernel, which pins its pages one at a time) is collapsed into transparent huge pages "
               "(MADV_COLLAPSE, Linux 6.1+) the second time a call exposes the same whole aligned "
               "2 MiB pages: milliseconds once, then the kernel's copies of it run about as fast as "
               "memcpy instead of a fraction of it on 4 KiB pages; 'off' never does; may differ "
               "between ranks"),
        Option("PYMCOLL_SHM_DIR", "/dev/shm", lambda t, n: t,
               "directory (a tmpfs) where the node segment is created; unlinked once mapped"),
        Option("PYMCOLL_CHUNK_SIZE", 64 << 10, parse_bytes,
               "pipeline chunk of the copy-in/copy-out broadcast, in bytes"),
        Option("PYMCOLL_TUNING", None, lambda t, n: t,
               "file of NAME=VALUE lines setting any of these options (the environment wins)"),
        Option("PYMCOLL_COPY", "auto", parse_copy,
               "force a data path within a node where it can carry the call: inline (payload in the "
               "flag's cache line, up to 48 bytes per rank), cico (copy in/copy out through the "
               "segment), cma (single copy with process_vm_readv), direct (single copy from the "
               "shared heap, CMA for other buffers); auto chooses by size"),
        Option("PYMCOLL_INLINE_MAX", 48, parse_inline_max,
               "largest payload per rank (bytes) sent inline in the flag's cache line"),
        Option("PYMCOLL_REDUCE_FLAT_MAX", 4 << 10, parse_bytes,
               "largest vector (bytes) that every receiver of Allreduce/Reduce combines whole from all "
               "inputs (one step); longer vectors are split into slices reduced in parallel"),
        Option("PYMCOLL_LANES_SMALL_MAX", 64 << 10, parse_bytes,
               "largest payload per node (bytes) that the lane algorithms across nodes move through "
               "the node buffer by exchange with radix L+1 (Allgather's Bruck, Allreduce's recursive "
               "exchange); larger payloads take the L-lane ring"),
        Option("PYMCOLL_LANES_BCAST_TREE_MAX", 256 << 10, parse_bytes,
               "largest Bcast message (bytes) that goes across nodes whole down the lanes' (L+1)-ary "
               "tree through the node buffer; larger messages are broadcast in L slices, one per lane"),
        Option("PYMCOLL_LANES_DIRECT_MIN", 2 << 10, parse_bytes,
               "Alltoall/Alltoallv across nodes: smallest mean block per rank pair (bytes) of a node "
               "pair whose blocks go straight from rank to rank; smaller ones are gathered into one "
               "message per node pair and carried by the lanes"),
        Option("PYMCOLL_TRACE", None, parse_directory,
               "directory for collective trace dumps: every rank writes DIR/rank<N>.json at exit, and "
               "DIR/rank<N>.<event>.json on a timeout, SIGUSR1 or a fatal signal; read them with "
               "`python -m pymcoll trace analyze DIR` (unset: no files; SIGUSR1 prints a summary)"),
        Option("PYMCOLL_TRACE_RING", 1024, parse_count,
               "trace records kept per communicator (its last N collectives; rounded up to a power of "
               "two); 0 turns the trace off"),
        Option("PYMCOLL_TRACE_SIGNALS", True, parse_flag,
               "1: SIGUSR1 makes a rank dump its trace, a fatal signal dumps before the previous handler "
               "runs, and a rank that times out sends SIGUSR1 to the local ranks it waited for"),
        Option("PYMCOLL_CMA_MIN", "auto", parse_single_copy_min,
               "smallest block (bytes) moved by single copy (CMA or the shared heap) instead of "
               "copy in/copy out, for every collective; auto: each collective's own crossover, "
               "measured (1 MiB for Alltoall(v) to 32 MiB for Gatherv at 2 ranks, less for "
               "Alltoall(v), Gather and Scatter(v) as local ranks grow; `python -m pymcoll info` lists them)"),
        Option("PYMCOLL_PATH_TRIALS", True, parse_flag,
               "1: on one node, the first eight blocking calls of each collective and size class (powers of two "
               "from 16 KiB) take copy in/copy out and single copy in turn, and the ranks keep the faster "
               "for the communicator's life (off where PYMCOLL_CMA_MIN or PYMCOLL_COPY fixes the path); "
               "0: the crossover table alone chooses"),
    )
}
for _coll in COLLECTIVES:
    OPTIONS[algorithm_option(_coll)] = Option(
        algorithm_option(_coll), "auto", parse_algorithm,
        f"force {_coll}'s algorithm: shm (the node segment inside nodes; between nodes the lanes "
        f"where {_coll} has a lane algorithm), lanes (the same, said explicitly), leader (one "
        f"leader per node talks between nodes), or mpi (the wrapped MPI communicator's own "
        f"collective); auto = shm when the segment is active")


def value(name: str, override: object = None) -> object:
    """The effective value of option `name`: the override if given, else env or default."""
    if override is not None:
        return override
    return OPTIONS[name].current()
