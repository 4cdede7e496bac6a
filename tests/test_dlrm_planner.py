"""The placement of embedding tables over ranks: every row and column of every
table held exactly once, the automatic choice, balance, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymcoll.algorithms.dlrm import CRITEO_KAGGLE_CARDINALITIES, cap_table_sizes
from pymcoll.algorithms.dlrm.planner import KINDS, plan_tables


def coverage(plan, sizes) -> None:
    for t, rows in enumerate(sizes):
        held = np.zeros((rows, plan.dim), np.int64)
        for s in plan.tables[t].shards:
            assert s.table == t and 0 <= s.rank < plan.world_size
            held[s.row_start:s.row_end, s.col_start:s.col_end] += 1
        assert (held == 1).all(), (t, plan.tables[t])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=8), dim=st.integers(1, 9),
       world=st.integers(1, 6), data=st.data())
def test_every_cell_is_held_exactly_once(sizes, dim, world, data) -> None:
    kinds = data.draw(st.one_of(st.just("auto"), st.sampled_from(KINDS),
                                st.lists(st.sampled_from(KINDS + ("auto",)), min_size=len(sizes),
                                         max_size=len(sizes))))
    plan = plan_tables(sizes, dim, world, kinds=kinds)
    coverage(plan, sizes)
    assert sum(plan.bytes_per_rank(1)) == sum(sizes) * dim
    assert plan_tables(sizes, dim, world, kinds=kinds) == plan  # every rank computes the same plan


def test_automatic_plan_on_criteo_tables() -> None:
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, 200_000)
    plan = plan_tables(sizes, 16, 4)
    coverage(plan, sizes)
    kinds = {t.kind for t in plan.tables}
    assert kinds == {"table"}  # no table holds more than a quarter of all rows at this cap
    plan = plan_tables(cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, None), 16, 4)
    row_wise = [t.table for t in plan.tables if t.kind == "row"]
    assert row_wise == [2]  # 10M of 33.8M rows: more than a rank's share
    load = plan.bytes_per_rank()
    assert max(load) <= 1.3 * (sum(load) / 4)
    assert "row-wise on rank(s) 0, 1, 2, 3" in plan.describe()


def test_column_wise_uses_at_most_dim_ranks() -> None:
    plan = plan_tables([10], 3, 5, kinds="column")
    assert [s.cols for s in plan.tables[0].shards] == [1, 1, 1]
    assert plan.shards_on(4) == []


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(ValueError, match="world_size=0"):
        plan_tables([5], 4, 0)
    with pytest.raises(ValueError, match="dim=0"):
        plan_tables([5], 0, 2)
    with pytest.raises(ValueError, match=r"table_sizes\[1\]=0"):
        plan_tables([5, 0], 4, 2)
    with pytest.raises(ValueError, match=r"kinds\[0\]='diagonal'"):
        plan_tables([5], 4, 2, kinds=["diagonal"])
    with pytest.raises(ValueError, match="2 entries for 1 tables"):
        plan_tables([5], 4, 2, kinds=["row", "row"])
    with pytest.raises(ValueError, match="row_wise_fraction"):
        plan_tables([5], 4, 2, row_wise_fraction=0)
