"""Every bad input of each of the 16 collectives, in blocking, I- and _init
form, raises at the call with mpi4py's exception class and a message naming
the argument, and a correct call of the same collective then works."""

from __future__ import annotations

import pytest

from conftest import run_mpi

CASES = [(1, None), (2, None), (3, None), (4, None), (4, 2)]


@pytest.mark.parametrize("n,node_size", CASES, ids=[f"{n}-ranks" + (f"-nodes-of-{s}" if s else "")
                                                    for n, s in CASES])
def test_bad_input_collectives(n: int, node_size: int | None) -> None:
    env = {"PYMCOLL_NODE_SIZE": str(node_size) if node_size else None}
    proc = run_mpi(n, "bad_input_collectives", env=env, timeout=120)
    assert proc.stdout.count("bad input collectives ok") == n, proc.stdout[-4000:]
