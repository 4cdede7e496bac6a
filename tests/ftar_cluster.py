"""A coordinator and replica processes on loopback, for FTAR's end-to-end tests.

Replicas are `python -m ftar_programs.<program>` subprocesses (cwd tests/)
that print one JSON object per line; a reader thread per process collects
them, so tests can wait for events with deadlines and never hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

TESTS_DIR = Path(__file__).resolve().parent
TOKEN = "ftar-test-token-0123456789"


class Proc:
    """One subprocess with its JSON events and stderr collected."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.cmd = cmd
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.lock = threading.Condition()
        self.p = subprocess.Popen(cmd, cwd=TESTS_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, bufsize=1)
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                ev = {"ev": "text", "text": line.rstrip()}
            ev.setdefault("t", time.monotonic())
            with self.lock:
                self.events.append(ev)
                self.lock.notify_all()

    def _read_err(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            with self.lock:
                self.stderr.append(line)

    def wait_event(self, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str = "") -> dict[str, Any]:
        """The first event satisfying pred (waiting up to timeout s)."""
        end = time.monotonic() + timeout
        with self.lock:
            while True:
                for ev in self.events:
                    if pred(ev):
                        return ev
                left = end - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not any(t.is_alive() for t in self._threads[:1])):
                    raise AssertionError(f"{self.name}: no event {what} within {timeout} s\n{self.report()}")
                self.lock.wait(min(left, 0.2))

    def committed(self) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e.get("ev") == "commit"]

    def signal(self, sig: int) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not finish within {timeout} s\n{self.report()}") from None

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)
        for t in self._threads:
            t.join(5)

    def report(self) -> str:
        with self.lock:
            evs = "\n".join(json.dumps(e) for e in self.events[-25:])
            err = "".join(self.stderr[-40:])
        return f"--- {self.name} ({' '.join(self.cmd[-6:])}) events:\n{evs}\n--- stderr:\n{err}"


class Cluster:
    """A coordinator subprocess plus replicas; everything is killed on close."""

    def __init__(self, tmp: Path, min_replicas: int = 1, evict_ms: int = 1000, heartbeat_ms: int = 50,
                 join_timeout_ms: int = 500, env: Optional[dict[str, str]] = None) -> None:
        self.tmp = tmp
        self.env = dict(os.environ)
        for k in list(self.env):
            if k.startswith("PYMCOLL_"):
                del self.env[k]
        self.env["PYMCOLL_FTAR_TOKEN"] = TOKEN
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in [str(TESTS_DIR), self.env.get("PYTHONPATH", "")] if p)
        self.env.update(env or {})
        self.coord_args = ["--min-replicas", str(min_replicas), "--evict-ms", str(evict_ms),
                           "--heartbeat-ms", str(heartbeat_ms), "--join-timeout-ms", str(join_timeout_ms)]
        self.addr = ""
        self.coordinator: Optional[Proc] = None
        self.replicas: dict[str, Proc] = {}
        self.retired: list[Proc] = []
        self.start_coordinator("127.0.0.1:0")

    def start_coordinator(self, bind: str) -> None:
        addr_file = self.tmp / f"coord-{time.monotonic_ns()}.addr"
        cmd = [sys.executable, "-m", "pymcoll", "ftar-coordinator", "--bind", bind, "--addr-file", str(addr_file),
               *self.coord_args]
        self.coordinator = Proc("coordinator", cmd, self.env)
        end = time.monotonic() + 30
        while not addr_file.exists():
            if time.monotonic() > end or self.coordinator.p.poll() is not None:
                raise AssertionError("the coordinator did not start\n" + self.coordinator.report())
            time.sleep(0.02)
        self.addr = addr_file.read_text().strip()

    def kill_coordinator(self) -> None:
        assert self.coordinator is not None
        self.coordinator.signal(signal.SIGKILL)
        self.coordinator.wait(10)
        self.retired.append(self.coordinator)

    def start(self, rid: str, program: str, *args: str, env: Optional[dict[str, str]] = None) -> Proc:
        cmd = [sys.executable, "-m", f"ftar_programs.{program}", "--coordinator", self.addr, "--id", rid, *args]
        e = dict(self.env)
        e.update(env or {})
        if rid in self.replicas:
            self.retired.append(self.replicas[rid])
        proc = Proc(rid, cmd, e)
        self.replicas[rid] = proc
        return proc

    def start_together(self, specs: list[tuple[str, str, list[str], Optional[dict[str, str]]]]) -> list[Proc]:
        """Starts replicas (id, program, args, env) and lets them take their first
        step only once all are up, so the first quorum has all of them."""
        go = self.tmp / f"go-{time.monotonic_ns()}"
        procs = [self.start(rid, prog, *args, "--start-file", str(go), env=env) for rid, prog, args, env in specs]
        for p in procs:
            p.wait_event(lambda e: e["ev"] == "ready", 60, "ready")
        time.sleep(0.3)  # their control threads have joined by now
        go.touch()
        return procs

    def report(self) -> str:
        procs = ([self.coordinator] if self.coordinator else []) + list(self.replicas.values()) + self.retired
        return "\n".join(p.report() for p in procs)

    def close(self) -> None:
        for p in list(self.replicas.values()) + self.retired + ([self.coordinator] if self.coordinator else []):
            p.stop()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
