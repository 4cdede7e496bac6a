"""Load balancing of variable-length samples (imported as ``pymcoll.algorithms.balance``).

Sequence-recommendation samples differ in length, and their cost grows
faster than linearly with it, so an equal number of samples per rank leaves
ranks waiting for the one with the longest sequences. This package gives
the pieces to split a global batch by cost instead, the same way on every
rank, without communication:

* :mod:`.lengths`: real (MovieLens-100K) and synthetic length distributions
  and batches drawn from them;
* :mod:`.cost`: the per-sample cost model ``a L + b L^2 + c`` and its fit
  from measured step times;
* :mod:`.partition`: the partition of a batch's costs over ranks (LPT,
  Karmarkar-Karp, refinement), its loads, imbalance and lower bound.

Typical use, on every rank::

    costs = CostModel.quadratic()(lengths_of_global_batch)
    mine = partition(costs, world_size)[rank]
"""

from .cost import CostModel
from .lengths import load_lengths, sample_batch, shared_data_dir, synthetic_lengths
from .partition import METHODS, imbalance, loads, lower_bound, partition

__all__ = ["METHODS", "CostModel", "imbalance", "load_lengths", "loads", "lower_bound", "partition",
           "sample_batch", "shared_data_dir", "synthetic_lengths"]
