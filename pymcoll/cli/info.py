"""Print what pymcoll was built with and what it sees here.

Versions (pymcoll and its build commit, Python, numpy, mpi4py), the MPI the
C core was compiled against and the one mpi4py loaded, the node/lane layout of
a pymcoll.Comm over MPI.COMM_WORLD with the ranks of every node, the node
segment, whether cross-memory attach (CMA) works, the online CPUs, and every
PYMCOLL_* option with its default, current value and meaning.

Run it alone (one rank) or under mpiexec to see the layout of a job; only
rank 0 prints. Example:

    mpiexec -n 4 python -m pymcoll info
    PYMCOLL_NODE_SIZE=2 mpiexec -n 4 python -m pymcoll info --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sys
import textwrap
import warnings
from typing import Any, Optional

HELP = "show versions, the MPI, the node/lane layout, the segment, CMA and every option"

PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``python -m pymcoll info``."""
    parser.add_argument("--json", action="store_true",
                        help="print the same information as one JSON object")


def _human_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << (shift - 4)) == 0:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _format_value(opt: Any, value: object) -> str:
    from .. import config

    if value is None:
        return "unset"
    if opt.parse is config.parse_bytes and isinstance(value, int):
        return f"{value} ({_human_bytes(value)})"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def options_table() -> list[dict[str, Any]]:
    """Every option of :data:`pymcoll.config.OPTIONS` as dicts.

    Keys: name, default, current (None when unset), from_env (set in the
    environment), raw (the environment text or None), error (why the
    environment value is invalid, else None), meaning, and the
    ``default_text``/``current_text`` renderings used by the text output.
    """
    from .. import config

    rows = []
    for opt in config.OPTIONS.values():
        raw = opt.raw()
        error = None
        try:
            current = opt.current()
        except ValueError as exc:
            current, error = None, str(exc)
        rows.append({
            "name": opt.name,
            "default": opt.default,
            "current": current,
            "from_env": raw is not None,
            "raw": raw,
            "error": error,
            "meaning": opt.meaning,
            "default_text": _format_value(opt, opt.default),
            "current_text": ("INVALID" if error else _format_value(opt, current))
                            + (" (env)" if raw is not None else ""),
        })
    return rows


def _ptrace_scope() -> Optional[str]:
    try:
        with open(PTRACE_SCOPE) as f:
            return f.read().strip()
    except OSError:
        return None


