"""FTAR end to end on loopback: a coordinator process and replica processes.

Correctness of the ring at 2-8 members (every dtype and op, sizes from one
element to 64 MiB, identical bits everywhere), SIGKILL at each injection
point, catch-up of a restarted replica (and of one whose donor dies),
SIGSTOP below and above the eviction timeout, a coordinator restart, and
bad peers (wrong token, garbage) that must change nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from pathlib import Path

import pytest

from ftar_cluster import Cluster

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DTYPES = ["float32", "float64", "bfloat16", "float16", "int32", "int64"]


def correctness_cases(n: int) -> str:
    cases = []
    for i, dtype in enumerate(DTYPES):
        for op in ("sum", "max", "min"):
            for count in (1, 7, 1000 * n + 3):
                cases.append(f"{dtype}:{op}:{count}")
        cases.append(f"{dtype}:sum:{(1 << 16) + 5 + i}")
    cases.append("float32:sum:0")
    if n == 2:  # the largest sizes, at 2 members only
        cases += ["float32:sum:%d" % ((4 << 20) + 1), "float32:sum:%d" % (16 << 20)]
        if not CI:
            cases.append("float64:sum:%d" % ((8 << 20) + 3))
    return ",".join(cases)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n,streams,integrity", [(2, 1, False), (2, 2, True), (3, 1, False), (4, 3, False),
                                                 (8, 1, True)])
def test_allreduce_is_exact_and_bit_identical(tmp_path: Path, n: int, streams: int, integrity: bool) -> None:
    cases = correctness_cases(n)
    if n == 8 and CI:  # 8 processes on 2 cores: fewer cases, every dtype but bfloat16 (checked at 2-4 members:
        # it is the only one that imports torch, ~3 s of CPU per member)
        cases = ",".join(f"{d}:sum:{c}" for d in DTYPES if d != "bfloat16" for c in (1, 8003)) \
            + ",float32:max:17,int64:min:9"
    ncases = len(cases.split(","))
    with Cluster(tmp_path, min_replicas=n) as cl:
        extra = ["--streams", str(streams), "--chunk-bytes", "4096", "--timeout", "120"]
        if integrity:
            extra.append("--integrity")
        procs = cl.start_programs([(f"r{k}", "sum_check", ["--number", str(k), "--members", str(n), "--cases", cases,
                                                          *extra], None) for k in range(n)])
        for p in procs:
            p.wait_for(lambda e: e["ev"] == "done", 240, "done")
        per_member = [[e for e in p.events if e["ev"] == "case"] for p in procs]
        for evs in per_member:
            assert len(evs) == ncases
            bad = [e for e in evs if not (e["status"] == "OK" and e["exact"] and e["input_untouched"]
                                          and e["committed"] and e["n_contrib"] == n)]
            assert not bad, bad[:5]
        for i in range(ncases):
            assert len({evs[i]["digest"] for evs in per_member}) == 1, [evs[i] for evs in per_member]


def survivors_agree(procs, dead: set[str] = frozenset()) -> dict[int, str]:
    """Every committed step has one state digest over the replicas that applied it."""
    by_step: dict[int, set[str]] = {}
    for p in procs:
        for e in p.events_of("commit"):
            if e["hash"] is not None:
                by_step.setdefault(e["step"], set()).add(e["hash"])
    diverged = {s: h for s, h in by_step.items() if len(h) > 1}
    assert not diverged, diverged
    return {s: next(iter(h)) for s, h in by_step.items()}


def no_wrong_sum(procs) -> None:
    wrong = [e for p in procs for e in p.events if e["ev"] == "allreduce" and e["status"] == "OK" and not e["exact"]]
    assert not wrong, wrong


@pytest.mark.timeout(180)
@pytest.mark.parametrize("point", ["reduce_scatter", "allgather", "vote", "commit"])
def test_sigkill_at_each_point_never_gives_a_wrong_result(tmp_path: Path, point: str) -> None:
    kill_step = 4
    with Cluster(tmp_path, min_replicas=2) as cl:
        common = ["--steps", "10", "--dim", "50000", "--chunk-bytes", "4096"]
        r0, r1, r2 = cl.start_programs([
            ("r0", "replica", ["--number", "0", *common], None),
            ("r1", "replica", ["--number", "1", *common], None),
            ("r2", "replica", ["--number", "2", *common], {"PYMCOLL_FTAR_FAULT": f"{point}:kill@{kill_step}"})])
        for p in (r0, r1):
            p.wait_for(lambda e: e["ev"] == "done", 120, "done")
        assert r2.wait(10) == -signal.SIGKILL
        no_wrong_sum([r0, r1])
        survivors_agree([r0, r1])
        for p in (r0, r1):
            commits = {e["step"]: e for e in p.events_of("commit")}
            assert sorted(commits) == list(range(10)), p.report()
            for s in range(kill_step + 1, 10):
                assert commits[s]["n_contrib"] == 2 and commits[s]["mask"] == 0b011, commits[s]
            if point != "commit":  # before the vote: the step is redone by the two survivors
                assert commits[kill_step]["mask"] == 0b011, commits[kill_step]
                failed = [e for e in p.events if e.get("step") == kill_step
                          and (e["ev"] == "nocommit" or (e["ev"] == "allreduce" and e["status"] != "OK"))]
                assert failed, p.report()
            else:  # after COMMIT: everyone voted, the step stands with three
                assert commits[kill_step]["mask"] == 0b111, commits[kill_step]


@pytest.mark.timeout(240)
def test_restarted_replica_catches_up_while_others_commit(tmp_path: Path) -> None:
    with Cluster(tmp_path, min_replicas=2) as cl:
        common = ["--steps", "60", "--dim", "20000", "--sleep", "0.05", "--state-bytes", str(8 << 20)]
        r0, r1, r2 = cl.start_programs([(f"r{k}", "replica", ["--number", str(k), *common], None) for k in range(3)])
        r2.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 8, 60, "commit 8")
        r2.send_signal(signal.SIGKILL)
        r0.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 14, 60, "commit 14")
        before = len(r0.events_of("commit"))
        r2b = cl.start_program("r2", "replica", "--number", "2", *common)
        healed = r2b.wait_for(lambda e: e["ev"] == "healed", 60, "healed")
        first = r2b.wait_for(lambda e: e["ev"] == "commit" and e["hash"] is not None, 60, "first commit")
        for p in (r0, r1, r2b):
            p.wait_for(lambda e: e["ev"] == "done", 120, "done")
        hashes = survivors_agree([r0, r1, r2b])
        assert hashes[first["step"]] == first["hash"]
        assert healed["step"] >= 14
        assert len(r0.events_of("commit")) > before  # the others went on committing
        no_wrong_sum([r0, r1, r2b])
        done = {p.name: p.wait_for(lambda e: e["ev"] == "done", 1)["hash"] for p in (r0, r1, r2b)}
        assert len(set(done.values())) == 1, done


@pytest.mark.timeout(240)
def test_joiner_completes_from_another_donor_when_its_donor_dies(tmp_path: Path) -> None:
    with Cluster(tmp_path, min_replicas=2) as cl:
        common = ["--steps", "40", "--dim", "20000", "--sleep", "0.05", "--state-bytes", str(16 << 20)]
        # r0 is the first donor (the coordinator spreads joiners over healthy members in ring order).
        r0, r1, r2 = cl.start_programs([
            ("r0", "replica", ["--number", "0", *common], {"PYMCOLL_FTAR_FAULT": "serve_state:kill"}),
            ("r1", "replica", ["--number", "1", *common], None),
            ("r2", "replica", ["--number", "2", *common], None)])
        r2.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 5, 60, "commit 5")
        r2.send_signal(signal.SIGKILL)
        r1.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 8, 60, "commit 8")
        r2b = cl.start_program("r2", "replica", "--number", "2", *common)
        assert r0.wait(60) == -signal.SIGKILL  # it died serving the state
        r2b.wait_for(lambda e: e["ev"] == "healed", 60, "healed")
        for p in (r1, r2b):
            p.wait_for(lambda e: e["ev"] == "done", 120, "done")
        survivors_agree([r0, r1, r2b])
        no_wrong_sum([r1, r2b])
        err = r2b.stderr()
        assert "asking for another donor" in err, err


@pytest.mark.timeout(240)
def test_short_sigstop_costs_latency_long_one_fences_and_rejoins(tmp_path: Path) -> None:
    with Cluster(tmp_path, min_replicas=2, evict_ms=1500) as cl:
        common = ["--steps", "70", "--dim", "5000", "--sleep", "0.05"]
        r0, r1, r2 = cl.start_programs([(f"r{k}", "replica", ["--number", str(k), *common], None) for k in range(3)])
        r2.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 5, 60, "commit 5")
        r2.send_signal(signal.SIGSTOP)
        time.sleep(0.4)
        r2.send_signal(signal.SIGCONT)
        r2.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 15, 60, "commit 15")
        short = [e for p in (r0, r1, r2) for e in p.events if e.get("step", 99) <= 14
                 and e["ev"] in ("nocommit", "allreduce") and e.get("status") != "OK"]
        assert not short, short  # below the eviction timeout: no abort, only a slower step
        assert all(e["n_contrib"] == 3 for e in r0.events_of("commit") if e["step"] <= 14)
        r2.send_signal(signal.SIGSTOP)
        r0.wait_for(lambda e: e["ev"] == "commit" and e["n_contrib"] == 2, 30, "a commit without r2")
        stopped_at = max(e["step"] for e in r2.events_of("commit"))
        time.sleep(1.0)
        r2.send_signal(signal.SIGCONT)
        healed = r2.wait_for(lambda e: e["ev"] == "healed", 60, "healed after SIGCONT")
        assert healed["step"] > stopped_at
        for p in (r0, r1, r2):
            p.wait_for(lambda e: e["ev"] == "done", 120, "done")
        survivors_agree([r0, r1, r2])  # r2 never applied a stale step: every digest it had matches
        no_wrong_sum([r0, r1, r2])
        # The fence is best effort (the coordinator then closes the connection), so r2 learns of
        # its eviction from the fence or from the closed connection; either way it rejoined above.
        err = r2.stderr()
        assert "fenced by the coordinator" in err or "lost the coordinator" in err, err


@pytest.mark.timeout(240)
def test_coordinator_restart_mid_run(tmp_path: Path) -> None:
    with Cluster(tmp_path, min_replicas=3) as cl:
        common = ["--steps", "40", "--dim", "5000", "--sleep", "0.05"]
        procs = cl.start_programs([(f"r{k}", "replica", ["--number", str(k), *common], None) for k in range(3)])
        procs[0].wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 8, 60, "commit 8")
        cl.kill_coordinator()
        time.sleep(0.5)
        cl.restart_coordinator()
        for p in procs:
            p.wait_for(lambda e: e["ev"] == "done", 150, "done")
        survivors_agree(procs)
        no_wrong_sum(procs)
        done = {p.wait_for(lambda e: e["ev"] == "done", 1)["hash"] for p in procs}
        assert len(done) == 1


def _garbage_connections(addr: str) -> None:
    host, port = addr.rsplit(":", 1)
    payloads = [
        os.urandom(200),                                   # noise
        b"PMFT",                                           # truncated header, then silence
        b"PMFT" + bytes([1, 5, 0, 0]) + struct.pack("<I", 0x7FFFFFFF) + bytes(28),  # absurd length
        b"PMFT" + bytes([9, 2, 0, 0]) + bytes(32),         # unknown version
    ]
    for data in payloads:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.settimeout(5)
            try:
                s.recv(4096)  # the HELLO challenge
                s.sendall(data)
                s.recv(4096)  # closed by the peer (or nothing)
            except OSError:
                pass


@pytest.mark.timeout(180)
def test_wrong_token_and_garbage_change_nothing(tmp_path: Path) -> None:
    with Cluster(tmp_path, min_replicas=2) as cl:
        common = ["--steps", "150", "--dim", "2000", "--sleep", "0.05"]
        r0, r1 = cl.start_programs([(f"r{k}", "replica", ["--number", str(k), *common], None) for k in range(2)])
        r0.wait_for(lambda e: e["ev"] == "commit" and e["step"] >= 3, 60, "commit 3")
        listen = [ln for ln in r1.stderr().splitlines() if "listening on" in ln]
        assert listen, r1.report()
        _garbage_connections(listen[0].rsplit("listening on ", 1)[1].split(",")[0].strip())
        _garbage_connections(cl.address)
        intruder = cl.start_program("r9", "replica", "--number", "9", "--steps", "1", "--timeout", "2",
                            env={"PYMCOLL_FTAR_TOKEN": "not-the-token"})
        ev = intruder.wait_for(lambda e: e["ev"] == "quorum", 30, "refused quorum")
        assert ev["status"] == "COORDINATOR_LOST", ev
        intruder.kill()
        assert r1.running, "r1 finished before the intruders were done: raise --steps"
        for p in (r0, r1):
            p.wait_for(lambda e: e["ev"] == "done", 120, "done")
        survivors_agree([r0, r1])
        assert all(e["n_contrib"] == 2 for e in r0.events_of("commit"))
        assert "refused" in cl.coordinator.stderr() or "closed" in cl.coordinator.stderr()
