"""Reduce gives the same bits as Allreduce across nodes, whichever algorithm each takes: the
single leader's gather for small vectors where the lanes' exchange is one round (2 and 3 nodes
with 2 lanes, 2 nodes of one rank), the exchange where nodes fold (4 nodes, 3 nodes of one
rank), the lanes when asked for, and the lane ring past the exchange."""

from __future__ import annotations

import pytest

from conftest import run_mpi

LAYOUTS = [
    (4, {"PYMCOLL_NODE_SIZE": "2"}),
    (6, {"PYMCOLL_NODE_SIZE": "2"}),
    (5, {"PYMCOLL_NODE_SIZE": "3"}),
    (2, {"PYMCOLL_NODE_SIZE": "1"}),
    (3, {"PYMCOLL_NODE_SIZE": "1"}),
    (8, {"PYMCOLL_NODE_SIZE": "2"}),
    (4, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_REDUCE_ALGORITHM": "lanes"}),
    (4, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_LANES_SMALL_MAX": "4K"}),
]


@pytest.mark.parametrize("n,env", LAYOUTS, ids=lambda v: "-".join(f"{k[8:].lower()}-{x}" for k, x in v.items())
                         if isinstance(v, dict) else f"np{v}")
def test_reduce_gives_allreduce_bits(n: int, env: dict[str, str]) -> None:
    proc = run_mpi(n, "reduce_bits", env={"PYMCOLL_TIMEOUT": "60", **env}, timeout=240)
    assert "reduce bits ok" in proc.stdout, proc.stdout[-3000:]
