"""pymcoll.Comm wraps any intracommunicator like mpi4py's own."""

from __future__ import annotations

import pytest

from conftest import run_mpi


@pytest.mark.parametrize("node_size", [None, 1, 2, 3], ids=lambda k: f"node{k or 'real'}")
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_comm_api(n: int, node_size: int | None) -> None:
    args = [str(node_size)] if node_size else []
    proc = run_mpi(n, "comm_api", *args)
    assert proc.stdout.count("comm api ok") == n


@pytest.mark.parametrize("n,k", [(3, 2), (4, 2), (5, 2), (4, 3)])
def test_cyclic_virtual_nodes(n: int, k: int) -> None:
    proc = run_mpi(n, "comm_api", str(k), env={"PYMCOLL_NODE_LAYOUT": "cyclic"})
    assert proc.stdout.count("comm api ok") == n


def test_environment_node_size_is_used_and_empty_means_unset() -> None:
    proc = run_mpi(3, "comm_api", "2", env={"PYMCOLL_NODE_SIZE": "2"})
    assert proc.stdout.count("comm api ok") == 3
    proc = run_mpi(2, "comm_api", env={"PYMCOLL_NODE_SIZE": ""})
    assert proc.stdout.count("comm api ok") == 2
