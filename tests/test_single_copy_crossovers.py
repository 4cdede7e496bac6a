"""Where collectives switch from copy-in/copy-out to single copy within a node."""

from __future__ import annotations

import pytest

from pymcoll import config


@pytest.mark.parametrize("n", [2, 3], ids=["np2", "np3"])
def test_every_collective_on_both_sides_of_its_crossover(n: int, mpirun) -> None:
    # The table's crossovers, without the per-launch trials (test_path_trials.py) choosing instead.
    proc = mpirun(n, "single_copy_crossovers", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_PATH_TRIALS": "0"},
                  timeout=600)
    assert " 0 failed" in proc.stdout, proc.stdout


def test_a_set_crossover_applies_to_every_collective(mpirun) -> None:
    # 64 KiB for all: the program's sizes straddle it instead of the measured table.
    proc = mpirun(2, "single_copy_crossovers", env={"PYMCOLL_TIMEOUT": "120", "PYMCOLL_CMA_MIN": "64K"},
                  timeout=300)
    assert " 0 failed" in proc.stdout, proc.stdout


def test_table_values() -> None:
    from pymcoll import single_copy_min
    from pymcoll.tuning import single_copy_table

    # Between 2 ranks a Bcast's root and receiver each copy half.
    assert single_copy_min("Bcast", 2) == 4 << 20 and single_copy_min("Bcast", 3) == 16 << 20
    # Gather's and Gatherv's senders store side by side into the root's buffer.
    for name in ("Gather", "Gatherv"):
        assert single_copy_min(name, 2) == single_copy_min(name, 4) == 2 << 20
        assert single_copy_min(name, 8) == 512 << 10
    # The Scatter root serves every reader: the crossover falls with their square.
    assert single_copy_min("Scatter", 2) == 4 << 20
    assert single_copy_min("Scatter", 3) == 1 << 20
    assert single_copy_min("Scatter", 4) < single_copy_min("Scatter", 3)
    assert single_copy_min("Scatter", 4) % 4096 == 0
    for name in ("Barrier", "Allreduce", "Reduce"):
        assert single_copy_min(name, 4) == 0
    # An Alltoall's cells carry L^2 blocks: its crossover falls with the square of the ranks, capped.
    assert single_copy_min("Alltoall", 2) == single_copy_min("Alltoall", 4) == 1 << 20
    assert single_copy_min("Alltoall", 5) == ((16 << 20) // 25) & ~4095
    assert single_copy_min("Alltoall", 8) == 256 << 10
    assert single_copy_min("Alltoallv", 5) % 4096 == 0 and single_copy_min("Alltoallv", 64) > 0
    # A Scan's single copy reads L^2/2 inputs: the cells win from 4 ranks.
    assert single_copy_min("Scan", 2) == 16 << 20 and single_copy_min("Exscan", 2) == 8 << 20
    assert single_copy_min("Scan", 3) == single_copy_min("Exscan", 3) == 32 << 20
    assert single_copy_min("Scan", 4) == single_copy_min("Exscan", 8) == 0
    table = single_copy_table(4)
    assert "Allreduce" not in table and "Scan" not in table and table["Alltoallv"] == 1 << 20


def test_bad_arguments_name_themselves() -> None:
    from pymcoll import single_copy_min

    with pytest.raises(ValueError, match="collective='Bcst'"):
        single_copy_min("Bcst", 2)
    with pytest.raises(ValueError, match="local_ranks=0"):
        single_copy_min("Bcast", 0)


def test_option_parses_auto_and_sizes(monkeypatch) -> None:
    monkeypatch.delenv("PYMCOLL_CMA_MIN", raising=False)
    assert config.value("PYMCOLL_CMA_MIN") == "auto"
    monkeypatch.setenv("PYMCOLL_CMA_MIN", "AUTO")
    assert config.value("PYMCOLL_CMA_MIN") == "auto"
    monkeypatch.setenv("PYMCOLL_CMA_MIN", "2M")
    assert config.value("PYMCOLL_CMA_MIN") == 2 << 20
    monkeypatch.setenv("PYMCOLL_CMA_MIN", "lots")
    with pytest.raises(ValueError, match="PYMCOLL_CMA_MIN='lots'"):
        config.value("PYMCOLL_CMA_MIN")


def test_info_lists_a_set_crossover_for_every_collective_with_single_copy(monkeypatch) -> None:
    from pymcoll.cli.info import _single_copy_from

    monkeypatch.delenv("PYMCOLL_CMA_MIN", raising=False)
    measured = _single_copy_from(4)
    assert "Scan" not in measured and measured["Gather"] == 2 << 20
    monkeypatch.setenv("PYMCOLL_CMA_MIN", "64K")
    assert _single_copy_from(4) == {c: 64 << 10 for c in _single_copy_from(2)} and "Scan" in _single_copy_from(4)
    assert _single_copy_from(1) == {}
