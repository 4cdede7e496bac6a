"""Loads the C core after mpi4py, and checks both use the same MPI library."""

from __future__ import annotations

from mpi4py import MPI  # first: the core resolves libmpi against what mpi4py loaded

REBUILD_HINT = (
    "Rebuild pymcoll against the MPI that mpi4py uses: for the PyPI MPICH wheel, "
    "pip install --force-reinstall --no-cache-dir '.[mpich]'; for any other MPI, install it and "
    "mpi4py first, then MPICC=/path/to/its/mpicc pip install --no-build-isolation "
    "--force-reinstall --no-cache-dir ."
)


def _family(text: str) -> str:
    low = text.lower()
    if "open mpi" in low:
        return "Open MPI"
    if "mpich" in low or "intel" in low or "mvapich" in low or "cray" in low:
        return "MPICH"
    return text.split()[0] if text else "unknown"


try:
    from . import _core  # type: ignore[attr-defined]
except ImportError as exc:  # libmpi soname mismatch shows up here
    raise ImportError(
        f"pymcoll's C core could not be loaded next to mpi4py's MPI "
        f"({MPI.Get_library_version().splitlines()[0].strip()}): {exc}. {REBUILD_HINT}"
    ) from exc

ffi = _core.ffi
lib = _core.lib

BUILD_MPI: str = ffi.string(lib.pmc_mpi_build_vendor()).decode()
RUNTIME_MPI: str = MPI.Get_library_version().splitlines()[0].strip()

if _family(BUILD_MPI) != _family(RUNTIME_MPI):
    raise ImportError(
        f"pymcoll's C core was built for {BUILD_MPI} but mpi4py loaded {RUNTIME_MPI}. "
        + REBUILD_HINT
    )
