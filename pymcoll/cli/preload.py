"""Print the path of the preload library and the lines that launch with it.

libpymcoll_pmpi.so defines the MPI_* collectives (and their large-count
MPI_*_c forms where the MPI has them). Preloaded into the ranks of an
unmodified application, a call pymcoll's core serves runs there; any other
(a user-defined op, an intercommunicator, a reduction type without a core
kernel) goes on to the MPI library. Non-blocking and persistent collectives
and everything else pass through untouched. The PYMCOLL_* settings of
`python -m pymcoll info` apply; PYMCOLL_PMPI_VERBOSE=1 prints at
MPI_Finalize which calls ran in the core and which went to MPI, and why.

    python -m pymcoll preload
    mpiexec -genv LD_PRELOAD "$(python -m pymcoll preload --path)" -n 4 ./app
"""

from __future__ import annotations

import argparse
import sys

HELP = "print the preload library's path and the mpiexec lines that run an unmodified app through it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``python -m pymcoll preload``."""
    parser.add_argument("--path", action="store_true", help="print the library's path only")
    parser.add_argument("--program", default="./app", help="program shown in the launch lines (default ./app)")
    parser.add_argument("-n", "--np", type=int, default=4, help="ranks shown in the launch lines (default 4)")


def run(args: argparse.Namespace) -> int:
    """Print the path (and, without --path, the launch lines); 1 if the library is missing or unloadable."""
    from ..preload import check_loadable, launch_lines, library_path

    try:
        path = library_path()
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    problem = check_loadable(path)
    if args.path:
        print(path)
        if problem:
            print(f"warning: the loader cannot load it here: {problem}", file=sys.stderr)
        return 1 if problem else 0
    from .._native import BUILD_MPI

    print(f"# pymcoll preload library, built for {BUILD_MPI}")
    print(path)
    if problem:
        print(f"# warning: the dynamic loader cannot load it here: {problem}")
        print("# (its libmpi must be the one the application uses; set LD_LIBRARY_PATH to that MPI's lib/)")
    lines = launch_lines(path, args.program, args.np)
    print()
    print("# MPICH (Hydra mpiexec):")
    print(lines["MPICH"])
    print("# Open MPI:")
    print(lines["Open MPI"])
    print()
    print("# where the calls ran, printed at MPI_Finalize: add -genv PYMCOLL_PMPI_VERBOSE 1 (MPICH)")
    print("# or -x PYMCOLL_PMPI_VERBOSE=1 (Open MPI); every PYMCOLL_* setting of `python -m pymcoll info`")
    print("# applies (pass it the same way)")
    return 1 if problem else 0
