"""Property tests of every collective (blocking, non-blocking, persistent)
against the pymcoll.testing oracle at 1-8 ranks: one node, virtual nodes
(block and cyclic, even and uneven, nodes of one rank), the lanes across
nodes with every switch point forced and a lane cap, the single-leader
variant, a small segment that makes messages wrap the cells, no segment at
all, and PYMCOLL_CHECK on."""

from __future__ import annotations

import os

import pytest

from conftest import CI, run_mpi

# Drawn examples per collective, form and layout. CI draws few: every configuration still runs
# every collective's coverage cases (a small case per dtype, the ops in turn) in every form and layout,
# and the drawn sizes still lean on the switch points. PMC_TEST_EXAMPLES sets it (CI's sanitizer
# step, where every call runs several times slower, draws 2).
EXAMPLES = os.environ.get("PMC_TEST_EXAMPLES") or ("3" if CI else "25")
# Past 4 ranks on the 2-core CI machine each example is oversubscribed several times over.
EXAMPLES_MANY_RANKS = "2" if CI else EXAMPLES
# There CI also runs the blocking form only: non-blocking and persistent calls run the same
# algorithm steps (one pmc_op each), and their request machinery is checked in every form at
# 1-4 ranks, on one node and across virtual nodes (np4-node_size-2).
FORMS_MANY_RANKS = "blocking" if CI else "blocking,nonblocking,persistent"

CONFIGS = [
    (1, {}),
    (2, {}),
    (3, {}),
    (4, {}),
    (5, {}),
    (4, {"PYMCOLL_NODE_SIZE": "2"}),
    (5, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "cyclic"}),
    (5, {"PYMCOLL_NODE_SIZE": "3"}),
    (3, {"PYMCOLL_SHM_SIZE": "8K", "PYMCOLL_CHUNK_SIZE": "1K"}),
    (5, {"PYMCOLL_SHM_SIZE": "16K", "PYMCOLL_CHUNK_SIZE": "2K"}),
    (3, {"PYMCOLL_SHM": "off"}),
    (3, {"PYMCOLL_CHECK": "1", "PYMCOLL_NODE_SIZE": "2"}),
    # Every data path forced where it can carry the call.
    (3, {"PYMCOLL_COPY": "inline"}),
    (4, {"PYMCOLL_COPY": "cico"}),
    # Every cell store a string move, whatever its length and alignment.
    (3, {"PYMCOLL_COPY": "cico", "PYMCOLL_CELL_MOVSB_MIN": "1"}),
    (4, {"PYMCOLL_COPY": "cma"}),
    # 2 ranks have a core each: a Bcast's pair splits its copy. Streaming stores from 4 KiB, so
    # the drawn sizes take them (by default they start at several MiB).
    (2, {"PYMCOLL_COPY": "cma", "PYMCOLL_STREAM_MIN": "4K"}),
    (3, {"PYMCOLL_COPY": "cma", "PYMCOLL_SHM_SIZE": "16K", "PYMCOLL_CHUNK_SIZE": "1K"}),
    # Across virtual nodes on the lanes: 3+3+2, 4 x 2, 4+2, nodes of one rank,
    # ranks dealt round-robin; rings, sliced forms and Alltoall's rank-to-rank
    # pairs forced; one lane; the single leader; a node buffer too small for
    # the exchanges and trees, with every Alltoall pair through the lanes in
    # chunks.
    (8, {"PYMCOLL_NODE_SIZE": "3"}),
    (8, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_LANES_SMALL_MAX": "1", "PYMCOLL_LANES_BCAST_TREE_MAX": "1",
         "PYMCOLL_LANES_DIRECT_MIN": "1"}),
    (6, {"PYMCOLL_NODE_SIZE": "4", "PYMCOLL_COPY": "cma"}),
    (5, {"PYMCOLL_NODE_SIZE": "1"}),
    (7, {"PYMCOLL_NODE_SIZE": "3", "PYMCOLL_NODE_LAYOUT": "cyclic", "PYMCOLL_LANES": "1"}),
    (6, {"PYMCOLL_NODE_SIZE": "3", "PYMCOLL_SHM_SIZE": "16K", "PYMCOLL_CHUNK_SIZE": "2K",
         "PYMCOLL_LANES_DIRECT_MIN": "1G"}),
    (6, {"PYMCOLL_NODE_SIZE": "2", **{f"PYMCOLL_{c}_ALGORITHM": "leader"
                                      for c in ("BCAST", "ALLGATHER", "ALLREDUCE", "REDUCE", "SCATTER",
                                                "GATHER", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK",
                                                "ALLTOALL", "ALLTOALLV")}}),
]


