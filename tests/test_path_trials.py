"""Per-launch choice between copy in/copy out and single copy: on one node
the first blocking calls of each collective and size class try both paths,
the ranks agree on the faster, and results are right on either path."""

from __future__ import annotations

import pytest

from conftest import run_mpi


@pytest.mark.parametrize("n", [2, 3, 4])
def test_trials_choose_alike_and_results_hold(n: int) -> None:
    proc = run_mpi(n, "path_trials", "on", env={"PYMCOLL_TIMEOUT": "60"}, timeout=300)
    assert "path trials ok" in proc.stdout, proc.stdout


@pytest.mark.parametrize("n,env", [
    (1, {}),  # a node of one rank copies locally
    (2, {"PYMCOLL_PATH_TRIALS": "0"}),
    (2, {"PYMCOLL_CMA_MIN": "64K"}),  # a fixed crossover is the user's choice
    (2, {"PYMCOLL_COPY": "cico"}),
    (4, {"PYMCOLL_NODE_SIZE": "2"}),  # several nodes: the table (a node step is timed with the rest)
], ids=["one-rank", "switched-off", "cma-min-set", "copy-forced", "two-nodes"])
def test_no_trials_where_the_path_is_fixed(n: int, env: dict[str, str]) -> None:
    proc = run_mpi(n, "path_trials", "off", env=dict(env, PYMCOLL_TIMEOUT="60"), timeout=300)
    assert "path trials ok" in proc.stdout, proc.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_persistent_requests_have_trials(n: int) -> None:
    proc = run_mpi(n, "path_trials", "persistent", env={"PYMCOLL_TIMEOUT": "60"}, timeout=120)
    assert "path trials ok" in proc.stdout, proc.stdout


def test_a_path_that_slows_down_is_tried_again() -> None:
    proc = run_mpi(2, "path_trials", "retrial", env={"PYMCOLL_TIMEOUT": "60"}, timeout=120)
    assert "path trials ok" in proc.stdout, proc.stdout


def test_ranks_that_disagree_are_refused_at_creation() -> None:
    proc = run_mpi(2, "path_trials", "mismatch", env={"PYMCOLL_TIMEOUT": "60"}, timeout=120)
    assert "path trials ok" in proc.stdout, proc.stdout


def test_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from pymcoll import config

    monkeypatch.setenv("PYMCOLL_PATH_TRIALS", "sometimes")
    with pytest.raises(ValueError, match="PYMCOLL_PATH_TRIALS"):
        config.value("PYMCOLL_PATH_TRIALS")
