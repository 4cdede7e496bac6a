"""DLRM on pymcoll: Criteo-schema data, sharded embedding tables and their
all-to-all exchange (imported as ``pymcoll.algorithms.dlrm``). The table
shards (``pymcoll.algorithms.dlrm.tables``) need torch and are imported on
their own."""

from .data import (CRITEO_KAGGLE_CARDINALITIES, NUM_DENSE, NUM_SPARSE, CriteoBatch, SparseFeatures,
                   SyntheticCriteo, cap_table_sizes, read_criteo)
from .planner import Shard, ShardingPlan, TablePlan, plan_tables

__all__ = ["CRITEO_KAGGLE_CARDINALITIES", "NUM_DENSE", "NUM_SPARSE", "CriteoBatch", "SparseFeatures",
           "Shard", "ShardingPlan", "SyntheticCriteo", "TablePlan", "cap_table_sizes", "plan_tables", "read_criteo"]
