"""``python -m pymcoll ftar-coordinator`` and the argument handling of
pymcoll.ftar: the token never comes from the command line and a missing one
is named; the coordinator binds port 0, writes its address file and exits 0
on SIGTERM/SIGINT; importing pymcoll.ftar loads neither MPI nor the MPI core."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

TOKEN = "cli-test-token-0123456789"
COORD = [sys.executable, "-P", "-m", "pymcoll", "ftar-coordinator"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYMCOLL_")}
    env.update(extra)
    return env


def run_coord(args: list[str], tmp_path: Path, env: Optional[dict[str, str]] = None,
              timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(COORD + args, cwd=tmp_path, env=env if env is not None else clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_missing_token_is_named_and_exits_2(tmp_path: Path) -> None:
    proc = run_coord(["--bind", "127.0.0.1:0"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "PYMCOLL_FTAR_TOKEN" in proc.stderr and "--token-file" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["--token", "s3cret"], ["--token=s3cret"], ["--token"], ["--tok", "s3cret"]])
def test_token_is_not_a_command_line_option(tmp_path: Path, args: list[str]) -> None:
    proc = run_coord(["--bind", "127.0.0.1:0", *args], tmp_path, env=clean_env(PYMCOLL_FTAR_TOKEN=TOKEN))
    assert proc.returncode == 2, proc.stderr
    assert "--token-file" in proc.stderr or "unrecognized" in proc.stderr
    assert "listening" not in proc.stderr


def test_help_offers_the_token_file_only() -> None:
    proc = subprocess.run(COORD + ["--help"], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "--token-file" in proc.stdout and "--addr-file" in proc.stdout and "--min-replicas" in proc.stdout
    assert "--token " not in proc.stdout and "--token\n" not in proc.stdout


@pytest.mark.parametrize("args,text", [
    (["--bind", "localhost"], "--bind"),
    (["--bind", "127.0.0.1:70000"], "--bind"),
    (["--min-replicas", "0"], "--min-replicas"),
    (["--heartbeat-ms", "soon"], "--heartbeat-ms"),
    (["--heartbeat-ms", "500", "--evict-ms", "400"], "--evict-ms"),
    (["--token-file", "does-not-exist"], "--token-file"),
    (["--addr-file", "no/such/dir/addr"], "--addr-file"),
])
def test_bad_options_are_named(tmp_path: Path, args: list[str], text: str) -> None:
    proc = run_coord(args, tmp_path, env=clean_env(PYMCOLL_FTAR_TOKEN=TOKEN))
    assert proc.returncode == 2, proc.stderr
    assert text in proc.stderr and "Traceback" not in proc.stderr


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    proc = run_coord(["--token-file", "token"], tmp_path)
    assert proc.returncode == 2 and "empty" in proc.stderr


def start_coordinator(tmp_path: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen, str]:
    addr_file = tmp_path / "coord.addr"
    proc = subprocess.Popen(COORD + ["--bind", "127.0.0.1:0", "--addr-file", str(addr_file), *extra],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 30
    while not addr_file.exists():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the coordinator did not write {addr_file} (exit {proc.returncode}):\n{err}")
        time.sleep(0.02)
    text = addr_file.read_text()
    assert text.endswith("\n") and text.count("\n") == 1
    return proc, text.strip()


@pytest.mark.parametrize("how,sig", [("env", signal.SIGTERM), ("file", signal.SIGTERM), ("env", signal.SIGINT)])
def test_port_zero_addr_file_and_clean_exit_on_signal(tmp_path: Path, how: str, sig: int) -> None:
    if how == "file":
        (tmp_path / "token").write_text(TOKEN + "\n")
        (tmp_path / "token").chmod(0o600)
        env, extra = clean_env(), ["--token-file", "token"]
    else:
        env, extra = clean_env(PYMCOLL_FTAR_TOKEN=TOKEN), []
    proc, addr = start_coordinator(tmp_path, env, *extra)
    try:
        host, _, port = addr.rpartition(":")
        assert host == "127.0.0.1" and 0 < int(port) < 65536
        with socket.create_connection((host, int(port)), timeout=10):
            pass  # it listens where the file says
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"ftar-coordinator listening on {addr}" in err
    assert TOKEN not in err + out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ftar-addr.")]  # no temporary file left


def test_quiet_coordinator_serves_a_member(tmp_path: Path) -> None:
    """A member authenticated by the same token forms a quorum of one and commits a step."""
    np = pytest.importorskip("numpy")
    from pymcoll.ftar import Member, Status

    proc, addr = start_coordinator(tmp_path, clean_env(PYMCOLL_FTAR_TOKEN=TOKEN), "--quiet")
    try:
        with Member(addr, "solo", token=TOKEN, timeout=20) as m:
            info = m.begin_step(0)
            assert info.ok and info.step == 0 and info.n_members == 1 and not info.healing
            x = np.arange(10, dtype=np.float32)
            res = m.allreduce(x)
            assert res.status is Status.OK and res.n_contrib == 1 and np.array_equal(res.result, x)
            assert m.commit(0) and m.last_status is Status.OK and m.committed_step == 0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert err.strip().splitlines()[0] == f"ftar-coordinator listening on {addr}"  # --quiet: no event lines


def test_import_loads_neither_mpi_nor_the_core(tmp_path: Path) -> None:
    code = ("import sys, pymcoll.ftar, pymcoll.ftar.state, pymcoll.ftar.training, pymcoll.cli.ftar_coordinator;"
            "bad = [m for m in ('mpi4py', 'pymcoll._core', 'torch') if m in sys.modules];"
            "assert not bad, bad; assert 'pymcoll._ftar' in sys.modules")
    subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, env=clean_env(), check=True, timeout=120)


# --- pymcoll.ftar arguments (checked before anything connects) -------------------

def test_token_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pymcoll.ftar import resolve_token

    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN", raising=False)
    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN_FILE", raising=False)
    with pytest.raises(ValueError) as err:
        resolve_token()
    assert all(s in str(err.value) for s in ("PYMCOLL_FTAR_TOKEN", "token", "token_file"))
    monkeypatch.setenv("PYMCOLL_FTAR_TOKEN", "från-env")
    assert resolve_token() == "från-env".encode()
    assert resolve_token("arg") == b"arg" and resolve_token(b"\x00\xff") == b"\x00\xff"
    (tmp_path / "tok").write_bytes(b"  from-file\r\n")
    assert resolve_token(token_file=str(tmp_path / "tok")) == b"from-file"
    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN")
    monkeypatch.setenv("PYMCOLL_FTAR_TOKEN_FILE", str(tmp_path / "tok"))
    assert resolve_token() == b"from-file"
    with pytest.raises(ValueError, match="not both"):
        resolve_token("a", token_file=str(tmp_path / "tok"))
    with pytest.raises(ValueError, match="empty"):
        resolve_token("")
    with pytest.raises(ValueError, match="token_file"):
        resolve_token(token_file=str(tmp_path / "missing"))


@pytest.mark.parametrize("kwargs,exc,text", [
    (dict(coordinator="localhost"), ValueError, "coordinator"),
    (dict(coordinator="127.0.0.1:0"), ValueError, "coordinator"),
    (dict(coordinator="::1:29400"), ValueError, "IPv6"),
    (dict(replica_id=""), ValueError, "replica_id"),
    (dict(replica_id="a b"), ValueError, "replica_id"),
    (dict(replica_id="x" * 64), ValueError, "replica_id"),
    (dict(streams=0), ValueError, "streams"),
    (dict(chunk_bytes=1001), ValueError, "chunk_bytes"),
    (dict(timeout=0), ValueError, "timeout"),
    (dict(committed_step=-2), ValueError, "committed_step"),
    (dict(log="yes"), ValueError, "log"),
    (dict(token=None), ValueError, "PYMCOLL_FTAR_TOKEN"),
])
def test_member_arguments_are_checked(monkeypatch: pytest.MonkeyPatch, kwargs: dict, exc: type, text: str) -> None:
    from pymcoll.ftar import Member

    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN", raising=False)
    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN_FILE", raising=False)
    args = dict(coordinator="127.0.0.1:29400", replica_id="r0", token="t")
    args.update(kwargs)
    with pytest.raises(exc, match=text):
        Member(args.pop("coordinator"), args.pop("replica_id"), **args)


def test_member_without_coordinator_reports_it_and_closed_member_refuses() -> None:
    from pymcoll.ftar import FtarError, Member, Status

    with socket.socket() as s:  # a port with no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = Member(f"127.0.0.1:{port}", "r0", token="t", timeout=0.5)
    info = m.begin_step(0)  # the member connects in the background: its first call reports the failure
    assert info.status is Status.COORDINATOR_LOST and not info.ok
    m.close()
    m.close()  # idempotent
    assert m.closed
    for call in (lambda: m.begin_step(0), lambda: m.commit(0), lambda: m.committed_step,
                 lambda: m.fetch_state(0), lambda: m.publish_state(0, b"x")):
        with pytest.raises(FtarError, match="closed"):
            call()


# --- pymcoll.ftar.Coordinator, served by this process ----------------------------

@pytest.mark.parametrize("kwargs,exc,text", [
    (dict(bind="localhost"), ValueError, "bind"),
    (dict(bind="127.0.0.1:70000"), ValueError, "bind"),
    (dict(min_replicas=0), ValueError, "min_replicas"),
    (dict(min_replicas=2.0), TypeError, "min_replicas"),
    (dict(heartbeat_ms=500, evict_ms=400), ValueError, "evict_ms"),
    (dict(join_timeout_ms=0), ValueError, "join_timeout_ms"),
    (dict(log="yes"), ValueError, "log"),
    (dict(token=None), ValueError, "PYMCOLL_FTAR_TOKEN"),
])
def test_coordinator_arguments_are_checked(monkeypatch: pytest.MonkeyPatch, kwargs: dict, exc: type,
                                           text: str) -> None:
    from pymcoll.ftar import Coordinator

    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN", raising=False)
    monkeypatch.delenv("PYMCOLL_FTAR_TOKEN_FILE", raising=False)
    args = dict(token=TOKEN, log=False)
    args.update(kwargs)
    with pytest.raises(exc, match=text):
        Coordinator(**args)


def test_coordinator_in_a_thread_serves_a_member_and_closes() -> None:
    np = pytest.importorskip("numpy")
    from pymcoll.ftar import Coordinator, FtarError, Member

    with Coordinator(token=TOKEN, log=False) as coord:
        host, _, port = coord.address.rpartition(":")
        assert host == "127.0.0.1" and 0 < int(port) < 65536 and not coord.serving
        with pytest.raises(FtarError, match="in use"):  # its port is taken while it lives
            Coordinator(coord.address, token=TOKEN, log=False)
        assert coord.start() is coord and coord.serving
        with pytest.raises(FtarError, match="already serving"):
            coord.start()
        with Member(coord.address, "solo", token=TOKEN, timeout=20) as m:
            assert m.begin_step(0).ok
            assert m.allreduce(np.ones(3, np.float32)).ok and m.commit(0)
    assert coord.closed and not coord.serving and "closed" in repr(coord)
    coord.close()  # idempotent
    with pytest.raises(FtarError, match="closed"):
        coord.start()


def test_coordinator_serve_ends_on_a_stop_signal_and_restores_the_handler() -> None:
    from pymcoll.ftar import Coordinator

    before = signal.getsignal(signal.SIGUSR1)
    with Coordinator(token=TOKEN, log=False) as coord:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        try:
            assert coord.serve(stop_signals=(signal.SIGUSR1,)) == signal.SIGUSR1
        finally:
            timer.cancel()
        assert not coord.serving
    assert signal.getsignal(signal.SIGUSR1) is before


def test_coordinator_serve_outside_the_main_thread_needs_no_signals() -> None:
    from pymcoll.ftar import Coordinator

    errors: list[BaseException] = []
    results: list[object] = []
    with Coordinator(token=TOKEN, log=False) as coord:
        def serve() -> None:
            try:
                coord.serve()
            except ValueError as exc:
                errors.append(exc)
            results.append(coord.serve(stop_signals=()))

        thread = threading.Thread(target=serve)
        thread.start()
        deadline = time.monotonic() + 10
        while not coord.serving and time.monotonic() < deadline:
            time.sleep(0.01)
        coord.stop()
        thread.join(10)
    assert not thread.is_alive() and results == [None]
    assert errors and "stop_signals=()" in str(errors[0])


# --- a group of one replica, served by the command ------------------------------

@pytest.fixture
def coordinator_addr(tmp_path: Path):
    proc, addr = start_coordinator(tmp_path, clean_env(PYMCOLL_FTAR_TOKEN=TOKEN), "--quiet")
    yield addr
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_allreduce_arguments_are_checked(coordinator_addr: str) -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    from pymcoll.ftar import FtarError, Member, Status

    with Member(coordinator_addr, "solo", token=TOKEN, timeout=20) as m:
        assert m.begin_step(0).ok
        x = np.arange(12, dtype=np.float64).reshape(3, 4)
        with pytest.raises(ValueError, match="out"):
            m.allreduce(x, out=x)  # in place: x would not survive an abort
        with pytest.raises(ValueError, match="out"):
            m.allreduce(x.reshape(-1)[:8], out=x.reshape(-1)[4:])  # overlapping
        with pytest.raises(ValueError, match="contiguous"):
            m.allreduce(x.T)
        with pytest.raises(ValueError, match="out"):
            m.allreduce(x, out=np.empty((4, 3)))
        with pytest.raises(ValueError, match="out"):
            m.allreduce(x, out=np.empty((3, 4), np.float32))
        with pytest.raises(TypeError, match="dtype"):
            m.allreduce(x.astype(np.uint8))
        with pytest.raises(TypeError, match="dtype"):
            m.allreduce(x.astype(">f8"))
        with pytest.raises(TypeError, match="numpy array or a torch tensor"):
            m.allreduce([1.0, 2.0])
        with pytest.raises(ValueError, match="op"):
            m.allreduce(x, op="prod")
        with pytest.raises(TypeError, match="out"):
            m.allreduce(torch.ones(4), out=np.empty(4, np.float32))
        # numpy: out given, the input untouched; max over one member is the input
        out = np.full_like(x, -1.0)
        res = m.allreduce(x, out=out, op="max")
        assert res.ok and res.result is out and np.array_equal(out, x) and res.n_contrib == 1
        # torch, bfloat16 included; a new tensor of the same kind when out is None
        for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.int64):
            t = torch.arange(10).to(dtype)
            res = m.allreduce(t)
            assert res.ok and isinstance(res.result, torch.Tensor) and res.result.dtype == dtype
            assert torch.equal(res.result, t) and res.result.data_ptr() != t.data_ptr()
        with pytest.raises(ValueError, match="contiguous"):
            m.allreduce(torch.ones(4, 4).t())
        res = m.allreduce(np.ones(5, np.float32), contribute=False)
        assert res.ok and res.n_contrib == 0 and not res.result.any()
        assert m.commit(0)
        m.publish_state(0, b"state")
        with pytest.raises(FtarError) as err:  # a group of one has no donor
            m.fetch_state(0)
        assert err.value.status is Status.ABORTED


def test_trainer_in_a_group_of_one_matches_plain_training(coordinator_addr: str) -> None:
    torch = pytest.importorskip("torch")
    from pymcoll.ftar import Member, Status
    from pymcoll.ftar.state import state_hash
    from pymcoll.ftar.training import FaultTolerantTrainer

    def make() -> tuple:
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        model[0].bias.requires_grad_(False)  # a frozen parameter is not reduced
        return model, torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9)

    def loss(model, step: int):
        g = torch.Generator().manual_seed(step)
        return model(torch.randn(4, 8, generator=g)).square().mean()

    ref, ref_opt = make()
    for step in range(5):
        ref_opt.zero_grad()
        loss(ref, step).backward()
        ref_opt.step()

    model, opt = make()
    events: list[dict] = []
    with Member(coordinator_addr, "solo", token=TOKEN, timeout=20) as m:
        trainer = FaultTolerantTrainer(m, model, opt, on_event=events.append)
        assert trainer.step == 0 and trainer.up_to_date
        for step in range(5):
            report = trainer.train_step(lambda s: loss(model, s).backward())
            assert report.committed and report.status is Status.OK and report.step == step
            assert report.n_contrib == 1 and not report.healing and report.retries == 0
        assert trainer.step == 5 and m.committed_step == 4
    assert trainer.state_hash() == state_hash(ref, ref_opt)
    assert not [e for e in events if e["event"] != "published"]
    with pytest.raises(ValueError, match="policy"):
        FaultTolerantTrainer(m, model, opt, policy="hope")
