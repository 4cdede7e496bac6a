"""When the node segment cannot be created the communicator warns and falls
back to the wrapped MPI collectives, decided by all ranks together."""

from __future__ import annotations

import glob

import pytest

from conftest import run_mpi

CASES = {
    "too-large-for-dev-shm": ({"PYMCOLL_SHM_SIZE": "64T"}, "1", "bytes free"),
    "missing-directory": ({"PYMCOLL_SHM_DIR": "/nonexistent/pymcoll"}, "1", "/nonexistent/pymcoll"),
    "switched-off": ({"PYMCOLL_SHM": "off"}, "0", "PYMCOLL_SHM=off"),
}


@pytest.mark.parametrize("node_size", [None, 2], ids=["one-node", "virtual-nodes-of-2"])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_fallback_to_mpi(case: str, n: int, node_size: int | None) -> None:
    env, warn, reason = CASES[case]
    before = set(glob.glob("/dev/shm/pymcoll-*"))
    env = dict(env, PYMCOLL_NODE_SIZE=str(node_size) if node_size else None)
    if n == 1 and case != "switched-off":
        # A node of one rank needs no segment: nothing to fall back from.
        proc = run_mpi(n, "fallback_single", env=env)
        assert "single ok" in proc.stdout
        return
    proc = run_mpi(n, "fallback", warn, reason, env=env)
    assert proc.stdout.count("fallback ok") == n
    assert set(glob.glob("/dev/shm/pymcoll-*")) - before == set()


def test_only_one_node_failing_makes_everyone_fall_back() -> None:
    # Virtual nodes of 2 at 3 ranks: node 1 has a single rank and needs no
    # segment, node 0 cannot create one; all three ranks must agree.
    proc = run_mpi(3, "fallback", "1", "bytes free", env={"PYMCOLL_SHM_SIZE": "64T", "PYMCOLL_NODE_SIZE": "2"})
    assert proc.stdout.count("fallback ok") == 3
