"""pymcoll.Comm's buffer methods on CPU torch tensors (the fast paths and the general one)."""

from __future__ import annotations

import pytest

from conftest import run_mpi

pytest.importorskip("torch")


@pytest.mark.parametrize("n,env", [(1, {}), (2, {}), (3, {}), (4, {"PYMCOLL_NODE_SIZE": "2"})],
                         ids=["np1", "np2", "np3", "np4-nodes2"])
def test_torch_tensors_match_numpy(n: int, env: dict[str, str]) -> None:
    proc = run_mpi(n, "torch_tensors", env={"PYMCOLL_TIMEOUT": "60", **env}, timeout=300)
    assert "ok" in proc.stdout, proc.stdout
