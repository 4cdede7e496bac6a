"""Hosts on one machine (pymcoll.testing.cluster): the test bed itself, collectives across real
hosts, and a cut link. Needs root; skipped with the reason where namespaces cannot be made."""

from __future__ import annotations

import queue
import shutil
import re
import subprocess
import sys
import threading
import time
from typing import Iterator

import pytest

from conftest import CI, TESTS_DIR, mpi_env
from pymcoll.testing import cluster as tb

REASON = tb.available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def leftovers(prefix: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    names += re.findall(r"^\d+: ([^:@]+)", subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                                                            text=True).stdout, re.M)
    return [n for n in names if n.startswith(prefix)]


@pytest.fixture
def hosts2() -> Iterator[tb.Cluster]:
    cl = tb.Cluster(2)
    try:
        yield cl
    finally:
        cl.close()
        assert leftovers(cl.prefix) == [] and not cl.directory.exists()


def on(cl: tb.Cluster, host: str, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(cl.on_host(host, list(argv)), capture_output=True, text=True, timeout=timeout)


def can_reach(cl: tb.Cluster, src: str, dst: str) -> bool:
    code = ("import socket, sys\ns = socket.create_connection((sys.argv[1], 9), timeout=1.5)\n")
    # Port 9 has no listener: a refusal proves the path works, a timeout that it is cut.
    out = on(cl, src, sys.executable, "-c", f"{code}", cl.host(dst).address)
    return "ConnectionRefusedError" in out.stderr


def test_hosts_have_their_own_name_ipc_and_shm(hosts2: tb.Cluster) -> None:
    assert on(hosts2, "h1", "hostname").stdout.strip() == "h1"
    assert on(hosts2, "h2", "hostname").stdout.strip() == "h2"
    on(hosts2, "h1", "sh", "-c", "echo x > /dev/shm/pmcc-probe")
    assert on(hosts2, "h1", "cat", "/dev/shm/pmcc-probe").stdout.strip() == "x"
    assert on(hosts2, "h2", "cat", "/dev/shm/pmcc-probe").returncode != 0
    assert not __import__("os").path.exists("/dev/shm/pmcc-probe")
    key = on(hosts2, "h1", "ipcmk", "-M", "4096").stdout
    shmid = re.search(r"(\d+)", key).group(1)
    assert shmid in on(hosts2, "h1", "ipcs", "-m").stdout
    assert shmid not in on(hosts2, "h2", "ipcs", "-m").stdout.split()


def test_link_down_is_silent_and_link_up_restores(hosts2: tb.Cluster) -> None:
    assert can_reach(hosts2, "h1", "h2")
    hosts2.link_down("h2")
    assert not can_reach(hosts2, "h1", "h2")
    hosts2.link_up(2)
    deadline = time.monotonic() + 10
    while not can_reach(hosts2, "h1", "h2"):
        assert time.monotonic() < deadline, "the link did not come back"


def test_rate_kill_and_bad_input(hosts2: tb.Cluster) -> None:
    hosts2.set_rate("h1", "100mbit")
    assert "tbf" in subprocess.run(["tc", "qdisc", "show", "dev", hosts2.host("h1").link], capture_output=True,
                                   text=True).stdout
    hosts2.set_rate("h1", None)
    assert "tbf" not in subprocess.run(["tc", "qdisc", "show", "dev", hosts2.host("h1").link],
                                       capture_output=True, text=True).stdout
    sleeper = subprocess.Popen(hosts2.on_host("h2", ["sleep", "300"]))
    time.sleep(0.3)
    assert hosts2.kill("h2")
    assert sleeper.wait(timeout=10) != 0
    assert on(hosts2, "h2", "hostname").stdout.strip() == "h2"  # the host itself stays
    with pytest.raises(ValueError, match="rate='fast'"):
        hosts2.set_rate("h1", "fast")
    with pytest.raises(KeyError, match="h9"):
        hosts2.host("h9")
    with pytest.raises(ValueError, match="ranks_per_host"):
        hosts2.mpiexec_command(["true"], [1])
    with pytest.raises(ValueError, match="hosts=0"):
        tb.Cluster(0)


def test_state_file_attach_and_sweep_after_a_killed_run(tmp_path) -> None:
    code = ("import os, sys, pymcoll.testing.cluster as tb\n"
            "cl = tb.Cluster(2, rate='1gbit')\nprint(cl.state_file, flush=True)\nos.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    state = proc.stdout.strip()
    cl = tb.Cluster.attach(state)
    assert [h.name for h in cl.hosts] == ["h1", "h2"] and cl.rates == {"h1": "1gbit", "h2": "1gbit"}
    assert len(leftovers(cl.prefix)) >= 4  # two namespaces, two links and the bridge
    removed = tb.sweep(cl.prefix)
    assert cl.prefix + "h1" in removed and leftovers(cl.prefix) == [] and not cl.directory.exists()
    with pytest.raises(ValueError, match="prefix="):
        tb.sweep("other")
    bad = tmp_path / "state.json"
    bad.write_text("{}")
    with pytest.raises(tb.ClusterError, match="not a test bed's state file"):
        tb.Cluster.attach(bad)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("per_host", [2, (2, 1, 2)], ids=["2x2", "2-1-2"])
def test_collectives_across_real_hosts(per_host) -> None:
    hosts = 2 if isinstance(per_host, int) else len(per_host)
    with tb.Cluster(hosts) as cl:
        proc = cl.run([sys.executable, "-m", "mpi_programs.prop_collectives", "--examples", "3" if CI else "6",
                       "--max-bytes", "65536", "--forms", "blocking"], per_host, timeout=240, cwd=str(TESTS_DIR),
                      env=mpi_env())
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        # Every host is a node of its own: real nodes, one per host.
        assert f"on {hosts} node(s) (real nodes" in proc.stdout, proc.stdout[-2000:]
    assert leftovers(cl.prefix) == []


def _reader(proc: subprocess.Popen, lines: "queue.Queue[str]") -> None:
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))


