"""Command-line interface of pymcoll: ``python -m pymcoll <command> ...``.

Each command is a module of this package with a one-line ``HELP``, an
``add_arguments(parser)`` that declares its options and a ``run(args)`` that
returns the process exit status.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import Optional, Sequence

from . import bench, cluster, ftar_coordinator, ftar_sim, info, preload, trace

COMMANDS: dict[str, ModuleType] = {"info": info, "bench": bench, "preload": preload, "trace": trace,
                                   "ftar-coordinator": ftar_coordinator, "ftar-sim": ftar_sim,
                                   "cluster": cluster}


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m pymcoll`` argument parser, one subparser per command."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="python -m pymcoll",
        description="pymcoll: node-aware collectives for MPI jobs.",
        epilog="Run 'python -m pymcoll <command> --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"pymcoll {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse `argv` (default: ``sys.argv[1:]``), run the command, return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        print("\nerror: name a command, e.g. 'python -m pymcoll info'", file=sys.stderr)
        return 2
    args._argv = argv
    return int(args._run(args) or 0)
