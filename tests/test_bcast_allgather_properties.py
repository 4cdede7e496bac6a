"""Property tests of Bcast and Allgather against numpy, at 1-4 ranks and
virtual node sizes 1-3, with the default segment and with a small one that
makes every message wrap the pipeline cells many times."""

from __future__ import annotations

import pytest

from conftest import CI, run_mpi

RANKS = [1, 2, 3, 4]
NODE_SIZES = [None, 1, 2, 3]
# Drawn examples per property, fewer in CI: the coverage cases still run in every configuration
# and the threshold neighbours stay among the sizes drawn.
EXAMPLES_DEFAULT_SEGMENT = "15" if CI else "80"
EXAMPLES = "12" if CI else "60"


# Bcast and Allgather also run in every layout of test_collectives_properties; CI keeps here one
# configuration per kind of layout and rank count (real node, nodes of 1, uneven and even virtual
# nodes, cyclic) and leaves the rest to full runs.
OUTSIDE_CI = {"default": {(3, 1), (4, None), (4, 1), (4, 2)}, "small": {(3, None), (4, None), (4, 2)},
              "cyclic": {(4, 2), (4, 3)}}
# Torch tensors as a form, and the float16/bfloat16 checks: in CI one configuration per kind and
# the 2-rank real node (importing torch costs each rank ~3 s of CPU, half of a 4-rank run).
TORCH_IN_CI = {"default": {(2, None), (3, 2)}, "small": {(4, 3)}, "cyclic": {(3, 2)}}


def torch_args(kind: str, n: int, node_size: int | None) -> list[str]:
    return ["--torch", "off"] if CI and (n, node_size) not in TORCH_IN_CI[kind] else []


def params(pairs: list[tuple[int, int | None]], kind: str) -> list:
    """The (ranks, node size) pairs as test parameters, those of OUTSIDE_CI[kind] skipped in CI."""
    return [pytest.param(n, k, id=f"{n}-{k}" if kind == "cyclic" else f"np{n}-node{k or 'real'}",
                         marks=[pytest.mark.skipif(CI, reason="runs outside CI")] if (n, k) in OUTSIDE_CI[kind] else [])
            for n, k in pairs]


def layouts(ranks: list[int], node_sizes: list[int | None]) -> list[tuple[int, int | None]]:
    """(ranks, virtual node size) pairs; a node size of the rank count or more makes one node of every
    rank, the layout of the real node (None), so it is left out."""
    return [(n, k) for n in ranks for k in node_sizes if k is None or k < n]


@pytest.mark.parametrize("n,node_size", params(layouts(RANKS, NODE_SIZES), "default"))
def test_properties_default_segment(n: int, node_size: int | None) -> None:
    env = {"PYMCOLL_NODE_SIZE": str(node_size) if node_size else None, "PYMCOLL_TIMEOUT": "60"}
    proc = run_mpi(n, "prop_bcast_allgather", "--examples", EXAMPLES_DEFAULT_SEGMENT,
                   *torch_args("default", n, node_size), env=env, timeout=300)
    assert "OK" in proc.stdout


@pytest.mark.parametrize("n,node_size", params([(3, 2), (4, 2), (5, 2), (4, 3)], "cyclic"))
def test_properties_cyclic_nodes(n: int, node_size: int) -> None:
    # Nodes that do not hold consecutive ranks: the leaders reorder blocks.
    env = {"PYMCOLL_NODE_SIZE": str(node_size), "PYMCOLL_NODE_LAYOUT": "cyclic", "PYMCOLL_TIMEOUT": "60"}
    proc = run_mpi(n, "prop_bcast_allgather", "--examples", EXAMPLES, *torch_args("cyclic", n, node_size), env=env,
                   timeout=300)
    assert "OK" in proc.stdout


@pytest.mark.parametrize("n,node_size", params(layouts([2, 3, 4], [None, 2, 3]), "small"))
def test_properties_small_segment(n: int, node_size: int | None) -> None:
    env = {"PYMCOLL_NODE_SIZE": str(node_size) if node_size else None, "PYMCOLL_TIMEOUT": "60",
           "PYMCOLL_SHM_SIZE": "64K", "PYMCOLL_CHUNK_SIZE": "4K"}
    proc = run_mpi(n, "prop_bcast_allgather", "--examples", EXAMPLES, *torch_args("small", n, node_size), env=env,
                   timeout=300)
    assert "OK" in proc.stdout
