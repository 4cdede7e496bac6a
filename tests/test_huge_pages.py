"""Buffers exposed for single copy, collapsed into transparent huge pages on their second
exposure (PYMCOLL_HUGE_PAGES); the range bookkeeping itself is native/tests/test_huge_pages.c."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("n", [2, 3], ids=["np2", "np3"])
def test_second_exposure_collapses_and_results_hold(n: int, mpirun) -> None:
    # Single copy forced: the path trials might keep 2-4 MiB in the cells, which expose nothing.
    proc = mpirun(n, "huge_pages", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_COPY": "cma"}, timeout=300)
    assert " 0 failed" in proc.stdout, proc.stdout


def test_off_collapses_nothing(mpirun) -> None:
    proc = mpirun(2, "huge_pages", "--off", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_COPY": "cma",
                                                 "PYMCOLL_HUGE_PAGES": "off"}, timeout=300)
    assert " 0 failed" in proc.stdout, proc.stdout