class Loop:
    """mpi_programs.loop_until_cut on 2 ranks per host, its output read as it comes: the ranks'
    lines reach mpiexec's output unordered, at times run together, so they are searched as text."""

    def __init__(self, hosts: tb.Cluster, deadline_s: float) -> None:
        self.proc = hosts.launch([sys.executable, "-m", "mpi_programs.loop_until_cut"], 2, cwd=str(TESTS_DIR),
                                 env=mpi_env({"PYMCOLL_TIMEOUT": str(deadline_s)}))
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=_reader, args=(self.proc, self.lines), daemon=True).start()

    def text(self) -> str:
        return "\n".join(self.seen)

    def pump(self, until: float, done) -> None:
        """Reads lines until done() or the monotonic time `until`."""
        while not done() and time.monotonic() < until:
            try:
                self.seen.append(self.lines.get(timeout=0.5))
            except queue.Empty:
                pass

    def wait_looping(self, ranks: int) -> None:
        self.pump(time.monotonic() + 90, lambda: self.text().count("looping") >= ranks)
        assert self.text().count("looping") >= ranks, "the job did not start on every host:\n" + self.text()


@pytest.mark.timeout(200)
def test_cut_link_raises_within_the_deadline_on_the_other_host(hosts2: tb.Cluster) -> None:
    deadline_s = 5.0
    loop = Loop(hosts2, deadline_s)
    text, pump, proc = loop.text, loop.pump, loop.proc
    raised: dict[str, float] = {}
    try:
        loop.wait_looping(4)
        time.sleep(0.5)
        cut = time.time()
        hosts2.link_down("h2")
        pattern = re.compile(r"(rank \d+ on h1): raised (\w+) at ([\d.]+)")
        pump(time.monotonic() + deadline_s + 30, lambda: len(pattern.findall(text())) >= 2)
        for who, name, when in pattern.findall(text()):
            assert name in ("TimeoutError", "PeerFailedError"), text()
            raised[who] = float(when) - cut
    finally:
        hosts2.end_job(proc)
        proc.wait(timeout=30)
    log = text()
    assert "wrong data" not in log, log
    h1 = raised
    assert len(h1) == 2, log
    # Every rank of the other host raised within the deadline of its last wait (plus slack for
    # the round it was in when the link went down).
    assert all(0 < t <= deadline_s + 3 for t in h1.values()), h1


