"""pymcoll.testing: property tests of collectives against MPI semantics.

Under MPI, hypothesis deadlocks unless every rank draws the same examples and
agrees on every verdict; this package does both, and adds a reference oracle
for every collective of MPI's buffer API and a watchdog for hangs::

    from mpi4py import MPI
    import pymcoll, pymcoll.testing

    comm = pymcoll.Comm(MPI.COMM_WORLD)
    report = pymcoll.testing.check(comm, MPI.COMM_WORLD, ["Bcast", "Allgather"])
    if MPI.COMM_WORLD.rank == 0:
        print(report)

Run it under mpiexec. The same works for a plain mpi4py communicator or any
object with mpi4py's method names and arguments. ``spec_forms=True`` also
draws mpi4py's other ways of writing the same arguments (vector specs'
shapes, integer counts and strides, typecode strings, None for
MPI.IN_PLACE, ...), and ``compare_wrapped=True`` runs the examples on the
mpi4py communicator a pymcoll.Comm wraps too, requiring the same bytes.

:mod:`pymcoll.testing.cluster` makes hosts on one machine (network namespaces)
to run a job across real links and cut them; it does not need hypothesis.
"""

import importlib.util

if importlib.util.find_spec("hypothesis") is None:  # pragma: no cover - depends on the environment
    # The test bed (pymcoll.testing.cluster) works without hypothesis; the property tests do not.
    def __getattr__(name: str) -> object:
        raise ImportError(f"pymcoll.testing.{name} needs hypothesis: pip install 'pymcoll[test]'")
else:
    from .case import COLLECTIVES, OPS, Case, mpi_dtypes, mpi_type, ops_for, stride_gaps
    from .check import LAYOUTS, Failure, Report, check, run_case
    from .execute import build, vector_spec, write_past
    from .oracle import expected, reduce_arrays
    from .runner import HANG_EXIT, Watchdog, run_property
    from .strategies import cases

__all__ = [
    "check", "run_case", "Report", "Failure", "Case", "cases", "expected", "reduce_arrays",
    "run_property", "Watchdog", "LAYOUTS", "COLLECTIVES", "OPS", "HANG_EXIT", "mpi_dtypes",
    "ops_for", "mpi_type", "write_past", "build", "vector_spec", "stride_gaps",
]
