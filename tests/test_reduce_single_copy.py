"""Reduce by single copy: slices stored into the root chunk by chunk as they are reduced."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("n", [2, 3], ids=["np2", "np3"])
def test_slices_around_the_chunks_reach_the_root(n: int, mpirun) -> None:
    # Single copy forced: without it the path trials may keep these sizes in the cells.
    proc = mpirun(n, "reduce_single_copy", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_COPY": "cma"}, timeout=600)
    assert " 0 failed" in proc.stdout, proc.stdout


def test_heap_buffers_take_the_stores_too(mpirun) -> None:
    # The root's result in the shared heap: each chunk is a plain store, no system call.
    proc = mpirun(2, "reduce_single_copy", "--heap", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_COPY": "direct",
                                                "PYMCOLL_HEAP_SIZE": "256M"}, timeout=600)
    assert " 0 failed" in proc.stdout, proc.stdout
