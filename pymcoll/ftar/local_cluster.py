"""An FTAR group on this machine: a coordinator and replica processes on loopback, for tests, benchmarks and demos.

:class:`LocalCluster` starts ``python -m pymcoll ftar-coordinator`` on a free
loopback port with a fresh random job token, and replica processes from any
command line; it kills (SIGKILL) and restarts them, and collects what each
prints on stdout as events, one JSON object per line (by convention with an
``"ev"`` field naming its kind)::

    import sys
    from pymcoll.ftar.local_cluster import LocalCluster

    with LocalCluster() as cluster:
        cluster.start_coordinator(min_replicas=2)
        argv = lambda rid: [sys.executable, "replica.py", "--coordinator", cluster.address, "--id", rid]
        r0, r1 = (cluster.start(rid, argv(rid)) for rid in ("r0", "r1"))
        r0.wait_for(lambda ev: ev.get("ev") == "commit", timeout=60, what="a commit")
        cluster.kill("r1")
        r1 = cluster.restart("r1")          # the same command line and environment
        r1.wait_for(lambda ev: ev.get("ev") == "healed", timeout=60, what="catch-up")
    # leaving the block killed every process it started, also after an exception

What it guarantees:

* **The token never appears on a command line.** It is in a file readable by
  the owner only (``token_via="file"``: every process gets
  ``PYMCOLL_FTAR_TOKEN_FILE``) or in the environment (``token_via="env"``:
  ``PYMCOLL_FTAR_TOKEN``). A process's own ``env`` may override it (a
  replica with a wrong token, say). ``PYMCOLL_FTAR_*`` variables of the base
  environment are not passed on (a stale token or fault spec would leak).
* **Every wait is bounded.** :meth:`LocalProcess.wait_for` takes a timeout and
  raises :class:`LocalClusterError` (its message holds the process's exit
  status, latest events and the end of its stderr) at the deadline, or as soon
  as the process has exited without the event.
* **No process outlives the cluster.** Each process runs in its own session
  (a terminal's Ctrl-C reaches only the caller, which then closes the
  cluster), is killed with its process group on :meth:`LocalCluster.close`,
  and, on Linux, is killed by the kernel when the thread that started it
  dies (``die_with_parent``; start processes from a thread that lives as long
  as the cluster, the main thread say). ``time_limit_s`` adds a hard limit
  (SIGALRM) to every process.

Each process's stderr goes to ``<directory>/<name>.<incarnation>.log`` (or
to this process's stderr with ``stderr="inherit"``); its stdin is closed
unless ``stdin=True`` (then :meth:`LocalProcess.write_line`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Optional, Sequence, Union

from .address import TOKEN_ENV, TOKEN_FILE_ENV

__all__ = ["LocalCluster", "LocalProcess", "CoordinatorProcess", "LocalClusterError", "Event", "EventCallback",
           "ReplicaSpec"]

Event = dict[str, Any]
"""One JSON object a process printed on a line of its stdout (a line that is not one: ``{"ev": "text", "text": ...}``);
``"t"`` is set to the time it was read (``time.monotonic()``) unless the process set it."""

EventCallback = Callable[["LocalProcess", Optional[Event]], None]
"""Called from a reader thread with each event as it is read, and with None when the process's stdout ends."""

ReplicaSpec = Union[tuple[str, Sequence[str]], tuple[str, Sequence[str], Optional[Mapping[str, Optional[str]]]]]
"""(name, argv) or (name, argv, env) for :meth:`LocalCluster.start_together`."""

_NAME = re.compile(r"[A-Za-z0-9._-]{1,63}")
_KILL_WAIT_S = 10.0
_REPORT_EVENTS = 25
_REPORT_LINES = 40

# Runs first in every child (python -I -S -c): the kernel kills the child when the thread that started it
# dies (PR_SET_PDEATHSIG, kept across exec), an alarm sets the hard time limit, then the real command
# replaces it. Done by a program rather than a preexec_fn, which is unsafe once the reader threads run.
_GUARD = """
import ctypes, os, signal, sys
parent, limit = int(sys.argv[1]), int(sys.argv[2])
if parent > 0 and sys.platform.startswith("linux"):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(137)
for s in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)
if limit > 0:
    signal.alarm(limit)
os.execvp(sys.argv[3], sys.argv[3:])
"""


