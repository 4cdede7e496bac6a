"""pymcoll.ftar.local_cluster: the harness that FTAR's tests, benchmark and example run their processes with.

A coordinator starts on a free loopback port with a fresh token that no
command line shows; replicas start, are SIGKILLed and restarted with the same
command line and environment; their JSON lines arrive as events; a wait that
is not met raises at its deadline (or at once when the process has exited)
with the process's stderr in the message; and closing the cluster, also after
an exception or when the harness itself dies, leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymcoll.ftar.local_cluster import CoordinatorProcess, LocalCluster, LocalClusterError, LocalProcess

# A replica stand-in: says ready (with its token and environment), echoes its stdin lines as events,
# starts a grandchild on request, and sleeps.
PROGRAM = r'''
import json, os, subprocess, sys, threading, time
def say(ev, **kw):
    kw["ev"] = ev
    print(json.dumps(kw), flush=True)
args = sys.argv[1:]
print("warming up on stderr", file=sys.stderr, flush=True)
if "--start-file" in args:  # the gate of start_together
    gate = args[args.index("--start-file") + 1]
    say("ready", pid=os.getpid())
    end = time.monotonic() + 30
    while not os.path.exists(gate) and time.monotonic() < end:
        time.sleep(0.01)
    say("go", t_go=time.monotonic())
else:
    say("ready", pid=os.getpid(), token_file=os.environ.get("PYMCOLL_FTAR_TOKEN_FILE"),
        token=os.environ.get("PYMCOLL_FTAR_TOKEN"), color=os.environ.get("COLOR"), argv=args)
print("a line that is not JSON", flush=True)
if "--grandchild" in args:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    say("grandchild", pid=child.pid)
if "--exit" in args:
    print("giving up: no coordinator", file=sys.stderr, flush=True)
    sys.exit(3)
if "--echo" in args:
    for line in sys.stdin:
        say("echo", text=line.strip())
time.sleep(300)
'''


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def program(tmp_path: Path) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return [sys.executable, str(path)]


def is_ready(ev: dict) -> bool:
    return ev.get("ev") == "ready"


def test_coordinator_token_and_a_member(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from pymcoll.ftar import Member

    with LocalCluster(tmp_path) as cluster:
        coord = cluster.start_coordinator(min_replicas=1, heartbeat_ms=50, evict_ms=1000)
        assert isinstance(coord, CoordinatorProcess) and cluster.coordinator is coord
        host, _, port = cluster.address.rpartition(":")
        assert host == "127.0.0.1" and 0 < int(port) < 65536
        assert cluster.token not in " ".join(coord.argv)
        assert cluster.token_file is not None and cluster.token_file.stat().st_mode & 0o077 == 0
        assert cluster.env["PYMCOLL_FTAR_TOKEN_FILE"] == str(cluster.token_file)
        with Member(cluster.address, "m0", token=cluster.token, timeout=20) as m:
            assert m.begin_step(0).ok and m.allreduce(np.ones(4, np.float32)).ok and m.commit(0)
        assert "listening on" in coord.stderr()
    assert (tmp_path / "coordinator.0.log").exists()  # a directory it was given is kept


def test_start_kill_restart_with_the_same_command_and_environment(program: list[str]) -> None:
    with LocalCluster(token_via="env", env={**os.environ, "PYMCOLL_FTAR_FAULT": "vote:kill"}) as cluster:
        r0 = cluster.start("r0", [*program, "--flag"], env={"COLOR": "blue"})
        ev = r0.wait_for(is_ready, 30, "ready")
        assert ev["pid"] == r0.pid and ev["argv"] == ["--flag"] and ev["color"] == "blue"
        assert ev["token"] == cluster.token and ev["token_file"] is None
        assert "PYMCOLL_FTAR_FAULT" not in cluster.env  # a leftover fault spec does not leak into the cluster
        text = r0.wait_for(lambda e: e["ev"] == "text", 10)
        assert text["text"] == "a line that is not JSON" and isinstance(text["t"], float)
        assert r0.running and r0.returncode is None and r0.incarnation == 0
        assert cluster.kill("r0") == -signal.SIGKILL
        assert not r0.running and r0.exited_at is not None and not alive(r0.pid)
        r0b = cluster.restart("r0")
        assert r0b is cluster.process("r0") and r0b.incarnation == 1 and r0b.pid != r0.pid
        ev = r0b.wait_for(is_ready, 30, "ready after the restart")
        assert ev["argv"] == ["--flag"] and ev["color"] == "blue"
        assert r0b.stderr_path != r0.stderr_path and "warming up" in r0.stderr()
        assert cluster.processes == [r0, r0b]
        r0b.send_signal(signal.SIGSTOP)  # the process only: the harness can still kill it
        assert r0b.kill() == -signal.SIGKILL


def test_a_missed_deadline_names_the_event_and_shows_stderr(program: list[str]) -> None:
    with LocalCluster() as cluster:
        r0 = cluster.start("r0", program)
        r0.wait_for(is_ready, 30)
        started = time.monotonic()
        with pytest.raises(LocalClusterError) as err:
            r0.wait_for(lambda e: e["ev"] == "commit", 0.5, "a commit of step 3")
        assert 0.5 <= time.monotonic() - started < 5
        text = str(err.value)
        assert "r0: no event a commit of step 3: not within 0.5 s" in text
        assert "running" in text and "warming up on stderr" in text and '"ev": "ready"' in text
        with pytest.raises(LocalClusterError, match="did not exit within 0.2 s"):
            r0.wait(0.2)

        quitter = cluster.start("r1", [*program, "--exit"])
        started = time.monotonic()
        with pytest.raises(LocalClusterError) as err:  # it exits: the wait ends then, not at the deadline
            quitter.wait_for(lambda e: e["ev"] == "commit", 60, "a commit")
        assert time.monotonic() - started < 30
        assert "its output ended without it" in str(err.value) and "giving up: no coordinator" in str(err.value)
        assert quitter.wait(10) == 3


def test_coordinator_that_cannot_start_is_reported(tmp_path: Path) -> None:
    with LocalCluster() as cluster:
        first = cluster.start_coordinator()
        with pytest.raises(LocalClusterError, match="the coordinator second exited") as err:
            cluster.start_coordinator(first.address, name="second")  # the port is taken
        assert "cannot start" in str(err.value)
        assert cluster.coordinator is first


def test_coordinator_restart_keeps_its_address_and_settings() -> None:
    with LocalCluster() as cluster:
        first = cluster.start_coordinator(min_replicas=2, evict_ms=1500, quiet=True)
        assert cluster.kill_coordinator() == -signal.SIGKILL
        second = cluster.restart_coordinator()
        assert second.address == first.address and second.incarnation == 1 and second.running
        assert second.argv[second.argv.index("--min-replicas") + 1] == "2" and "--quiet" in second.argv
        with pytest.raises(LocalClusterError, match="restart_coordinator"):
            cluster.restart("coordinator")


def test_start_together_opens_the_gate_after_every_ready(program: list[str]) -> None:
    seen: list[tuple[str, object]] = []
    with LocalCluster(on_event=lambda p, ev: seen.append((p.name, ev and ev["ev"]))) as cluster:
        procs = cluster.start_together([("a", program), ("b", program, {"COLOR": "red"})], settle_s=0.1)
        go = [p.wait_for(lambda e: e["ev"] == "go", 30, "go") for p in procs]
        ready = [p.wait_for(is_ready, 1) for p in procs]
        assert min(g["t_go"] for g in go) > max(r["t"] for r in ready)
        procs[0].kill()
        deadline = time.monotonic() + 10
        while ("a", None) not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert ("a", "ready") in seen and ("b", "go") in seen and ("a", None) in seen


def test_write_line_reaches_stdin(program: list[str]) -> None:
    with LocalCluster() as cluster:
        p = cluster.start("r0", [*program, "--echo"], stdin=True)
        p.write_line("hello")
        assert p.wait_for(lambda e: e["ev"] == "echo", 30)["text"] == "hello"
        q = cluster.start("r1", program)
        with pytest.raises(LocalClusterError, match="stdin=True"):
            q.write_line("nobody listens")


def test_close_kills_everything_also_after_an_exception(program: list[str]) -> None:
    pids: list[int] = []
    with pytest.raises(ZeroDivisionError):
        with LocalCluster() as cluster:
            cluster.start_coordinator()
            p = cluster.start("r0", [*program, "--grandchild"])
            grandchild = p.wait_for(lambda e: e["ev"] == "grandchild", 30)["pid"]
            pids = [cluster.coordinator.pid, p.pid, grandchild]
            directory = cluster.directory
            1 / 0
    assert cluster.closed and not directory.exists()
    assert all(gone_within(pid, 10) for pid in pids), [pid for pid in pids if alive(pid)]
    with pytest.raises(LocalClusterError, match="closed"):
        cluster.start("r1", program)


def test_processes_die_with_the_harness_and_at_their_time_limit(tmp_path: Path, program: list[str]) -> None:
    # A harness process that starts a replica and dies without closing its cluster.
    script = ("import json, sys, os\n"
              "from pymcoll.ftar.local_cluster import LocalCluster\n"
              f"c = LocalCluster({str(tmp_path)!r})\n"
              f"p = c.start('r0', {program!r})\n"
              "p.wait_for(lambda e: e['ev'] == 'ready', 30)\n"
              "print(p.pid, flush=True)\n"
              "os._exit(1)\n")
    out = subprocess.run([sys.executable, "-P", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    pid = int(out.stdout.strip() or 0)
    assert pid and gone_within(pid, 10), out.stderr

    with LocalCluster(time_limit_s=1) as cluster:
        p = cluster.start("r0", program)
        assert p.wait(20) == -signal.SIGALRM


def test_arguments_are_checked(program: list[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token_via"):
        LocalCluster(token_via="argv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time_limit_s"):
        LocalCluster(time_limit_s=0.5)
    with pytest.raises(ValueError, match="directory"):
        LocalCluster(tmp_path / "missing")
    with LocalCluster() as cluster:
        with pytest.raises(ValueError, match="name"):
            cluster.start("r 0", program)
        with pytest.raises(ValueError, match="argv"):
            cluster.start("r0", [])
        with pytest.raises(KeyError, match="r9"):
            cluster.process("r9")
        with pytest.raises(LocalClusterError, match="start_coordinator"):
            cluster.address
        p = cluster.start("r0", program)
        with pytest.raises(ValueError, match="timeout"):
            p.wait_for(is_ready, -1)
        assert isinstance(p, LocalProcess) and "r0.0" in repr(p) and json.dumps(p.events) is not None
