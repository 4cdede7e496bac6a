"""Bad calls raise mpi4py's exception class, name the argument, and leave
the communicator working."""

from __future__ import annotations

import pytest

from conftest import run_mpi


@pytest.mark.parametrize("node_size", [None, 2], ids=["one-node", "virtual-nodes-of-2"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_input(n: int, node_size: int | None) -> None:
    proc = run_mpi(n, "bad_input", env={"PYMCOLL_NODE_SIZE": str(node_size) if node_size else None})
    assert proc.stdout.count("bad input ok") == n


@pytest.mark.parametrize("node_size", [None, 2], ids=["one-node", "virtual-nodes-of-2"])
@pytest.mark.parametrize("n", [2, 3])
def test_pymcoll_check_turns_disagreements_into_errors(n: int, node_size: int | None) -> None:
    env = {"PYMCOLL_CHECK": "1", "PYMCOLL_NODE_SIZE": str(node_size) if node_size else None}
    proc = run_mpi(n, "check_mismatch", env=env, timeout=120)
    assert proc.stdout.count("check ok") == n
