"""The exchange compressor (the error-bounded C codec as the DLRM exchange's
block codec, :mod:`pymcoll.algorithms.compression.exchange_compressor`):
blocks decode within the adaptive bound, gradients pass untouched unless
asked, the bypass sends raw blocks when the link is fast, and the exchange
across ranks stays within the bound of the uncompressed one."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pymcoll.algorithms.compression import AdaptiveBound, IterationSchedule, TableBounds, inspect  # noqa: E402
from pymcoll.algorithms.compression.exchange_compressor import ExchangeCompressor  # noqa: E402
from pymcoll.algorithms.dlrm.block_codec import BACKWARD, FORWARD, BlockInfo  # noqa: E402


def block(rows: int = 512, cols: int = 16, distinct: int = 40, seed: int = 0) -> torch.Tensor:
    g = np.random.default_rng(seed)
    pool = (g.standard_normal((distinct, cols)) * 0.1).astype(np.float32)
    return torch.from_numpy(pool[g.integers(0, distinct, rows)])


def info(table_rows: int, step: int, shape: tuple[int, int], direction: str = FORWARD) -> BlockInfo:
    return BlockInfo(direction, 3, table_rows, 0, 1, shape, step)


@pytest.mark.parametrize("table_rows,step", [(10**7, 0), (10**7, 2000), (500, 0), (5000, 700)])
def test_blocks_decode_within_the_adaptive_bound(table_rows: int, step: int) -> None:
    bound = AdaptiveBound(TableBounds(), IterationSchedule(phase=1000, kind="linear"))
    codec = ExchangeCompressor(bound, calibrate=False)
    x = block()
    i = info(table_rows, step, tuple(x.shape))
    data = codec.encode(x, i)
    assert data[0] == 1 and data.size < x.numel() * 4 / 5
    y = codec.decode(data, i)
    rel = bound(table_rows, step)
    assert float((y.double() - x.double()).abs().max()) <= rel * float(x.max() - x.min())
    assert codec.stats.blocks == 1 and codec.stats.ratio > 5


def test_gradients_are_not_compressed_unless_asked() -> None:
    assert not ExchangeCompressor(calibrate=False).applies(BACKWARD)
    assert ExchangeCompressor(calibrate=False).applies(FORWARD)
    assert ExchangeCompressor(backward=True, calibrate=False).applies(BACKWARD)


def test_bypass_on_a_fast_link_and_not_on_a_slow_one() -> None:
    x = block(2048, 64, 300)
    fast = ExchangeCompressor(link_gbps=10_000, probe_every=10)
    slow = ExchangeCompressor(link_gbps=0.5, probe_every=10)
    kinds = {"fast": [], "slow": []}
    for step in range(12):
        for name, codec in (("fast", fast), ("slow", slow)):
            data = codec.encode(x, info(10**7, step, tuple(x.shape)))
            kinds[name].append(int(data[0]))
            assert torch.equal(codec.decode(data, info(10**7, step, tuple(x.shape))), x) or data[0] == 1
    # The first block of a table is compressed to measure its ratio; while it does not pay it is measured
    # again after 2, 4, 8, ... steps, at most probe_every apart.
    assert kinds["fast"] == [1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert kinds["slow"] == [1] * 12
    assert fast.stats.bypassed == 9 and slow.stats.bypassed == 0


def test_the_stage_follows_the_link() -> None:
    x = block(2048, 64, 300)
    assert ExchangeCompressor(calibrate=False).stage_used() == "auto"  # no link known: the smallest
    assert ExchangeCompressor(link_gbps=0.1, calibrate=False).stage_used() == "auto"
    fast = ExchangeCompressor(link_gbps=4, calibrate=False)
    assert fast.stage_used() == "packed"
    data = fast.encode(x, info(10**7, 0, tuple(x.shape)))
    assert data[0] == 1 and inspect(memoryview(data)[1:]).stage == "packed"
    assert ExchangeCompressor(link_gbps=4, stage="huffman", calibrate=False).stage_used() == "huffman"
    assert ExchangeCompressor(link_gbps=4, packed_above_gbps=10, calibrate=False).stage_used() == "auto"
    with pytest.raises(ValueError, match="stage='lz'"):
        ExchangeCompressor(stage="lz", calibrate=False)
    with pytest.raises(ValueError, match="packed_above_gbps"):
        ExchangeCompressor(packed_above_gbps=-1, calibrate=False)


def test_a_bypassed_table_is_measured_again_with_backoff() -> None:
    x = block(2048, 64, 300)
    codec = ExchangeCompressor(link_gbps=10_000, probe_every=4)
    probes = [step for step in range(16) if codec.encode(x, info(10**7, step, tuple(x.shape)))[0] == 1]
    assert probes == [0, 2, 6, 10, 14]  # gaps 2, 4, then probe_every
    # The link slows down: the model, with the table's last measurements, says compressing pays at once.
    codec.link_gbps = 0.5
    kinds = [int(codec.encode(x, info(10**7, step, tuple(x.shape)))[0]) for step in range(16, 24)]
    assert kinds == [1] * 8 and codec.stats.bypassed == 11


def test_a_table_predicted_to_save_little_is_sent_raw() -> None:
    # Compress and decompress at 2/0.72 GB/s, ratio so high the compressed transfer is free: the model
    # predicts 0.72 ns per byte against 0.8 ns raw on 10 Gb/s, a 10% saving.
    def model(margin: float) -> ExchangeCompressor:
        codec = ExchangeCompressor(link_gbps=10, calibrate=False, margin=margin)
        for kind in ("compress", "decompress"):
            codec._observe_rate(kind, 3, 2 / 0.72e-9)
        codec._ratio[3] = 1e12
        codec._last_probe[3] = 0
        return codec

    raw, coded = model(0.0)._seconds_per_byte(3)
    assert coded == pytest.approx(0.9 * raw)
    assert model(0.0).pays(3) and model(0.05).pays(3)
    assert not model(0.2).pays(3) and not model(0.15).pays(3)
    assert not model(0.2).encodes([(3, 64)], step=1)  # no table pays: the plain exchange
    assert model(0.05).encodes([(3, 64)], step=1)
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="margin="):
            ExchangeCompressor(margin=bad, calibrate=False)


def test_a_bad_block_kind_is_an_error() -> None:
    codec = ExchangeCompressor(calibrate=False)
    with pytest.raises(ValueError, match="block kind 7"):
        codec.decode(np.array([7, 0, 0, 0], np.uint8), info(10, 0, (1, 1)))


@pytest.mark.parametrize("n", [2, 3])
def test_exchange_with_the_compressor_stays_within_the_bound(mpirun, n: int) -> None:
    proc = mpirun(n, "dlrm_compressor", timeout=240)
    assert f"within the bound at {n} ranks" in proc.stdout


def test_training_example_with_compression(tmp_path) -> None:
    """examples/dlrm_train.py --compress trains and reports what the compressor did."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from conftest import TESTS_DIR, mpi_env, mpiexec_command

    example = Path(__file__).resolve().parent.parent / "examples" / "dlrm_train.py"
    cmd = mpiexec_command(2) + [sys.executable, "-P", str(example), "--steps", "5", "--cap", "2000", "--batch-size",
                                "256", "--eval-samples", "1024", "--quiet", "--compress", "--link-gbps", "1"]
    proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.search(r"codec: (\d+) blocks, (\d+) bypassed, ratio (\d+\.\d)", proc.stdout)
    assert m and int(m.group(1)) > 0 and float(m.group(3)) > 1.0, proc.stdout
    assert "pooled_sizes" in proc.stdout
