"""perf/cost_model_hosts.py's model of collectives across test-bed hosts: when the lanes' tree runs
calls ahead (the node ring's slots), the node steps each form pays, and the recorded comparison
with the measured runs, recomputed from the recorded terms (no hosts needed)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results"


@pytest.fixture(scope="module")
def cmh() -> ModuleType:
    sys.path.insert(0, str(ROOT / "perf"))
    try:
        return importlib.import_module("cost_model_hosts")
    finally:
        sys.path.remove(str(ROOT / "perf"))


def terms(hosts: int = 2, per_host: int = 2) -> dict:
    """Round numbers for every term (seconds, seconds per byte)."""
    return {"alpha_net": 10e-6, "alpha_mpi_local": 8e-6, "alpha_node": 5e-6, "alpha_x_one": 25e-6,
            "alpha_x_all": 40e-6, "beta_tcp": 1 / 1.25e9, "beta_shm": 1 / 13e9, "gamma": 1 / 13e9,
            "alpha_call": 0.3e-6, "hosts": hosts, "per_host": per_host}


def test_ring_slots_bound_running_ahead(cmh: ModuleType) -> None:
    shared = cmh.HostModel(terms(), None, 0.0, cpus=1)  # 2 ranks on 1 CPU: 8 slots
    slot = cmh.SHM_DATA_BYTES // 8
    assert shared.runs_ahead(slot) and not shared.runs_ahead(slot + 64)
    own = cmh.HostModel(terms(), None, 0.0, cpus=2)  # a CPU each: 2 slots
    assert own.runs_ahead(cmh.SHM_DATA_BYTES // 2) and not own.runs_ahead(cmh.SHM_DATA_BYTES // 2 + 64)
    alone = cmh.HostModel(terms(per_host=1), None, 0.0, cpus=1)  # one rank a host: no ring
    assert not alone.runs_ahead(8)


def test_running_ahead_drops_the_first_node_step(cmh: ModuleType) -> None:
    m = cmh.HostModel(terms(), None, 0.0, cpus=1)
    ano = m.ano
    slot = cmh.SHM_DATA_BYTES // 8
    # Bcast: a message in a slot overlaps the root host's hand-off; one past the slot does not.
    t_in, _ = m.lanes("bcast", slot, 64 << 10)
    t_out, _ = m.lanes("bcast", slot + 64, 64 << 10)
    per_byte = m.bc + 3 * m.bsh  # tcp, the copy out, the host's two ranks' copies on its one CPU
    assert t_out - t_in == pytest.approx(ano + 64 * per_byte, rel=1e-9)
    # Gather overlaps its first step, Scatter (whose root host is the busiest) does not.
    g, _ = m.lanes("gather", 8, 64 << 10)
    s, _ = m.lanes("scatter", 8, 64 << 10)
    assert s - g == pytest.approx(ano, rel=1e-6)


def test_leader_reduce_hands_the_result_to_the_root(cmh: ModuleType) -> None:
    two = cmh.HostModel(terms(per_host=2), None, 0.0, cpus=1)
    one = cmh.HostModel(terms(per_host=1), None, 0.0, cpus=1)
    t2, _ = two.leader("reduce", 8, 64 << 10)
    t1, _ = one.leader("reduce", 8, 64 << 10)
    # The same steps but the host's own reduction, plus the broadcast in the root's host.
    node_reduce_2 = 2 * two.ano + two.copies(8) + 8 * two.g
    node_reduce_1 = 2 * one.ano + one.copies(8)
    assert (t2 - node_reduce_2) - (t1 - node_reduce_1) == pytest.approx(two.ano + two.copies(8), rel=1e-6)


@pytest.mark.skipif(not (RESULTS / "cost_model_hosts.json").exists() or not list(RESULTS.glob("lanes_np*_hosts*.json")),
                    reason="no recorded runs across hosts in this checkout")
def test_recorded_comparison_holds(cmh: ModuleType) -> None:
    """The model with the recorded terms (measured on the hosts, latencies fitted) against the
    recorded runs: the points within 25% are what the results file says, at least 90%."""
    from pymcoll.testing.cluster import TBF_BURST

    doc = json.loads((RESULTS / "cost_model_hosts.json").read_text())
    rows = cmh.compare(doc["params"], TBF_BURST, doc["fitted"])
    assert len(rows) == len(doc["comparison"])
    within = sum(abs(r["fitted_ratio"] - 1) <= 0.25 for r in rows)
    recorded = sum(abs(r["fitted_ratio"] - 1) <= 0.25 for r in doc["comparison"])
    assert within == recorded
    assert within >= 0.9 * len(rows), f"{within} of {len(rows)} points within 25%"
