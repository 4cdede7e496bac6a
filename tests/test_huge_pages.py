"""Buffers exposed for single copy, collapsed into transparent huge pages on their second
exposure (PYMCOLL_HUGE_PAGES); the range bookkeeping itself is native/tests/test_huge_pages.c."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("n, setting", [(2, "auto"), (3, "auto"), (2, "off")],
                         ids=["np2", "np3", "off_collapses_nothing"])
def test_second_exposure_collapses_and_results_hold(n: int, setting: str, mpirun) -> None:
    # Single copy forced: the path trials might keep 2-4 MiB in the cells, which expose nothing.
    env = {"PYMCOLL_TIMEOUT": "120", "PYMCOLL_COPY": "cma", "PYMCOLL_HUGE_PAGES": setting}
    proc = mpirun(n, "huge_pages", *(["--off"] if setting == "off" else []), env=env, timeout=300)
    assert " 0 failed" in proc.stdout, proc.stdout
