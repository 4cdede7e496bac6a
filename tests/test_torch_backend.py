"""The torch.distributed backend "pymcoll" (pymcoll.torch) and the DDP example.

Every torch operation runs on the "pymcoll" default group and on a gloo group
over the same ranks, at 2 and 3 ranks, and is compared with gloo's result
and with a reference computed from every rank's inputs
(tests/mpi_programs/torch_backend.py says which comparison applies where).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS_DIR, mpi_env, mpiexec_command, run_mpi

import torch  # noqa: E402,F401 - the test command installs the CPU build; missing torch must fail here

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [2, 3])
def test_every_operation_matches_gloo(n: int) -> None:
    proc = run_mpi(n, "torch_backend", env={"PYMCOLL_TIMEOUT": "60"}, timeout=240)
    assert proc.stdout.count("torch_backend ok") == n, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.timeout(300)
def test_every_operation_across_virtual_nodes() -> None:
    """The same at 3 ranks on uneven virtual nodes (2 + 1): pymcoll's paths between nodes."""
    proc = run_mpi(3, "torch_backend", "--parts", "mabsn", env={"PYMCOLL_TIMEOUT": "60", "PYMCOLL_NODE_SIZE": "2"},
                   timeout=240)
    assert proc.stdout.count("torch_backend ok") == 3, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.timeout(200)
def test_rank_that_disagrees_with_mpi_is_refused_on_every_rank() -> None:
    proc = run_mpi(2, "torch_backend", "--parts", "e", timeout=150)
    assert proc.stdout.count("env mismatch refused") == 2, proc.stdout[-4000:]
    assert "RANK=1 but this process is MPI rank 0 of 2" in proc.stdout


@pytest.mark.timeout(200)
def test_world_size_that_disagrees_with_mpi_fails_at_init() -> None:
    """A single MPI process (e.g. one of torchrun's) told WORLD_SIZE=2: the import
    keeps the launcher's variables, init_process_group("pymcoll") names the mismatch."""
    code = (
        "import torch.distributed as dist, pymcoll.torch\n"
        "try:\n"
        "    dist.init_process_group('pymcoll', store=dist.HashStore(), rank=1, world_size=2)\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=TESTS_DIR, capture_output=True, text=True,
                          timeout=150, env=mpi_env({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                                    "MASTER_PORT": "1"}))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "refused:" in proc.stdout and "WORLD_SIZE" in proc.stdout and "mpiexec -n 2" in proc.stdout, proc.stdout


def _losses(backend: str) -> list[float]:
    cmd = mpiexec_command(2) + [sys.executable, "-P", str(EXAMPLES / "ddp_train.py"), "--backend", backend,
                                "--steps", "20"]
    proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    steps = re.findall(r"^step (\d+) loss (\S+)$", proc.stdout, re.MULTILINE)
    assert [int(s) for s, _ in steps] == list(range(1, 21)), proc.stdout
    return [float(v) for _, v in steps]


@pytest.mark.timeout(600)
def test_ddp_example_gives_gloo_losses() -> None:
    """examples/ddp_train.py: 20 steps of DDP give the same losses with "pymcoll" and "gloo"."""
    mine, gloo = _losses("pymcoll"), _losses("gloo")
    assert mine == pytest.approx(gloo, rel=1e-5), list(zip(mine, gloo))
    assert mine[-1] < mine[0], mine  # and it trains
