"""Single-copy reductions: Reduce storing slices into the root chunk by chunk as they are reduced,
and results written with streaming stores."""

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


@pytest.mark.parametrize("n", [2, 3], ids=["np2", "np3"])
def test_streamed_results_match_numpy_around_blocks_lines_and_chunks(n: int, mpirun) -> None:
    # Reduce_scatter results from 64 bytes on go out with streaming stores (at 3 ranks the last
    # input's pass streams): results on a line and one element past it stream after a short head,
    # one byte past it (elements straddling lines) takes the plain kernel, the in-place form streams
    # its final copy, and Reduce (plain stores) runs beside them under the same settings.
    proc = mpirun(n, "reduce_streamed", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_COPY": "cma",
                                             "PYMCOLL_STREAM_MIN": "64"}, timeout=600)
    assert " 0 failed" in proc.stdout, proc.stdout
