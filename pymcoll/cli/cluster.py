"""Hosts on this machine for a multi-node MPI job (network namespaces; needs root).

    python -m pymcoll cluster up 3 --rate 1gbit        # make 3 hosts; writes a state file
    python -m pymcoll cluster run --per-host 2 -- python app.py
    python -m pymcoll cluster link down h2             # cut h2's link (in silence); 'up' restores it
    python -m pymcoll cluster rate h2 100mbit          # 'none' removes the limit
    python -m pymcoll cluster kill h3                  # SIGKILL every process on h3
    python -m pymcoll cluster down                     # remove what the state file names
    python -m pymcoll cluster sweep                    # remove what any killed run left

Each host has its own hostname, System V IPC and /dev/shm, and one link to a bridge: ranks on
different hosts share no memory and MPI talks TCP between them, so pymcoll runs its collectives
across real nodes. The state file is ./.pymcoll-cluster.json unless --state names another.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

HELP = "make hosts on this machine (network namespaces, root) and run an MPI job across them"

DEFAULT_STATE = ".pymcoll-cluster.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the subcommands of ``python -m pymcoll cluster``."""
    parser.add_argument("--state", default=DEFAULT_STATE, help=f"the state file (default {DEFAULT_STATE})")
    sub = parser.add_subparsers(dest="cluster_command", metavar="<subcommand>", title="subcommands", required=True)
    up = sub.add_parser("up", help="make the hosts and write the state file")
    up.add_argument("hosts", type=int, help="how many hosts (1-200)")
    up.add_argument("--rate", help="limit every host's link, as tc writes rates (1gbit, 100mbit)")
    run = sub.add_parser("run", help="run an MPI program across the hosts (MPICH's mpiexec)")
    run.add_argument("--per-host", default="1", help="ranks per host: N, or one count per host (2,1,2)")
    run.add_argument("--timeout", type=float, default=3600.0, help="seconds before the job is ended (3600)")
    run.add_argument("--mpiexec", help="the mpiexec to use (default: the one next to this Python)")
    run.add_argument("program", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    link = sub.add_parser("link", help="cut or restore a host's link")
    link.add_argument("state_word", choices=("down", "up"), metavar="down|up")
    link.add_argument("host", help="h1, h2, ...")
    rate = sub.add_parser("rate", help="set or remove a host's rate limit")
    rate.add_argument("host")
    rate.add_argument("rate", help="1gbit, 100mbit, ... or none")
    kill = sub.add_parser("kill", help="SIGKILL every process on a host")
    kill.add_argument("host")
    sub.add_parser("down", help="remove the hosts the state file names")
    sub.add_parser("sweep", help="remove every test-bed host, link and state left by killed runs")
    sub.add_parser("show", help="print the hosts of the state file")


def _per_host(text: str) -> Any:
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--per-host={text!r}: expected N or one count per host, e.g. 2,1,2") from None
    return counts[0] if len(counts) == 1 else counts


def run(args: argparse.Namespace) -> int:
    """Carry out one subcommand; 2 with a message on a usage or permission problem."""
    from ..testing import cluster as tb

    try:
        if args.cluster_command == "up":
            if os.path.exists(args.state):
                print(f"error: {args.state} exists: a cluster is up already ('cluster down' first, or --state)",
                      file=sys.stderr)
                return 2
            cl = tb.Cluster(args.hosts, rate=args.rate, detach=True)
            cl.save(args.state)
            print(f"{len(cl.hosts)} hosts up ({cl.prefix}): "
                  + ", ".join(f"{h.name}={h.address}" for h in cl.hosts)
                  + (f", links at {args.rate}" if args.rate else "") + f"; state in {args.state}")
            return 0
        if args.cluster_command == "sweep":
            removed = tb.sweep()
            print(f"removed {len(removed)}: {' '.join(removed)}" if removed else "nothing to remove")
            return 0
        if not os.path.exists(args.state):
            print(f"error: no state file {args.state}: run 'python -m pymcoll cluster up N' first (or pass --state)",
                  file=sys.stderr)
            return 2
        cl = tb.Cluster.attach(args.state)
        if args.cluster_command == "down":
            removed = tb.sweep(cl.prefix)
            os.unlink(args.state)
            print(f"{cl.prefix} down: removed {len(removed)} namespaces, links and directories")
            return 0
        if args.cluster_command == "show":
            for h in cl.hosts:
                print(f"{h.name} {h.address} rate={cl.rates.get(h.name) or 'none'}")
            return 0
        if args.cluster_command == "link":
            (cl.link_down if args.state_word == "down" else cl.link_up)(args.host)
        elif args.cluster_command == "rate":
            cl.set_rate(args.host, None if args.rate.lower() == "none" else args.rate)
            cl.save(args.state)
        elif args.cluster_command == "kill":
            print(f"killed {len(cl.kill(args.host))} processes on {args.host}")
        elif args.cluster_command == "run":
            program = args.program[1:] if args.program[:1] == ["--"] else args.program
            if not program:
                print("error: name the program after --, e.g. cluster run --per-host 2 -- python app.py",
                      file=sys.stderr)
                return 2
            per_host = _per_host(args.per_host)
            print(f"pymcoll cluster: {shlex.join(cl.mpiexec_command(program, per_host, args.mpiexec))}",
                  file=sys.stderr, flush=True)
            proc = cl.launch(program, per_host, mpiexec=args.mpiexec, capture_output=False)
            done = cl.finish(proc, args.timeout)
            if done.returncode == 124:
                print(f"pymcoll cluster: the job ran past --timeout={args.timeout:g} s and was ended", file=sys.stderr)
            return done.returncode
        return 0
    except tb.ClusterUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, tb.ClusterError, FileNotFoundError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
