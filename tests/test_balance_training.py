"""Sequence recommendation training (examples/seqrec_train.py) and its parts: synthetic
histories that do not depend on how a batch is split, the model's buckets and checks, and the
example end to end: balanced and contiguous splits, the bubble table, the overlapped exchange
giving the same weights as the inline one, and bad options named."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import CI, TESTS_DIR, mpi_env, mpiexec_command

torch = pytest.importorskip("torch")

from pymcoll.algorithms.balance.sequence_model import SequenceRecModel, buckets  # noqa: E402
from pymcoll.algorithms.balance.sequences import SyntheticSequences  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "seqrec_train.py"
# Synthetic lengths: the shared MovieLens file need not sit next to the checkout.
SMALL = ["--global-batch", "64", "--items", "5000", "--eval-samples", "256", "--quiet", "--max-length", "120",
         "--lengths", "lognormal"]


def test_samples_do_not_depend_on_the_split() -> None:
    data = SyntheticSequences(5000, seed=4)
    lengths = np.array([5, 30, 1, 12, 7])
    whole = data.batch(np.arange(10, 15), lengths)
    part = data.batch(np.array([13, 11]), lengths[[3, 1]])
    assert np.array_equal(whole.take(np.array([3, 1])).history, part.history)
    assert np.array_equal(whole.take(np.array([3, 1])).labels, part.labels)
    assert whole.history.size == lengths.sum() and len(whole) == 5
    assert 0 <= whole.history.min() and whole.history.max() < 5000 and set(np.unique(whole.labels)) <= {0.0, 1.0}
    # a history mostly comes from one cluster
    h, _, _ = data.sample(3, 400)
    assert np.bincount(data.cluster(h)).max() > 0.6 * 400
    with pytest.raises(ValueError, match="at least one item"):
        data.batch(np.array([1]), np.array([0]))
    with pytest.raises(ValueError, match="one length per sample"):
        data.batch(np.array([1, 2]), np.array([3]))
    with pytest.raises(ValueError, match="num_items"):
        SyntheticSequences(10, clusters=32)


def test_buckets_hold_one_length_class_within_the_token_budget() -> None:
    g = np.random.default_rng(1)
    lengths = np.sort(g.integers(1, 800, 300))
    got = buckets(lengths, 1024, 1.25)
    assert got[0][0] == 0 and got[-1][1] == lengths.size
    assert all(a[1] == b[0] for a, b in zip(got, got[1:], strict=False))
    for s, e in got:
        assert e - s == 1 or (e - s) * lengths[e - 1] <= 1024
        cls = np.floor(np.log(lengths[s:e]) / np.log(1.25))
        assert cls.min() == cls.max()
    assert buckets(np.zeros(0, np.int64), 10, 1.5) == []


class OneTable(torch.nn.Module):
    """Stands in for the sharded collection where no exchange is needed."""
    num_features, dim = 1, 8


def test_model_head_checks_and_shapes() -> None:
    model = SequenceRecModel(OneTable(), heads=2, ff=16, top=(8,), bucket_tokens=50)
    data = SyntheticSequences(500, seed=1)
    batch = data.batch(np.arange(6), np.array([3, 9, 1, 40, 2, 9]))
    rows = torch.randn(int(batch.lengths.sum()) + 6, 8, requires_grad=True)
    out = model.head(batch, rows)
    assert out.shape == (6,)
    out.sum().backward()
    assert rows.grad is not None and torch.isfinite(rows.grad).all()
    # a sample's logit depends on its own rows only (buckets do not mix samples)
    rows2 = rows.detach().clone()
    rows2[:3] += 1.0  # the first sample's history
    out2 = model.head(batch, rows2)
    assert not torch.allclose(out2[0], out[0]) and torch.allclose(out2[1:], out[1:].detach(), atol=1e-6)
    with pytest.raises(ValueError, match="rows: shape"):
        model.head(batch, rows[1:])
    with pytest.raises(ValueError, match="heads=3"):
        SequenceRecModel(OneTable(), heads=3)
    with pytest.raises(ValueError, match="spread"):
        SequenceRecModel(OneTable(), spread=1.0)


def run(n: int, *args: str, timeout: float = 300, ok: bool = True) -> subprocess.CompletedProcess:
    cmd = mpiexec_command(n) + [sys.executable, "-P", str(EXAMPLE), *args]
    try:
        proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s: {exc.stdout!r} {exc.stderr!r}")
    if ok:
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.mark.parametrize("n", [pytest.param(2, marks=pytest.mark.skipif(CI, reason="runs outside CI")), 3])
def test_balanced_training_reports_where_the_time_goes(n: int, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    out = run(n, "--steps", "6", "--warmup", "3", "--trace", str(trace),
              "--json", str(tmp_path / "r.json"), *SMALL).stdout
    assert "# cost model: CostModel(a=" in out
    rows = re.findall(r"^\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s", out, re.M)
    assert [int(r[0]) for r in rows] == list(range(n)), out
    assert re.search(r"bubble \d+\.\d+ s .* steps/s, held-out AUC 0\.\d+", out)
    import json
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["ranks"] == n and len(doc["per_rank"]) == n and doc["bubble_s"] >= 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == set(range(n))
    assert any(e["name"] == "wait pooled_grad" for e in events) or any(e["name"] == "pooled_grad" for e in events)


def test_measured_speeds_follow_the_ranks_compute_times(tmp_path: Path) -> None:
    # Rank speeds stay positive with mean 1 and enter the split; the allgather they take is a
    # synchronization the timeline counts.
    out = run(2, "--steps", "6", "--warmup", "3", "--speeds", "measured", "--json", str(tmp_path / "r.json"),
              *SMALL).stdout
    m = re.search(r"^# rank speeds at the end \(mean 1\): (\d\.\d+) (\d\.\d+)$", out, re.M)
    assert m, out
    speeds = [float(v) for v in m.groups()]
    assert min(speeds) > 0 and sum(speeds) == pytest.approx(2.0, abs=2e-3)
    import json
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["speeds"] == "measured" and len(doc["final_speeds"]) == 2
    assert all("speeds" in r["wait_by_sync_s"] for r in doc["per_rank"])


def test_overlapped_exchange_trains_to_the_same_weights() -> None:
    common = ["--steps", "4", "--warmup", "0", "--split", "contiguous", "--chunks", "3", "--print-digest",
              "--link-gbps", "5", *SMALL]
    inline = run(2, *common).stdout
    overlap = run(2, *common, "--overlap").stdout
    digests = [re.search(r"^digest (\w+)$", o, re.M).group(1) for o in (inline, overlap)]
    assert digests[0] == digests[1]
    assert "progress thread" in overlap and "inline" in inline


def test_learns_the_synthetic_labels() -> None:
    out = run(2, "--steps", "80", "--cost", "1,0,0", "--global-batch", "128", "--items", "5000",
              "--eval-samples", "1024", "--quiet", "--max-length", "120", "--lengths", "lognormal").stdout
    auc = float(re.search(r"AUC (\d\.\d+)", out).group(1))
    assert auc > 0.6, out


@pytest.mark.parametrize("args,message", [
    (["--chunks", "0"], "--chunks must be at least 1"),
    (["--cost", "1,2"], "three numbers a,b,c"),
    (["--warmup", "1"], "--cost fit needs --warmup 3"),
    (["--heads", "3"], "heads=3"),
    (["--speeds", "measured", "--split", "contiguous"], "--speeds measured needs --split balanced"),
    (["--speed-gain", "0"], "--speed-gain must be in (0, 1]"),
    (["--lengths", "ml100k", "--lengths-file", "/nonexistent/lengths.txt"], "/nonexistent/lengths.txt"),
])
def test_bad_options_are_named(args: list[str], message: str) -> None:
    proc = run(1, "--steps", "2", *SMALL, *args, timeout=120, ok=False)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr
