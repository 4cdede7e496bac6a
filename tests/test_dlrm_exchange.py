"""The sharded embedding exchange and DLRM across ranks: equal to a
single-process torch model over training steps for every sharding type and
a mix, at 1 to 4 ranks; bad input stops every rank with a clear error."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

# (ranks, kinds, pooling, optimizer, extra flags): every sharding type and the mix at 2, 3 and 4
# ranks, both poolings and optimizers, weights, ragged batches (a rank with none at 4).
CASES = [
    (1, "mix", "sum", "sgd", ["--weights"]),
    (2, "table", "sum", "sgd", []),
    (2, "row", "mean", "rowwise_adagrad", ["--ragged"]),
    (2, "column", "sum", "rowwise_adagrad", ["--weights"]),
    (2, "mix", "mean", "sgd", []),
    (3, "table", "mean", "rowwise_adagrad", ["--ragged"]),
    (3, "row", "sum", "sgd", ["--weights", "--ragged"]),
    (3, "column", "mean", "sgd", []),
    (3, "mix", "sum", "rowwise_adagrad", ["--weights", "--ragged"]),
    (4, "table", "sum", "rowwise_adagrad", ["--weights"]),
    (4, "row", "mean", "sgd", ["--ragged"]),
    (4, "column", "sum", "sgd", ["--ragged"]),
    (4, "mix", "mean", "rowwise_adagrad", ["--ragged"]),
]


@pytest.mark.parametrize("n,kinds,pooling,optimizer,extra", CASES,
                         ids=[f"{c[0]}ranks-{c[1]}-{c[2]}-{c[3]}{''.join(c[4])}" for c in CASES])
def test_sharded_dlrm_equals_single_process_torch(mpirun, n: int, kinds: str, pooling: str, optimizer: str,
                                                  extra: list[str]) -> None:
    proc = mpirun(n, "dlrm_equivalence", kinds, pooling, optimizer, *extra, timeout=240)
    assert f"equivalent over 10 steps at {n} ranks" in proc.stdout


def test_codec_path_and_link_limiter_keep_results(mpirun) -> None:
    """The identity codec (sizes exchanged, then bytes, both directions) and a
    paced link change nothing in the results."""
    proc = mpirun(3, "dlrm_equivalence", "mix", "mean", "sgd", "--codec", "--ragged", "--link-gbps", "2",
                  timeout=240)
    assert "equivalent over 10 steps at 3 ranks" in proc.stdout


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_input_stops_every_rank_with_an_error(mpirun, n: int) -> None:
    proc = mpirun(n, "dlrm_bad_input", timeout=240)
    assert f"bad input rejected on every rank at {n} ranks" in proc.stdout
    assert "lies outside its table" in proc.stdout
