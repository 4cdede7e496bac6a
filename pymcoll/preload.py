"""Where the preload library is, and how to launch an application with it.

``libpymcoll_pmpi.so`` is installed next to this module (next to the core's
extension module in an editable install). Preloaded into the
ranks of an unmodified MPI application (C, Fortran through the C bindings,
or Python on mpi4py), it runs the application's MPI_* collectives in
pymcoll's core: ``python -m pymcoll preload`` prints the launch lines.

This module does not import mpi4py or the core, so a launcher script can
ask for the path without starting MPI.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

LIBRARY_NAME = "libpymcoll_pmpi.so"


def library_path() -> Path:
    """Absolute path of the installed preload library.

    It lies next to this module in an installed package, and next to the
    core's extension module in an editable install (the build directory).
    Raises FileNotFoundError, saying how to get it, when the package was
    installed without it.
    """
    here = Path(__file__).resolve().parent / LIBRARY_NAME
    candidates = [here]
    # Found without importing the core (which would load MPI).
    spec = importlib.util.find_spec("pymcoll._core")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).resolve().parent / LIBRARY_NAME)
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{here} is missing: this pymcoll was installed without its preload library; reinstall it "
        f"from a checkout with `python -m pip install .` (the build makes {LIBRARY_NAME} with the "
        f"same MPI as the core)")


def check_loadable(path: Path) -> str:
    """'' when the dynamic loader can load `path` (its libmpi found), else the loader's message."""
    try:
        ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        return str(exc)
    return ""


def launch_lines(path: Path, program: str = "./app", ranks: int = 4) -> dict[str, str]:
    """mpiexec command lines that preload `path` under MPICH's Hydra and under Open MPI."""
    return {
        "MPICH": f"mpiexec -genv LD_PRELOAD {path} -n {ranks} {program}",
        "Open MPI": f"mpiexec -x LD_PRELOAD={path} -n {ranks} {program}",
    }
