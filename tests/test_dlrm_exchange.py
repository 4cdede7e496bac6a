"""The sharded embedding exchange and DLRM across ranks: equal to a
single-process torch model over training steps for every sharding type and
a mix, at 1 to 4 ranks; bad input stops every rank with a clear error."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

# Per rank count, the cases one launch runs (KINDS:POOLING:OPTIMIZER[:FLAGS]): every sharding type
# and the mix at 2, 3 and 4 ranks, both poolings and optimizers, weights, ragged batches (a rank with
# none at 4).
CASES = {
    1: ["mix:sum:sgd:weights"],
    2: ["table:sum:sgd", "row:mean:rowwise_adagrad:ragged", "column:sum:rowwise_adagrad:weights", "mix:mean:sgd"],
    3: ["table:mean:rowwise_adagrad:ragged", "row:sum:sgd:weights,ragged", "column:mean:sgd",
        "mix:sum:rowwise_adagrad:weights,ragged"],
    4: ["table:sum:rowwise_adagrad:weights", "row:mean:sgd:ragged", "column:sum:sgd:ragged",
        "mix:mean:rowwise_adagrad:ragged"],
}


@pytest.mark.parametrize("n", sorted(CASES), ids=lambda n: f"{n}ranks")
def test_sharded_dlrm_equals_single_process_torch(mpirun, n: int) -> None:
    # One launch per rank count (torch's import is about half of a case's time); each case prints its line.
    proc = mpirun(n, "dlrm_equivalence", *CASES[n], timeout=300)
    for case in CASES[n]:
        kinds, pooling, optimizer, *flags = case.split(":")
        flags = flags[0].split(",") if flags else []
        line = (f"equivalent over 10 steps at {n} ranks ({kinds}, {pooling}, {optimizer}, "
                f"weights={'weights' in flags}, ragged={'ragged' in flags})")
        assert line in proc.stdout, f"{case}: no '{line}' in\n{proc.stdout[-3000:]}"


def test_codec_path_and_link_limiter_keep_results(mpirun) -> None:
    """The identity codec (sizes exchanged, then bytes, both directions) and a
    paced link change nothing in the results."""
    proc = mpirun(3, "dlrm_equivalence", "mix:mean:sgd:ragged", "--codec", "--link-gbps", "2", timeout=240)
    assert "equivalent over 10 steps at 3 ranks" in proc.stdout


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_input_stops_every_rank_with_an_error(mpirun, n: int) -> None:
    proc = mpirun(n, "dlrm_bad_input", timeout=240)
    assert f"bad input rejected on every rank at {n} ranks" in proc.stdout
    assert "lies outside its table" in proc.stdout
