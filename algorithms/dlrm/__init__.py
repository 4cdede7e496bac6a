"""DLRM on pymcoll (imported as ``pymcoll.algorithms.dlrm``).

Without torch: Criteo-schema data (:mod:`.data`), the placement of tables
over ranks (:mod:`.planner`), metrics (:mod:`.metrics`), the emulated link
(:mod:`.link`). With torch, imported on their own: the shards a rank owns
(:mod:`.tables`), the all-to-all exchange (:mod:`.exchange`, on a
:mod:`.transport`, with a :mod:`.block_codec` hook), the sharded
embedding-bag collection (:mod:`.embedding`), the model (:mod:`.model`) and
its checkpoints (:mod:`.checkpoint`).
"""

from .data import (CRITEO_KAGGLE_CARDINALITIES, NUM_DENSE, NUM_SPARSE, CriteoBatch, SparseFeatures,
                   SyntheticCriteo, cap_table_sizes, read_criteo)
from .planner import Shard, ShardingPlan, TablePlan, plan_tables

__all__ = ["CRITEO_KAGGLE_CARDINALITIES", "NUM_DENSE", "NUM_SPARSE", "CriteoBatch", "SparseFeatures",
           "Shard", "ShardingPlan", "SyntheticCriteo", "TablePlan", "cap_table_sizes", "plan_tables", "read_criteo"]