def test_cli_up_run_faults_down(tmp_path) -> None:
    state = str(tmp_path / "cluster.json")

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-P", "-m", "pymcoll", "cluster", "--state", state, *args],
                              capture_output=True, text=True, timeout=timeout, cwd=str(TESTS_DIR), env=mpi_env())

    up = cli("up", "2", "--rate", "1gbit")
    assert up.returncode == 0 and "2 hosts up" in up.stdout, up.stderr
    prefix = re.search(r"\((pmcc[0-9a-f]{4})\)", up.stdout).group(1)
    try:
        assert cli("up", "2").returncode == 2  # one cluster per state file
        assert "h2" in cli("show").stdout and "rate=1gbit" in cli("show").stdout
        # One write per line: the ranks' outputs reach mpiexec's interleaved write by write.
        code = ("import os, socket; from mpi4py import MPI\n"
                "os.write(1, f'host {MPI.COMM_WORLD.rank} {socket.gethostname()}\\n'.encode())")
        job = cli("run", "--per-host", "1,2", "--", sys.executable, "-c", code)
        assert job.returncode == 0, job.stderr
        assert sorted(re.findall(r"host (\d) (h\d)", job.stdout)) == [("0", "h1"), ("1", "h2"), ("2", "h2")]
        assert cli("link", "down", "h2").returncode == 0 and cli("link", "up", "h2").returncode == 0
        assert cli("rate", "h1", "none").returncode == 0 and "rate=none" in cli("show").stdout
        bad = cli("rate", "h1", "fast")
        assert bad.returncode == 2 and "rate='fast'" in bad.stderr
        assert cli("kill", "h9").returncode == 2
        assert cli("run", "--per-host", "1").returncode == 2  # no program
    finally:
        down = cli("down")
    assert down.returncode == 0 and leftovers(prefix) == []
    assert cli("show").returncode == 2 and "cluster up" in cli("show").stderr


# -- across hosts, outside CI (slow marker) -------------------------------------------------------

outside_ci = pytest.mark.skipif(CI, reason="runs outside CI (slow marker)")


@pytest.mark.slow
@outside_ci
@pytest.mark.timeout(200)
def test_killed_host_ends_the_job_without_a_hang(hosts2: tb.Cluster) -> None:
    deadline_s = 5.0
    loop = Loop(hosts2, deadline_s)
    proc = loop.proc
    loop.wait_looping(4)
    killed = time.monotonic()
    assert hosts2.kill("h2")
    # The job ends by itself: the ranks of h1 raise or are ended by mpiexec, whose proxy on h2 died.
    try:
        proc.wait(timeout=deadline_s + 30)
    finally:
        ended_after = time.monotonic() - killed
        hosts2.end_job(proc)
    loop.pump(time.monotonic() + 2, lambda: False)
    log = loop.text()
    assert "wrong data" not in log, log
    assert ended_after <= deadline_s + 30, (ended_after, log)
    for line in re.findall(r"rank \d+ on h1: raised .*", log):
        assert re.search(r"raised (TimeoutError|PeerFailedError|MPIError|Exception)", line), line


