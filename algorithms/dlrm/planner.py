"""Placement of embedding tables over ranks (model parallelism).

Three ways to shard a table:

* ``"table"``: the whole table on one rank;
* ``"row"``: its rows split into contiguous blocks, one per rank; every
  rank pools the ids that fall in its block and the partial sums are added
  (mean pooling divides by the sample's full count afterwards);
* ``"column"``: its embedding dimension split into contiguous blocks, one
  per rank (at most ``dim`` ranks); the pooled blocks are concatenated.

The automatic plan shards row-wise the tables too large for one rank's fair
share (``row_wise_fraction`` of all rows, default one rank's worth) and
places every other table whole, largest first, on the rank with the fewest
bytes (longest-processing-time greedy; ties go to the lowest rank), so that
every rank computes the same plan from the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

KINDS = ("table", "row", "column")


@dataclass(frozen=True)
class Shard:
    """Rows [row_start, row_end) and columns [col_start, col_end) of a table, held by `rank`."""

    table: int
    rank: int
    row_start: int
    row_end: int
    col_start: int
    col_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start

    @property
    def cols(self) -> int:
        return self.col_end - self.col_start


@dataclass(frozen=True)
class TablePlan:
    """How one table is sharded: its kind and its shards (in rank order)."""

    table: int
    rows: int
    kind: str
    shards: tuple[Shard, ...]

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(s.rank for s in self.shards)


@dataclass
class ShardingPlan:
    """Where every table (and part of one) lives."""

    world_size: int
    dim: int
    tables: list[TablePlan] = field(default_factory=list)

    def shards_on(self, rank: int) -> list[Shard]:
        """The shards rank holds, in table order."""
        return [s for t in self.tables for s in t.shards if s.rank == rank]

    def bytes_per_rank(self, element_size: int = 4) -> list[int]:
        """Embedding bytes each rank holds."""
        out = [0] * self.world_size
        for t in self.tables:
            for s in t.shards:
                out[s.rank] += s.rows * s.cols * element_size
        return out

    def describe(self) -> str:
        """One line per table: kind and ranks."""
        return "\n".join(f"table {t.table:2d} ({t.rows} rows): {t.kind}-wise on rank(s) "
                         f"{', '.join(map(str, t.ranks))}" for t in self.tables)


def _blocks(total: int, parts: int) -> list[tuple[int, int]]:
    """`total` split into `parts` contiguous blocks, the first total % parts one longer."""
    base, extra = divmod(total, parts)
    out, start = [], 0
    for k in range(parts):
        end = start + base + (1 if k < extra else 0)
        out.append((start, end))
        start = end
    return out


def plan_tables(table_sizes: Sequence[int], dim: int, world_size: int, *,
                kinds: Union[str, Sequence[str]] = "auto", row_wise_fraction: Optional[float] = None) -> ShardingPlan:
    """Plan the placement of tables of `table_sizes` rows and `dim` columns over `world_size` ranks.

    kinds: "auto", one of "table", "row", "column" for every table, or one
    entry per table ("auto" allowed per entry). row_wise_fraction: in the
    automatic choice, a table with more than this fraction of all rows is
    sharded row-wise (default 1 / world_size).
    """
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: use 1 or more ranks")
    if dim < 1:
        raise ValueError(f"dim={dim}: the embedding dimension must be at least 1")
    sizes = [int(s) for s in table_sizes]
    for i, s in enumerate(sizes):
        if s < 1:
            raise ValueError(f"table_sizes[{i}]={s}: a table needs at least one row")
    per = [kinds] * len(sizes) if isinstance(kinds, str) else list(kinds)
    if len(per) != len(sizes):
        raise ValueError(f"kinds has {len(per)} entries for {len(sizes)} tables")
    for i, k in enumerate(per):
        if k not in KINDS + ("auto",):
            raise ValueError(f"kinds[{i}]={k!r}: use one of {', '.join(KINDS)} or 'auto'")
    fraction = 1.0 / world_size if row_wise_fraction is None else float(row_wise_fraction)
    if not 0 < fraction <= 1:
        raise ValueError(f"row_wise_fraction={row_wise_fraction}: a fraction in (0, 1]")
    total_rows = sum(sizes)
    resolved = []
    for s, k in zip(sizes, per, strict=True):
        if k == "auto":
            k = "row" if world_size > 1 and s > fraction * total_rows and s >= world_size else "table"
        resolved.append(k)

    load = [0] * world_size
    plans: dict[int, TablePlan] = {}
    for t, (s, k) in enumerate(zip(sizes, resolved, strict=True)):
        if k == "row":
            parts = min(world_size, s)
            shards = tuple(Shard(t, r, a, b, 0, dim) for r, (a, b) in enumerate(_blocks(s, parts)))
        elif k == "column":
            parts = min(world_size, dim)
            shards = tuple(Shard(t, r, 0, s, a, b) for r, (a, b) in enumerate(_blocks(dim, parts)))
        else:
            continue
        for sh in shards:
            load[sh.rank] += sh.rows * sh.cols
        plans[t] = TablePlan(t, s, k, shards)
    # Whole tables, largest first, each to the least loaded rank.
    for t in sorted((t for t, k in enumerate(resolved) if k == "table"), key=lambda t: (-sizes[t], t)):
        r = min(range(world_size), key=lambda r: (load[r], r))
        load[r] += sizes[t] * dim
        plans[t] = TablePlan(t, sizes[t], "table", (Shard(t, r, 0, sizes[t], 0, dim),))
    return ShardingPlan(world_size, dim, [plans[t] for t in range(len(sizes))])