class LocalClusterError(RuntimeError):
    """A process of a :class:`LocalCluster` did not do what was waited for (the message says what it did)."""


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"name={name!r} must be 1 to 63 characters of [A-Za-z0-9._-] (it names the log file), "
                         f"e.g. 'r0'")
    return name


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _check_timeout(timeout: float, name: str = "timeout") -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < 1e7:
        raise ValueError(f"{name}={timeout!r} must be a number of seconds >= 0 (every wait is bounded)")
    return float(timeout)


class LocalProcess:
    """One process of a :class:`LocalCluster` (one incarnation of a name): its events, stderr and exit.

    Made by :meth:`LocalCluster.start`; ``name`` and ``incarnation`` (0, then
    1, 2, ... for each restart under the same name) say which it is;
    ``started_at`` and ``exited_at`` are ``time.monotonic()`` values.
    """

    def __init__(self, name: str, incarnation: int, argv: Sequence[str], *, launch: Sequence[str],
                 env: Mapping[str, str], env_overrides: Mapping[str, Optional[str]], cwd: Path,
                 stderr_path: Optional[Path], stdin: bool, on_event: Optional[EventCallback]) -> None:
        self.name = name
        self.incarnation = incarnation
        self.argv = list(argv)
        self.env_overrides = dict(env_overrides)
        self.cwd = cwd
        self.stdin = stdin
        self.stderr_path = stderr_path
        self.exited_at: Optional[float] = None
        self._events: list[Event] = []
        self._eof = False
        self._cond = threading.Condition()
        self._on_event = on_event
        if stderr_path is None:
            err: Any = None
            self._popen = self._spawn(launch, env, cwd, err)
        else:
            with open(stderr_path, "wb") as err:
                self._popen = self._spawn(launch, env, cwd, err)
        self.started_at = time.monotonic()
        self.pid: int = self._popen.pid
        self._threads = [threading.Thread(target=self._read, name=f"ftar-local-{name}-out", daemon=True),
                         threading.Thread(target=self._reap, name=f"ftar-local-{name}-wait", daemon=True)]
        for t in self._threads:
            t.start()

    def _spawn(self, launch: Sequence[str], env: Mapping[str, str], cwd: Path, err: Any) -> subprocess.Popen:
        return subprocess.Popen(list(launch), cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL, text=True, bufsize=1,
                                start_new_session=True)

    # --- the threads that watch it ---------------------------------------------

    def _read(self) -> None:
        assert self._popen.stdout is not None
        for line in self._popen.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                ev = None
            if not isinstance(ev, dict):
                ev = {"ev": "text", "text": line.rstrip("\n")}
            ev.setdefault("t", time.monotonic())
            with self._cond:
                self._events.append(ev)
                self._cond.notify_all()
            self._notify(ev)
        with self._cond:
            self._eof = True
            self._cond.notify_all()
        self._notify(None)

    def _notify(self, ev: Optional[Event]) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(self, ev)
        except Exception:  # the events must still be collected: report and go on
            print(f"pymcoll.ftar.local_cluster: the on_event callback failed for {self.name}:", file=sys.stderr)
            traceback.print_exc()

    def _reap(self) -> None:
        self._popen.wait()
        with self._cond:
            self.exited_at = time.monotonic()
            self._cond.notify_all()

    # --- state -------------------------------------------------------------------

    @property
    def returncode(self) -> Optional[int]:
        """The exit status (negative: killed by that signal), None while it runs."""
        return self._popen.poll()

    @property
    def running(self) -> bool:
        """True until the process has exited."""
        return self._popen.poll() is None

    @property
    def events(self) -> list[Event]:
        """Every event read so far, in order (a copy)."""
        with self._cond:
            return list(self._events)

    def events_of(self, kind: str) -> list[Event]:
        """The events read so far whose ``"ev"`` is `kind`."""
        with self._cond:
            return [e for e in self._events if e.get("ev") == kind]

    def stderr(self) -> str:
        """Everything the process wrote to stderr so far ("" with ``stderr="inherit"``)."""
        if self.stderr_path is None:
            return ""
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def recent_stderr(self, lines: int = _REPORT_LINES) -> str:
        """The last `lines` lines of its stderr."""
        if self.stderr_path is None:
            return "(stderr not captured: stderr='inherit')\n"
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError as exc:
            return f"(cannot read {self.stderr_path}: {exc.strerror or exc})\n"

    def report(self, events: int = _REPORT_EVENTS, lines: int = _REPORT_LINES) -> str:
        """Its command, exit status, last `events` events and last `lines` lines of stderr, for error messages."""
        with self._cond:
            recent = self._events[-events:]
        code = self.returncode
        state = "running" if code is None else f"exited with status {code}"
        shown = " ".join(self.argv if len(self.argv) <= 12 else self.argv[:3] + ["..."] + self.argv[-8:])
        return (f"--- {self.name} (incarnation {self.incarnation}, pid {self.pid}, {state}): {shown}\n"
                f"--- its last {len(recent)} events:\n" + "".join(_shorten(json.dumps(e)) + "\n" for e in recent)
                + f"--- the end of its stderr:\n{self.recent_stderr(lines)}")

    # --- waiting -------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[Event], bool], timeout: float, what: str = "") -> Event:
        """The first event (already read or still to come) for which `predicate` is true.

        Raises LocalClusterError after `timeout` seconds, or as soon as the
        process's output has ended without such an event; the message names
        `what` (default: the predicate) and holds :meth:`report`.
        """
        timeout = _check_timeout(timeout)
        end = time.monotonic() + timeout
        checked = 0
        with self._cond:
            while True:
                for ev in self._events[checked:]:
                    if predicate(ev):
                        return ev
                checked = len(self._events)
                if self._eof:
                    reason = "its output ended without it"
                    break
                left = end - time.monotonic()
                if left <= 0:
                    reason = f"not within {timeout:g} s"
                    break
                self._cond.wait(min(left, 0.5))
        wanted = what or "matching the predicate"
        raise LocalClusterError(f"{self.name}: no event {wanted}: {reason}\n{self.report()}")

    def wait(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for the process to exit; its exit status (LocalClusterError at the deadline)."""
        timeout = _check_timeout(timeout)
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise LocalClusterError(f"{self.name} did not exit within {timeout:g} s\n{self.report()}") from None

    # --- acting on it --------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the process (not its group) while it runs, e.g. SIGSTOP and SIGCONT."""
        if self._popen.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self, timeout: float = _KILL_WAIT_S) -> int:
        """SIGKILL the process and its process group; wait up to `timeout` s; its exit status."""
        self._kill_group()
        return self.wait(timeout)

    def _kill_group(self) -> None:
        # The whole group: what the process started dies with it. The group outlives its leader, so
        # this is done even when the process itself has exited.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self._popen.poll() is None:
                try:
                    self._popen.kill()
                except ProcessLookupError:
                    pass

    def write_line(self, text: str) -> None:
        """Write `text` and a newline to the process's stdin (started with ``stdin=True``)."""
        if self._popen.stdin is None:
            raise LocalClusterError(f"{self.name}: write_line needs a process started with stdin=True")
        self._popen.stdin.write(text + "\n")
        self._popen.stdin.flush()

    def _close(self, timeout: float) -> None:
        """Kill, wait and release the pipes and threads (bounded; used by LocalCluster.close)."""
        self._kill_group()
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        for t in self._threads:
            t.join(timeout)
        for f in (self._popen.stdin, self._popen.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    def __repr__(self) -> str:
        code = self.returncode
        return (f"<LocalProcess {self.name}.{self.incarnation} pid {self.pid} "
                f"{'running' if code is None else f'exited {code}'}>")


class CoordinatorProcess(LocalProcess):
    """A ``python -m pymcoll ftar-coordinator`` process; ``address`` is the "HOST:PORT" it listens on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.address = ""
        self.settings: dict[str, Any] = {}


class LocalCluster:
    """A coordinator and replica processes on this machine; a context manager that kills them all on exit.

    Parameters:
        directory: where the token file and the processes' stderr logs go (default: a new temporary
            directory, removed on :meth:`close`; a given one is kept).
        env: the base environment of every process (default ``os.environ``); its ``PYMCOLL_FTAR_*``
            variables are dropped and the token's is added.
        cwd: the working directory of the replicas (default: `directory`); the coordinator runs in
            `directory`, so that ``-m pymcoll`` finds the installed package rather than a source tree.
        token_via: "file" (``PYMCOLL_FTAR_TOKEN_FILE`` names a file only the owner can read) or "env"
            (``PYMCOLL_FTAR_TOKEN``).
        time_limit_s: a hard limit on every process's life (SIGALRM; whole seconds); None for none.
        die_with_parent: on Linux, the kernel kills each process when the thread that started it dies.
        on_event: called from the reader threads with (process, event) for every event as it is read,
            and (process, None) when a process's stdout ends; for a live view of many processes.
    """

    def __init__(self, directory: Union[str, os.PathLike[str], None] = None, *,
                 env: Optional[Mapping[str, str]] = None, cwd: Union[str, os.PathLike[str], None] = None,
                 token_via: Literal["file", "env"] = "file", time_limit_s: Optional[float] = None,
                 die_with_parent: bool = True, on_event: Optional[EventCallback] = None) -> None:
        if token_via not in ("file", "env"):
            raise ValueError(f"token_via={token_via!r}: expected 'file' or 'env' (never the command line)")
        if time_limit_s is not None and (_check_timeout(time_limit_s, "time_limit_s") < 1):
            raise ValueError(f"time_limit_s={time_limit_s!r} must be at least 1 second, or None for no limit")
        if on_event is not None and not callable(on_event):
            raise TypeError("on_event must be a callable taking (process, event), or None")
        self._own_directory = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="ftar-cluster-") if directory is None else directory)
        if not self.directory.is_dir():
            raise ValueError(f"directory={str(directory)!r} is not a directory; name an existing one or pass None")
        self.cwd = Path(cwd) if cwd is not None else self.directory
        self.time_limit_s = time_limit_s
        self.die_with_parent = die_with_parent
        self.on_event = on_event
        self.token = secrets.token_hex(32)
        """The job token of this cluster (never written on a command line)."""
        base = dict(os.environ if env is None else env)
        self.env: dict[str, str] = {k: v for k, v in base.items() if not k.startswith("PYMCOLL_FTAR_")}
        """The environment every process starts from (the token's variable included)."""
        if token_via == "file":
            self.token_file: Optional[Path] = self.directory / "ftar.token"
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.token + "\n")
            self.env[TOKEN_FILE_ENV] = str(self.token_file)
        else:
            self.token_file = None
            self.env[TOKEN_ENV] = self.token
        self.processes: list[LocalProcess] = []
        """Every process started, every incarnation, in order."""
        self._latest: dict[str, LocalProcess] = {}
        self._coordinator: Optional[CoordinatorProcess] = None
        self._lock = threading.Lock()
        self._closed = False

    # --- the coordinator -----------------------------------------------------------

    @property
    def coordinator(self) -> CoordinatorProcess:
        """The coordinator started last."""
        if self._coordinator is None:
            raise LocalClusterError("no coordinator yet: call start_coordinator() first")
        return self._coordinator

    @property
    def address(self) -> str:
        """The "HOST:PORT" of the coordinator started last."""
        return self.coordinator.address

    def start_coordinator(self, bind: str = "127.0.0.1:0", *, min_replicas: int = 1,
                          heartbeat_ms: Optional[int] = None, evict_ms: Optional[int] = None,
                          join_timeout_ms: Optional[int] = None, quiet: bool = False, name: str = "coordinator",
                          timeout: float = 30.0,
                          wrap: Optional[Callable[[list[str]], list[str]]] = None) -> CoordinatorProcess:
        """Start ``python -m pymcoll ftar-coordinator`` listening on `bind` (port 0: a free one).

        The settings are its options (None: its default). `wrap` turns its command line into
        the one that runs it elsewhere, e.g. on a host of the multi-host test bed
        (``lambda argv: hosts.on_host("h4", argv)``). Returns once it listens (its
        ``address`` set), LocalClusterError when it exits or stays silent for `timeout` s.
        Several coordinators may run under different names; :attr:`coordinator` is the one
        started last.
        """
        settings: dict[str, Any] = {"min_replicas": min_replicas, "heartbeat_ms": heartbeat_ms,
                                    "evict_ms": evict_ms, "join_timeout_ms": join_timeout_ms, "quiet": quiet,
                                    "wrap": wrap}
        return self._start_coordinator(name, bind, settings, timeout)

    def _start_coordinator(self, name: str, bind: str, settings: dict[str, Any],
                           timeout: float) -> CoordinatorProcess:
        timeout = _check_timeout(timeout)
        _check_name(name)
        addr_file = self.directory / f"{name}.{time.monotonic_ns()}.addr"
        argv = [sys.executable, "-m", "pymcoll", "ftar-coordinator", "--bind", bind, "--addr-file", str(addr_file)]
        for key in ("min_replicas", "heartbeat_ms", "evict_ms", "join_timeout_ms"):
            if settings[key] is not None:
                argv += ["--" + key.replace("_", "-"), str(settings[key])]
        if settings["quiet"]:
            argv.append("--quiet")
        if settings.get("wrap") is not None:
            argv = list(settings["wrap"](argv))
        proc = self._start(name, argv, cls=CoordinatorProcess, env=None, cwd=self.directory, stdin=False,
                           stderr="file")
        assert isinstance(proc, CoordinatorProcess)
        proc.settings = settings
        end = time.monotonic() + timeout
        while not addr_file.exists():
            if not proc.running or time.monotonic() > end:
                why = "exited" if not proc.running else f"wrote no address within {timeout:g} s"
                raise LocalClusterError(f"the coordinator {name} {why}\n{proc.report()}")
            time.sleep(0.02)
        proc.address = addr_file.read_text(encoding="utf-8").strip()
        self._coordinator = proc
        return proc

    def kill_coordinator(self, timeout: float = _KILL_WAIT_S) -> int:
        """SIGKILL the coordinator started last; its exit status."""
        return self.coordinator.kill(timeout)

    def restart_coordinator(self, timeout: float = 30.0) -> CoordinatorProcess:
        """Start the last coordinator again on the same address with the same settings (killed first if running)."""
        old = self.coordinator
        if old.running:
            old.kill()
        return self._start_coordinator(old.name, old.address, dict(old.settings), timeout)

    # --- replicas ---------------------------------------------------------------

    def start(self, name: str, argv: Sequence[str], *, env: Optional[Mapping[str, Optional[str]]] = None,
              cwd: Union[str, os.PathLike[str], None] = None, stdin: bool = False,
              stderr: Literal["file", "inherit"] = "file") -> LocalProcess:
        """Start `argv` as the process `name` (a new incarnation if the name was used before).

        `env` adds to (a None value removes from) the cluster's environment;
        `cwd` defaults to the cluster's. ``stdin=True`` gives it a pipe for
        :meth:`LocalProcess.write_line`; ``stderr="inherit"`` lets its stderr
        through to this process's instead of its log file.
        """
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv={argv!r} must be a non-empty sequence of strings, e.g. [sys.executable, "
                             f"'replica.py']")
        if stderr not in ("file", "inherit"):
            raise ValueError(f"stderr={stderr!r}: expected 'file' or 'inherit'")
        return self._start(name, argv, cls=LocalProcess, env=env, cwd=Path(cwd) if cwd is not None else self.cwd,
                           stdin=stdin, stderr=stderr)

    def _start(self, name: str, argv: Sequence[str], *, cls: type, env: Optional[Mapping[str, Optional[str]]],
               cwd: Path, stdin: bool, stderr: str) -> LocalProcess:
        _check_name(name)
        full_env = dict(self.env)
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        with self._lock:
            if self._closed:
                raise LocalClusterError(f"cannot start {name}: the cluster is closed")
            previous = self._latest.get(name)
            incarnation = previous.incarnation + 1 if previous is not None else 0
            stderr_path = self.directory / f"{name}.{incarnation}.log" if stderr == "file" else None
            launch = list(argv)
            if self.die_with_parent or self.time_limit_s is not None:
                limit = 0 if self.time_limit_s is None else int(-(-self.time_limit_s // 1))
                parent = os.getpid() if self.die_with_parent else -1
                launch = [sys.executable, "-I", "-S", "-c", _GUARD, str(parent), str(limit), *launch]
            proc = cls(name, incarnation, argv, launch=launch, env=full_env, env_overrides=env or {}, cwd=cwd,
                       stderr_path=stderr_path, stdin=stdin, on_event=self.on_event)
            self.processes.append(proc)
            self._latest[name] = proc
        return proc

    def process(self, name: str) -> LocalProcess:
        """The latest incarnation of the process `name`."""
        proc = self._latest.get(name)
        if proc is None:
            raise KeyError(f"no process named {name!r}; started: {', '.join(self._latest) or 'none'}")
        return proc

    def kill(self, name: str, timeout: float = _KILL_WAIT_S) -> int:
        """SIGKILL the latest incarnation of `name` (and its process group); its exit status."""
        return self.process(name).kill(timeout)

    def restart(self, name: str, *, argv: Optional[Sequence[str]] = None,
                env: Optional[Mapping[str, Optional[str]]] = None) -> LocalProcess:
        """Start `name` again: its last command line and environment unless given (killed first if running)."""
        old = self.process(name)
        if isinstance(old, CoordinatorProcess):
            raise LocalClusterError(f"{name} is a coordinator: use restart_coordinator()")
        if old.running:
            old.kill()
        return self.start(name, old.argv if argv is None else argv,
                          env=old.env_overrides if env is None else env, cwd=old.cwd, stdin=old.stdin,
                          stderr="file" if old.stderr_path is not None else "inherit")

    def start_together(self, specs: Iterable[ReplicaSpec], *, gate_option: str = "--start-file",
                       ready: Callable[[Event], bool] = lambda ev: ev.get("ev") == "ready",
                       timeout: float = 60.0, settle_s: float = 0.3) -> list[LocalProcess]:
        """Start replicas that take their first step together.

        Each spec is (name, argv) or (name, argv, env); every argv gets
        ``gate_option PATH`` appended: the replica reports `ready` (an event),
        then waits for the file PATH before its first step. Once every
        replica is ready (LocalClusterError after `timeout` s) and `settle_s`
        more have passed (their control connections are up), PATH is created.
        """
        settle_s = _check_timeout(settle_s, "settle_s")
        gate = self.directory / f"start-gate.{time.monotonic_ns()}"
        procs = []
        for spec in specs:
            name, argv = spec[0], spec[1]
            env = spec[2] if len(spec) > 2 else None  # type: ignore[misc]
            procs.append(self.start(name, [*argv, gate_option, str(gate)], env=env))
        end = time.monotonic() + _check_timeout(timeout)
        for p in procs:
            p.wait_for(ready, max(0.0, end - time.monotonic()), "ready")
        time.sleep(settle_s)
        gate.touch()
        return procs

    # --- the end ----------------------------------------------------------------------

    def report(self) -> str:
        """:meth:`LocalProcess.report` of every process started, for a failure message."""
        return "\n".join(p.report() for p in self.processes)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self, timeout: float = _KILL_WAIT_S) -> None:
        """Kill every process started (with its process group), wait for each (at most `timeout` s), and
        remove the directory if the cluster made it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            procs = list(self.processes)
        for p in procs:  # all at once, so that no survivor reacts to the others' deaths
            p._kill_group()
        for p in procs:
            p._close(timeout)
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        running = sum(p.running for p in self.processes)
        return f"<LocalCluster {self.directory} {running}/{len(self.processes)} processes running>"
