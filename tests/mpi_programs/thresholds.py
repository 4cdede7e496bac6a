"""The block sizes where a pymcoll collective changes its data path: the
property programs' size strategies always offer each one and its neighbours."""

from __future__ import annotations

import pymcoll
from pymcoll import _native, config
from pymcoll.tuning import single_copy_min_now


def single_copy_edges(layout: pymcoll.Layout) -> set[int]:
    """Blocks from which collectives switch to single copy: PYMCOLL_CMA_MIN
    when set, else every collective's own default at every node size present."""
    return {single_copy_min_now(coll, local)
            for coll in config.COLLECTIVES
            for local in range(max(layout.min_local, 2), layout.max_local + 1)} - {0}


def thresholds(layout: pymcoll.Layout) -> list[int]:
    """Block sizes where the data path changes: chunk and cell boundaries,
    computed for every node size present so that all ranks agree, and the
    tuning table's switch points (inline, single copy, whole-vector
    reductions)."""
    edges = {layout.chunk_bytes, layout.data_bytes, 2 * layout.chunk_bytes}
    # The broadcast's page-sized cells: where they start and end, and a message of two cells.
    lib = _native.lib
    edges.update({lib.PMC_BCAST_PAGE_CELLS_MIN, lib.PMC_BCAST_PAGE_CELLS_MAX, lib.PMC_BCAST_PAGE_CELL})
    for local in range(layout.min_local, layout.max_local + 1):
        region = (layout.data_bytes // local) // 64 * 64
        edges.add(min(region // 2 // 64 * 64, 1 << 20))
    for name in ("PYMCOLL_INLINE_MAX", "PYMCOLL_REDUCE_FLAT_MAX"):
        edges.add(int(config.value(name)))
    edges.update(single_copy_edges(layout))
    if layout.nnodes > 1:
        # Across nodes: the lanes' switch from exchange to ring, by the
        # node's payload (Allgather) or the vector (Allreduce), and where the
        # exchange's slots stop fitting the node buffer.
        small = int(config.value("PYMCOLL_LANES_SMALL_MAX"))
        edges.update({small, small // layout.max_local, int(config.value("PYMCOLL_LANES_BCAST_TREE_MAX"))})
        slots = layout.max_local + 2 + 2 * (layout.lanes + 1)
        edges.add(layout.data_bytes // slots // 64 * 64)
        edges.add(layout.data_bytes // layout.size)  # Scatter/Gather's tree: all blocks in the buffer
        # Alltoall(v): the block from which node pairs go rank to rank, and
        # where a node pair's gathered message outgrows one chunk.
        edges.add(int(config.value("PYMCOLL_LANES_DIRECT_MIN")))
        chunk = layout.data_bytes // (2 * layout.lanes + 2) // 64 * 64
        edges.add(chunk // (layout.max_local * layout.max_local))
    return sorted(e for e in edges if e > 0)
