"""FTAR with one replica per host of the multi-host test bed: a replica cut off by a silent link
is evicted within the liveness deadline while the others keep training, and rejoins and catches
up once the link is back; 0 divergent replicas. Needs root (skipped with the reason otherwise)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from conftest import CI, TESTS_DIR
from pymcoll.ftar import route_address
from pymcoll.ftar.local_cluster import LocalCluster, LocalProcess
from pymcoll.testing import cluster as tb
from test_ftar import no_wrong_sum, survivors_agree

REASON = tb.available()
needs_hosts = pytest.mark.skipif(REASON is not None, reason=REASON or "")
outside_ci = pytest.mark.skipif(CI, reason="runs outside CI (slow marker)")


class HostReplicas(LocalCluster):
    """A coordinator on the bridge's address and tests/ftar_programs replicas, one per host."""

    def __init__(self, tmp: Path, hosts: tb.Cluster, *, evict_ms: int, on: Optional[str] = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYMCOLL_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(TESTS_DIR), env.get("PYTHONPATH", "")] if p)
        super().__init__(tmp, env=env, cwd=TESTS_DIR)
        self.hosts = hosts
        # The coordinator on the machine itself (the bridge's address), or on host `on`.
        bind = hosts.bridge_address if on is None else hosts.host(on).address
        self.start_coordinator(f"{bind}:0", min_replicas=2, evict_ms=evict_ms, heartbeat_ms=50, join_timeout_ms=500,
                               wrap=None if on is None else (lambda argv: hosts.on_host(on, argv)))

    def start_on(self, specs: list[tuple[str, str, list[str]]]) -> list[LocalProcess]:
        """Start replicas (id, host, args) that take their first step together."""
        return self.start_together([
            (rid, self.hosts.on_host(host, [sys.executable, "-m", "ftar_programs.replica", "--coordinator",
                                            self.address, "--id", rid, *args]), None)
            for rid, host, args in specs])


def test_members_listen_where_the_coordinator_route_leaves() -> None:
    assert route_address("127.0.0.1:29400") == "127.0.0.1"
    with pytest.raises(ValueError, match="does not resolve"):
        route_address("no-such-host.invalid:29400")


@needs_hosts
@pytest.mark.timeout(240)
def test_replica_behind_a_cut_link_is_evicted_then_rejoins(tmp_path: Path) -> None:
    evict_s = 1.5
    with tb.Cluster(3) as hosts, HostReplicas(tmp_path, hosts, evict_ms=int(evict_s * 1000)) as cl:
        common = ["--steps", "90", "--dim", "5000", "--sleep", "0.05"]
        r0, r1, r2 = cl.start_on([(f"r{k}", f"h{k + 1}", ["--number", str(k), *common]) for k in range(3)])
        r2.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 5, 60, "commit 5")
        assert all(e["n_contrib"] == 3 for e in r0.events_of("commit"))
        hosts.link_down("h3")
        cut = time.monotonic()
        first = r0.wait_for(lambda e: e["ev"] == "commit" and e["n_contrib"] == 2, 30, "a commit without r2")
        # Evicted by the liveness deadline: no reset tells anyone, only the heartbeats stop.
        evicted_after = time.monotonic() - cut
        assert evicted_after <= evict_s + 3.0, evicted_after
        went_on = first["step"]
        r0.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= went_on + 10, 60, "10 more commits without r2")
        cut_at = max((e["step"] for e in r2.events_of("commit")), default=-1)
        hosts.link_up("h3")
        healed = r2.wait_for(lambda e: e["ev"] == "healed", 90, "r2 healed after the link came back")
        assert healed["step"] > cut_at
        for p in (r0, r1, r2):
            p.wait_for(lambda e: e["ev"] == "done", 120, "done")
        survivors_agree([r0, r1, r2])
        no_wrong_sum([r0, r1, r2])
        done = [p.events_of("done")[-1] for p in (r0, r1, r2)]
        assert len({d["hash"] for d in done}) == 1, done  # bit-identical parameters at the end


def step_times(p: LocalProcess, lo: int, hi: int) -> list[float]:
    """Seconds between consecutive commits of steps lo..hi (as `p` saw them)."""
    t = {e["step"]: e["t"] for e in p.events_of("commit")}
    return [t[s] - t[s - 1] for s in range(lo + 1, hi + 1) if s in t and s - 1 in t]


@needs_hosts
@pytest.mark.timeout(300)
@pytest.mark.slow
@outside_ci
def test_replica_on_a_slow_link_slows_the_ring_and_stays(tmp_path: Path) -> None:
    # A slow replica is not a dead one: its heartbeats arrive, so it is never evicted; the ring
    # (synchronous) runs at its link's pace, every step with all three, and nothing diverges.
    with tb.Cluster(3) as hosts, HostReplicas(tmp_path, hosts, evict_ms=1500) as cl:
        common = ["--steps", "60", "--dim", "250000", "--sleep", "0.02", "--timeout", "30"]
        r0, r1, r2 = cl.start_on([(f"r{k}", f"h{k + 1}", ["--number", str(k), *common]) for k in range(3)])
        r0.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 20, 120, "commit 20")
        hosts.set_rate("h3", "100mbit")
        slow_from = max(e["step"] for e in r0.events_of("commit")) + 2
        for p in (r0, r1, r2):
            p.wait_for(lambda e: e["ev"] == "done", 240, "done")
        fast = statistics.median(step_times(r0, 5, 19))
        slow_steps = statistics.median(step_times(r0, slow_from, 59))
        # 2 MB of float64 per step: a ring moves about 2 x 2/3 of it over the slow link each way.
        assert slow_steps > fast + 0.05, (fast, slow_steps)
        assert all(e["n_contrib"] == 3 for p in (r0, r1, r2) for e in p.events_of("commit"))
        assert not [e for p in (r0, r1, r2) for e in p.events if e["ev"] == "nocommit"]
        survivors_agree([r0, r1, r2])
        no_wrong_sum([r0, r1, r2])


@needs_hosts
@pytest.mark.timeout(300)
@pytest.mark.slow
@outside_ci
def test_coordinator_cut_off_then_back(tmp_path: Path) -> None:
    # While the coordinator cannot be reached no step commits (no decision, no update); once
    # it is back the members reconnect, the fenced ones rejoin and catch up, and training goes on.
    with tb.Cluster(4) as hosts, HostReplicas(tmp_path, hosts, evict_ms=1500, on="h4") as cl:
        common = ["--steps", "80", "--dim", "5000", "--sleep", "0.05", "--timeout", "3"]
        r0, r1, r2 = cl.start_on([(f"r{k}", f"h{k + 1}", ["--number", str(k), *common]) for k in range(3)])
        r0.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 10, 60, "commit 10")
        hosts.link_down("h4")
        cut = time.monotonic()
        time.sleep(6.0)
        back = time.monotonic()
        hosts.link_up("h4")
        for p in (r0, r1, r2):
            p.wait_for(lambda e: e["ev"] == "done", 240, "done")
        # A commit decided just before the cut may still be reported in its first moments.
        during = [e for p in (r0, r1, r2) for e in p.events_of("commit") if cut + 0.5 < e["t"] < back]
        assert not during, during
        assert [e for p in (r0, r1, r2) for e in p.events if e["ev"] == "nocommit"], "no step failed during the cut"
        survivors_agree([r0, r1, r2])
        no_wrong_sum([r0, r1, r2])
        hashes = {p.events_of("done")[-1]["hash"] for p in (r0, r1, r2)}
        assert len(hashes) == 1, hashes