def _usable_cpus() -> Optional[int]:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def collect(world: Any = None) -> Optional[dict[str, Any]]:
    """Gather the information, collectively over `world` (default MPI.COMM_WORLD).

    Every rank must call it. Returns the information as a JSON-ready dict on
    rank 0 of `world` and None on the other ranks. A pymcoll.Comm that cannot
    be created is reported (``layout.error``) instead of raised.
    """
    import mpi4py
    import numpy
    from mpi4py import MPI

    import pymcoll
    from .. import config
    from .._native import lib

    world = MPI.COMM_WORLD if world is None else world
    comm = None
    comm_error = None
    with warnings.catch_warnings():
        # The segment note is reported below instead of as a warning.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            comm = pymcoll.Comm(world)
        except (pymcoll.Error, ValueError, TypeError) as exc:
            comm_error = f"{type(exc).__name__}: {exc}"

    layout = comm.layout if comm is not None else None
    local_rank = layout.local_rank if layout is not None else world.Get_rank()
    mine = {
        "rank": world.Get_rank(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "node": layout.node if layout is not None else None,
        "local_rank": local_rank,
        "cpus_online": os.cpu_count(),
        "cpus_usable": _usable_cpus(),
        # One probe per node: it forks a child process.
        "cma": int(lib.pmc_cma_probe()) if local_rank == 0 else None,
        "ptrace_scope": _ptrace_scope(),
    }
    everyone = world.gather(mine, root=0)
    if comm is not None:
        comm.Free()
    if world.Get_rank() != 0:
        return None

    shm_dir_opt = config.OPTIONS["PYMCOLL_SHM_DIR"]
    try:
        shm_dir = str(shm_dir_opt.current())
    except ValueError:
        shm_dir = str(shm_dir_opt.default)
    nodes: list[dict[str, Any]] = []
    if layout is not None:
        for k in range(layout.nnodes):
            ranks = layout.node_ranks(k)
            members = [everyone[r] for r in ranks]
            probes = [m["cma"] for m in members if m["cma"] is not None]
            nodes.append({
                "node": k,
                "ranks": list(ranks),
                "hosts": sorted({m["host"] for m in members}),
                "cpus_online": members[0]["cpus_online"],
                "cpus_usable": members[0]["cpus_usable"],
                "cma": probes[0] if probes else None,
                "ptrace_scope": members[0]["ptrace_scope"],
            })
    major, minor = MPI.Get_version()
    info: dict[str, Any] = {
        "pymcoll": {"version": pymcoll.__version__, "commit": pymcoll.COMMIT,
                    "path": os.path.dirname(pymcoll.__file__)},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "numpy": numpy.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi": {
            "built_with": pymcoll.BUILD_MPI,
            "loaded": pymcoll.RUNTIME_MPI,
            "standard": f"{major}.{minor}",
            "mpiexec": shutil.which("mpiexec"),
        },
        "layout": None if layout is None else {
            "describe": layout.describe(),
            "ranks": layout.size,
            "nnodes": layout.nnodes,
            "virtual_node_size": layout.virtual_node_size,
            "lanes": layout.lanes,
            "min_local": layout.min_local,
            "max_local": layout.max_local,
            "consecutive": layout.consecutive,
            "nodes": nodes,
        },
        "segment": None if layout is None else {
            "shm_active": layout.shm_active,
            "segment_bytes": layout.segment_bytes,
            "data_bytes": layout.data_bytes,
            "chunk_bytes": layout.chunk_bytes,
            "cma_ok": layout.cma_ok,
            "single_copy_from": _single_copy_from(layout.max_local),
            "streaming_from": _streaming_from(layout.max_local),
            "shm_dir": shm_dir,
            "note": comm.note if comm is not None else "",
        },
        "comm_error": comm_error,
        "cma": {
            "meaning": "1 = process_vm_readv works between sibling processes, 0 = refused, <0 = unknown",
            "per_node": [n["cma"] for n in nodes] if nodes else [everyone[0]["cma"]],
            "ptrace_scope": everyone[0]["ptrace_scope"],
        },
        "cpus": {"online": os.cpu_count(), "usable": _usable_cpus()},
        "hosts": sorted({m["host"] for m in everyone}),
        "options": options_table(),
    }
    return info


def _single_copy_from(local_ranks: int) -> dict[str, int]:
    """Each collective's single-copy crossover on the largest node: PYMCOLL_CMA_MIN
    for all when set, else the measured table (empty on nodes of one rank)."""
    from .. import config
    from ..tuning import single_copy_min_now

    if local_ranks < 2:
        return {}
    table = {c: single_copy_min_now(c, local_ranks) for c in config.COLLECTIVES}
    return {c: v for c, v in table.items() if v}


def _streaming_from(local_ranks: int) -> Optional[int]:
    """The streaming-store threshold on the largest node; None when off."""
    from ..tuning import stream_min_now

    return stream_min_now(max(local_ranks, 1))


def _cma_text(value: Optional[int]) -> str:
    if value is None:
        return "not probed"
    if value == 1:
        return "yes (1)"
    if value == 0:
        return "refused (0)"
    return f"unknown ({value})"


