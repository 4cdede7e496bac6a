"""How a communicator maps onto nodes and lanes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """What one rank sees of its communicator's nodes and lanes.

    Nodes are numbered by the order of their lowest rank; ``node_of[r]`` and
    ``local_of[r]`` give every rank's node and local rank. Lane ``k`` joins
    local rank ``k`` of every node (``lane`` is -1 for local ranks past the
    lane count).
    """

    rank: int
    size: int
    node: int
    nnodes: int
    local_rank: int
    local_size: int
    lanes: int
    lane: int
    min_local: int
    max_local: int
    node_of: tuple[int, ...]
    local_of: tuple[int, ...]
    shm_active: bool
    consecutive: bool
    segment_bytes: int
    data_bytes: int
    chunk_bytes: int
    virtual_node_size: int | None
    cma_ok: bool = False
    virtual_node_layout: str = "block"

    def node_ranks(self, node: int | None = None) -> tuple[int, ...]:
        """Ranks of `node` (this rank's node by default), in local-rank order."""
        k = self.node if node is None else node
        ranks = [r for r in range(self.size) if self.node_of[r] == k]
        return tuple(sorted(ranks, key=lambda r: self.local_of[r]))

    def describe(self) -> str:
        """One line for humans."""
        kind = "real nodes"
        if self.virtual_node_size:
            kind = f"virtual nodes of {self.virtual_node_size}"
            if self.virtual_node_layout == "cyclic":
                kind += ", ranks dealt round-robin"
        return (f"{self.size} ranks on {self.nnodes} node(s) ({kind}, {self.min_local}-{self.max_local} "
                f"ranks each), {self.lanes} lane(s); rank {self.rank} is local rank {self.local_rank} "
                f"of node {self.node}")
