"""Rooted collectives across nodes back to back: the lanes' tree lets ranks run
calls ahead through a ring of node buffers, and no call's buffer may be reused
while a rank of the node still reads it (results checked after the last call)."""

from __future__ import annotations

import pytest

from conftest import run_mpi

# (ranks, environment): virtual nodes of 2 (3 ranks: nodes of 2 and 1), a data area of 64 KiB
# whose slots the test's sizes cross, cyclic nodes, and the default data area.
CASES = {
    "np3-nodes-of-2-shm-64K": (3, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_SHM_SIZE": "64K"}),
    "np4-nodes-of-2-shm-64K": (4, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_SHM_SIZE": "64K"}),
    "np4-cyclic-nodes-of-2-shm-64K": (4, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "cyclic",
                                          "PYMCOLL_SHM_SIZE": "64K"}),
    "np6-nodes-of-2-shm-64K": (6, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_SHM_SIZE": "64K"}),
    "np5-nodes-of-3": (5, {"PYMCOLL_NODE_SIZE": "3"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tree_calls_run_ahead_without_overwriting(case: str) -> None:
    n, env = CASES[case]
    proc = run_mpi(n, "tree_run_ahead", env=dict(env, PYMCOLL_TIMEOUT="60"), timeout=240)
    assert proc.stdout.count("run-ahead ok") == n, proc.stdout