@pytest.mark.slow
@outside_ci
@pytest.mark.timeout(900)
def test_mpi4py_suite_across_hosts(tmp_path_factory, tmp_path) -> None:
    from test_mpi4py_suite import check_suite, fetch_suite

    suite_dir = fetch_suite(tmp_path_factory)
    with tb.Cluster(2) as cl:
        def launch(n: int, program: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
            proc = cl.run(program, n // 2, timeout=timeout, cwd=str(TESTS_DIR), env=mpi_env(env))
            if proc.returncode == 124:
                raise subprocess.TimeoutExpired(proc.args, timeout, proc.stdout, proc.stderr)
            return proc

        check_suite(4, {}, suite_dir, tmp_path, launch=launch, where="on 2 hosts ")


@pytest.mark.slow
@outside_ci
@pytest.mark.timeout(300)
def test_trace_analyzer_across_hosts(tmp_path) -> None:
    from pymcoll.trace import analyze

    with tb.Cluster(2) as cl:
        env = mpi_env({"PYMCOLL_TRACE": str(tmp_path / "straggler")})
        proc = cl.run([sys.executable, "-m", "mpi_programs.trace_faults", "straggler"], 2, timeout=120,
                      cwd=str(TESTS_DIR), env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = analyze(tmp_path / "straggler")
        # Two hosts: their names, and the realtime clock lines up the ranks of both.
        assert sorted(report.hosts) == ["h1", "h2"] and report.clock == "realtime", (report.hosts, report.clock)
        assert report.stragglers["stragglers"] == [2], report.paragraph
        env = mpi_env({"PYMCOLL_TRACE": str(tmp_path / "sleep"), "PYMCOLL_TIMEOUT": "2"})
        cl.run([sys.executable, "-m", "mpi_programs.trace_faults", "sleep", "6"], 2, timeout=120,
               cwd=str(TESTS_DIR), env=env)
        report = analyze(tmp_path / "sleep")
        assert report.hangs and report.hangs[0]["named"] == [3], report.paragraph
        assert "Hosts: rank 3 on h2." in report.paragraph, report.paragraph


@pytest.mark.slow
@outside_ci
@pytest.mark.timeout(300)
def test_preload_library_across_hosts(tmp_path) -> None:
    from test_pmpi import digests, preload_path

    try:
        library = preload_path()
    except (FileNotFoundError, ImportError) as exc:
        pytest.skip(f"no preload library in this install ({exc}): pip install . (not -e)")
    mpicc = shutil.which("mpicc")
    assert mpicc, "mpicc not found on PATH"
    exe = tmp_path / "check_collectives"
    built = subprocess.run([mpicc, "-std=c11", "-O1", "-o", str(exe), str(TESTS_DIR / "pmpi_programs" /
                                                                           "check_collectives.c")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    with tb.Cluster(2) as cl:
        plain = cl.run([str(exe)], 2, timeout=240, cwd=str(TESTS_DIR), env=mpi_env())
        # The library goes into the ranks only (env sets it for the program), not into mpiexec.
        ours = cl.run(["env", f"LD_PRELOAD={library}", str(exe)], 2, timeout=240, cwd=str(TESTS_DIR),
                      env=mpi_env())
    assert digests(ours) == digests(plain)


@pytest.mark.slow
@outside_ci
@pytest.mark.timeout(300)
def test_rank_behind_a_slow_link_is_named_the_straggler(tmp_path) -> None:
    from pymcoll.trace import analyze

    with tb.Cluster(2) as cl:
        cl.set_rate("h2", "100mbit")  # 1 MiB takes about 84 ms to reach rank 2, alone on h2
        proc = cl.run([sys.executable, "-m", "mpi_programs.bcast_then_allreduce", "12", str(1 << 20)], (2, 1),
                      timeout=200, cwd=str(TESTS_DIR), env=mpi_env({"PYMCOLL_TRACE": str(tmp_path)}))
        assert proc.returncode == 0 and proc.stdout.count("loop ok") == 3, proc.stdout + proc.stderr[-3000:]
    report = analyze(tmp_path)
    assert report.stragglers["stragglers"] == [2], report.paragraph
    assert "Hosts: rank 2 on h2." in report.paragraph, report.paragraph