def format_text(info: dict[str, Any], width: Optional[int] = None) -> str:
    """Render the dict from :func:`collect` for humans."""
    width = width or max(80, min(shutil.get_terminal_size((100, 24)).columns, 140))
    out: list[str] = []
    add = out.append
    p = info["pymcoll"]
    add(f"pymcoll        {p['version']} (commit {p['commit']})  {p['path']}")
    add(f"python         {info['python']['version']}  {info['python']['executable']}")
    add(f"numpy          {info['numpy']}")
    add(f"mpi4py         {info['mpi4py']}")
    m = info["mpi"]
    add(f"MPI built with {m['built_with']}")
    add(f"MPI loaded     {' '.join(m['loaded'].split())}  (MPI standard {m['standard']})")
    add(f"mpiexec        {m['mpiexec'] or 'not on PATH'}")
    cpus = info["cpus"]
    add(f"CPUs           {cpus['online']} online, {cpus['usable']} usable by this process")
    add("")
    lay = info["layout"]
    if lay is None:
        add(f"layout         pymcoll.Comm(MPI.COMM_WORLD) failed: {info['comm_error']}")
    else:
        add(f"layout         {lay['describe']}")
        add(f"               hosts: {', '.join(info['hosts'])}")
        for n in lay["nodes"]:
            add(f"  node {n['node']:<3}   ranks {_ranks_text(n['ranks'])}  host {','.join(n['hosts'])}  "
                f"cpus {n['cpus_online']}  CMA {_cma_text(n['cma'])}")
        s = info["segment"]
        add("")
        if s["shm_active"] and s["segment_bytes"] == 0 and lay["max_local"] == 1:
            state = "none needed (no node has two ranks)"
        else:
            state = "in use" if s["shm_active"] else "NOT used"
        add(f"segment        {state}: "
            f"{s['segment_bytes']} bytes mapped ({_human_bytes(s['segment_bytes'])}), "
            f"data area {s['data_bytes']} bytes ({_human_bytes(s['data_bytes'])}), "
            f"chunk {_human_bytes(s['chunk_bytes'])}")
        add(f"               single copy (process_vm_readv) between local ranks: "
            f"{'works' if s['cma_ok'] else 'refused or not needed'}")
        if s.get("single_copy_from"):
            add("               single copy from (block per rank): " + ", ".join(
                f"{coll} {_human_bytes(b)}" for coll, b in s["single_copy_from"].items()))
        if "streaming_from" in s:
            add("               streaming stores for own-block and heap copies from: "
                + ("off" if s["streaming_from"] is None else _human_bytes(s["streaming_from"])))
        add(f"               PYMCOLL_SHM_DIR={s['shm_dir']}")
        if s["note"]:
            add(f"               note: {s['note']}")
    cma = info["cma"]
    scope = cma["ptrace_scope"]
    add(f"CMA            {', '.join(_cma_text(v) for v in cma['per_node'])}"
        f"  (yama ptrace_scope: {scope if scope is not None else f'{PTRACE_SCOPE} absent'})")
    add("")
    add("options (environment; empty = unset; pymcoll.Comm keywords win over them)")
    rows = info["options"]
    name_w = max(len(r["name"]) for r in rows)
    def_w = max(len("default"), *(len(r["default_text"]) for r in rows))
    cur_w = max(len("current"), *(len(r["current_text"]) for r in rows))
    add(f"  {'name':<{name_w}}  {'default':<{def_w}}  {'current':<{cur_w}}  meaning")
    indent = 2 + name_w + 2 + def_w + 2 + cur_w + 2
    wrap_w = max(30, width - indent)
    for r in rows:
        lines = textwrap.wrap(r["meaning"], wrap_w) or [""]
        add(f"  {r['name']:<{name_w}}  {r['default_text']:<{def_w}}  "
            f"{r['current_text']:<{cur_w}}  {lines[0]}")
        for more in lines[1:]:
            add(" " * indent + more)
    for r in rows:
        if r["error"]:
            add(f"  ! {r['error']}")
    return "\n".join(out)


def _ranks_text(ranks: list[int]) -> str:
    """'0-3' for a consecutive run, else the list."""
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(r) for r in ranks)


def run(args: argparse.Namespace) -> int:
    """``python -m pymcoll info``: print the information on rank 0.

    Returns 0, or 1 (on rank 0) when an option's environment value is invalid
    or pymcoll.Comm could not be created; the output says why.
    """
    info = collect()
    if info is None:
        return 0
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print(format_text(info))
    sys.stdout.flush()
    broken = info["comm_error"] is not None or any(r["error"] for r in info["options"])
    return 1 if broken else 0
