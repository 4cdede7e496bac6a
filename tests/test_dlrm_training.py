"""examples/dlrm_train.py: it learns the synthetic labels (held-out AUC above
0.7), a checkpoint resumes into the identical continuation, and a checkpoint
loads at another number of ranks with every weight in place."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS_DIR, mpi_env, mpiexec_command

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dlrm_train.py"
SMALL = ["--cap", "2000", "--batch-size", "256", "--eval-samples", "2048", "--quiet"]


def train(n: int, *args: str, timeout: float = 300) -> str:
    cmd = mpiexec_command(n) + [sys.executable, "-P", str(EXAMPLE), *args]
    try:
        proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s: {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def losses(out: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^step (\d+) loss (\S+)$", out, re.M)}


def test_training_reaches_a_heldout_auc_above_0_7() -> None:
    out = train(2, "--steps", "150", "--eval-samples", "16384", "--quiet")
    auc = float(re.search(r"AUC (\d\.\d+)", out).group(1))
    assert auc >= 0.7, out
    for part in ("splits", "lengths", "ids", "pooled", "pooled_grad", "dense_allred"):
        assert re.search(rf"^\s+{part}\s+\d+\.\d+", out, re.M), out
    assert re.search(r"\d+\.\d+ steps/s", out)


def test_resume_continues_identically(tmp_path: Path) -> None:
    whole = train(2, "--steps", "12", "--print-losses", "--print-digest", *SMALL)
    first = train(2, "--steps", "6", "--print-losses", "--checkpoint-dir", str(tmp_path), "--checkpoint-every", "2",
                  *SMALL)
    assert (tmp_path / "latest").read_text().strip() == "step-00000006"
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000004", "step-00000006"]  # keep=2
    rest = train(2, "--steps", "12", "--print-losses", "--print-digest", "--checkpoint-dir", str(tmp_path),
                 "--resume", *SMALL)
    assert "resumed from" in rest and "at step 6" in rest
    full, a, b = losses(whole), losses(first), losses(rest)
    assert sorted(a) == list(range(1, 7)) and sorted(b) == list(range(7, 13))
    assert {**a, **b} == full  # bit-identical losses, printed to 9 decimals
    digest = re.search(r"weights digest (\w+)", whole).group(1)
    assert re.search(r"weights digest (\w+)", rest).group(1) == digest


def test_checkpoint_loads_at_another_number_of_ranks(tmp_path: Path) -> None:
    saved = train(2, "--steps", "4", "--print-digest", "--checkpoint-dir", str(tmp_path), "--sharding", "row",
                  *SMALL)
    # Resuming at the last step trains no further: the weights are the saved ones, resharded over 3 ranks.
    loaded = train(3, "--steps", "4", "--print-digest", "--checkpoint-dir", str(tmp_path), "--resume",
                   "--sharding", "column", *SMALL)
    digest = re.search(r"weights digest (\w+)", saved).group(1)
    assert re.search(r"weights digest (\w+)", loaded).group(1) == digest


def test_every_transport_trains_alike() -> None:
    """The exchange on pymcoll.Comm, on torch.distributed gloo and on the "pymcoll" torch backend:
    at 2 ranks every sum has two terms, so the losses agree to the last bit."""
    runs = {t: losses(train(2, "--steps", "3", "--print-losses", "--transport", t, *SMALL))
            for t in ("pymcoll", "gloo", "torch-pymcoll")}
    assert len(runs["pymcoll"]) == 3
    assert runs["gloo"] == runs["pymcoll"] and runs["torch-pymcoll"] == runs["pymcoll"]


def test_records_a_tiered_cache_trace(tmp_path: Path) -> None:
    import numpy as np

    from pymcoll.algorithms.dlrm.data import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo, cap_table_sizes
    from pymcoll.algorithms.tiered_cache import Trace, simulate

    path = tmp_path / "ids.npz"
    out = train(2, "--steps", "5", "--record-trace", str(path), *SMALL)
    assert f"over 5 steps in {path}" in out
    trace = Trace.load(path)
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, 2000)
    table = int(np.argmax(sizes))
    data = SyntheticCriteo(sizes, seed=0)
    want = np.concatenate([data.batch(step, 256).sparse.feature(table)[1] for step in range(5)])
    assert trace.n_rows == sizes[table] and trace.batch_size == 256
    np.testing.assert_array_equal(trace.ids, want)  # the global batch's ids, step by step
    assert 0.0 < simulate(trace, 0.05, "lru").hit_rate < 1.0
