"""mpi4py's buffer-argument forms on pymcoll.Comm, compared element by element
with the same calls on plain MPI.COMM_WORLD (mpi_programs/mpi4py_forms.py):
v-specs with integer counts and strides, the tuple-vs-list rule, None as
MPI.IN_PLACE or as an ignored argument, Reduce_scatter without recvcounts,
typecode strings and the 2-4 item rule, [array, its own datatype] on the
arrays' fast paths (and a datatype that is not the array's own), device buffers run in the wrapped
communicator, DLPack producers written with ctypes, argument errors, a
tuple and then a list on the same arrays (the remembered-call cache must
tell them apart), and an argument error kept in a reference cycle (the
garbage collector must not crash on the buffers it holds).
"""

from __future__ import annotations

import pytest

from conftest import run_mpi

# The checks of mpi_programs/mpi4py_forms.py, in the order it runs them.
CHECKS = [
    "allgatherv-strides", "alltoallv-strides", "gatherv-strides-root0", "gatherv-strides-rootlast",
    "scatterv-strides", "tuple-vs-list", "tuple-list-reuse", "none-forms", "reduce-scatter-counts",
    "typecodes-and-items", "typed-specs", "device-buffers", "dlpack-producers", "argument-errors",
    "error-kept-in-cycle",
]


@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"{n}-ranks")
def test_mpi4py_forms(n: int) -> None:
    # 3 and 4 ranks oversubscribe a 2-core machine: the timeout leaves room for that.
    proc = run_mpi(n, "mpi4py_forms", timeout=150)
    lines = proc.stdout.splitlines()
    passed = [line[3:] for line in lines if line.startswith("ok ")]
    assert passed == CHECKS, f"checks that passed: {passed}\n{proc.stdout[-4000:]}"
    assert f"mpi4py forms: all checks passed at {n} ranks" in lines, proc.stdout[-4000:]