def _id(cfg: tuple) -> str:
    n, env = cfg
    return f"np{n}-" + ("-".join(f"{k[8:].lower()}-{v}" for k, v in env.items()) or "default")


# Left to full runs: each has a sibling in CI with its layout (one node of 5 ranks: the small
# segment at 5; uneven nodes of 3: 8 ranks on nodes of 3; one node of 3: 3 ranks with each path
# forced; an 8 KiB segment: 16 KiB at 3 and 5 ranks).
OUTSIDE_CI = {"np5-default", "np5-node_size-3", "np3-default", "np3-shm_size-8K-chunk_size-1K"}
# CI runs these in its sanitizer step (.ci/run) only, against the sanitizer build.
SANITIZER_STEP = {"np3-copy-inline", "np3-check-1-node_size-2", "np3-copy-cma-shm_size-16K-chunk_size-1K"}


def _params(configs: list[tuple]) -> list:
    def marks(cid: str) -> list:
        if cid in OUTSIDE_CI:
            return [pytest.mark.skipif(CI, reason="runs outside CI")]
        if cid in SANITIZER_STEP:
            sanitized = "libasan" in os.environ.get("LD_PRELOAD", "")
            return [pytest.mark.skipif(CI and not sanitized, reason="CI runs it in its sanitizer step")]
        return []
    return [pytest.param(c, id=_id(c), marks=marks(_id(c))) for c in configs]


@pytest.mark.parametrize("cfg", _params(CONFIGS))
def test_every_collective_every_form(cfg: tuple) -> None:
    n, env = cfg
    proc = run_mpi(n, "prop_collectives", "--examples", EXAMPLES if n <= 4 else EXAMPLES_MANY_RANKS,
                   "--forms", "blocking,nonblocking,persistent" if n <= 4 else FORMS_MANY_RANKS,
                   env={"PYMCOLL_TIMEOUT": "60", **env}, timeout=600)
    assert "OK" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("n", [2, 4], ids=lambda n: f"np{n}")
def test_direct_path_with_heap_buffers(n: int) -> None:
    # Buffers from pymcoll.alloc(): peers copy straight from the shared heap. The
    # heap holds a root's send and receive buffers at the largest size (4 MiB x 5 ranks).
    proc = run_mpi(n, "prop_collectives", "--examples", EXAMPLES, "--heap", "--forms", "blocking",
                   env={"PYMCOLL_TIMEOUT": "60", "PYMCOLL_COPY": "direct", "PYMCOLL_HEAP_SIZE": "256M"},
                   timeout=600)
    assert "OK" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("node_size", [3, 2], ids=lambda k: f"nodes-of-{k}")
def test_lanes_carry_traffic_together(node_size: int) -> None:
    # 8 ranks as 3+3+2 or 4 x 2: every lane sends its share of the rings, the
    # ranks past the lanes send nothing, the single leader leaves lanes idle.
    proc = run_mpi(8, "lane_traffic", env={"PYMCOLL_TIMEOUT": "60", "PYMCOLL_NODE_SIZE": str(node_size)},
                   timeout=300)
    assert "OK lanes carry traffic" in proc.stdout, proc.stdout[-2000:]


def test_progress_thread_runs_requests() -> None:
    proc = run_mpi(3, "prop_collectives", "--examples", "4", "--forms", "nonblocking,persistent",
                   env={"PYMCOLL_TIMEOUT": "60", "PYMCOLL_PROGRESS_THREAD": "1"}, timeout=600)
    assert "OK" in proc.stdout, proc.stdout[-2000:]
