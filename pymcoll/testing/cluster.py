"""Hosts on one machine: an MPI job across real links, and the faults only networks have.

`Cluster(k)` makes k hosts. Each is a network, UTS, IPC and mount namespace with its own
hostname, its own System V IPC and a private tmpfs on /dev/shm, joined to a bridge in the root
namespace by a veth pair (optionally rate-limited with tc's tbf). Ranks on different hosts share
no memory: MPI talks TCP across the veths, and pymcoll sees one node per host.
`Cluster.launch` starts an MPI job across the hosts through MPICH's hydra: mpiexec stays in the
root namespace and starts its proxy on each host through a launcher script that is called like
ssh and enters that host's namespaces. (Open MPI's launcher takes an rsh agent too, but its
daemons need the host names to resolve and the agent to pass its environment through; only the
hydra route is built.)

Fault verbs act on a host's link or processes: `link_down` (the host's packets are dropped, in
silence, as on a cut cable: no reset reaches anyone), `link_up`, `set_rate` ("1gbit", "100mbit",
as tc writes rates; None removes the limit) and `kill` (SIGKILL to every process of the host).

Everything a cluster makes is named with a per-run prefix (``pmcc`` and 4 hex digits): the
namespaces, the links, the bridge, the state directory. `close` removes it all, and runs at exit
and when the `with` block ends, also after an exception; `sweep` removes what a killed run
left. It needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN): without it, `ClusterUnavailable` says so.

    from pymcoll.testing.cluster import Cluster

    with Cluster(2, rate="1gbit") as cl:
        proc = cl.run(["python", "app.py"], ranks_per_host=2, timeout=120)
        print(proc.stdout)
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

__all__ = ["Cluster", "Host", "ClusterUnavailable", "ClusterError", "sweep", "PREFIX_ROOT", "TBF_BURST", "available", "rate_bits"]

PREFIX_ROOT = "pmcc"
#: tc tbf bucket of every rate-limited link, bytes: after an idle spell this much passes at once.
TBF_BURST = 128 * 1024
_PREFIX = re.compile(rf"^{PREFIX_ROOT}[0-9a-f]{{4}}$")
_RATE = re.compile(r"^\d+(\.\d+)?([kmgt]?bit|[kmgt]?bps)$")
_CMD_TIMEOUT = 30.0


class ClusterUnavailable(RuntimeError):
    """This process cannot make hosts here (not root, or namespaces refused)."""


class ClusterError(RuntimeError):
    """A command of the test bed failed; the message has its output."""


@dataclass
class Host:
    """One host: its hostname, address on the bridge, namespace, host-side link and the pid of
    the process that keeps its namespaces (every command on the host joins them)."""

    name: str
    address: str
    netns: str
    link: str
    pid: int
    cpus: str = ""  # the CPUs its processes run on ("0,2"; "" for all)


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = _CMD_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise ClusterUnavailable(f"{argv[0]} not found: the test bed needs iproute2 (ip, tc) and util-linux "
                                 f"(unshare, nsenter)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"{shlex.join(argv)} did not finish within {timeout:g} s") from exc
    if check and proc.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


def available() -> Optional[str]:
    """None when this process can make hosts, else the reason it cannot (for a test's skip)."""
    if not sys.platform.startswith("linux"):
        return "the test bed needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the test bed needs root (it makes network namespaces, veths and a bridge)"
    for tool in ("ip", "tc", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"the test bed needs {tool} (iproute2, util-linux)"
    probe = f"{PREFIX_ROOT}probe{os.getpid() % 10000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.231.0.0/16 that no interface of this machine uses."""
    used = _run(["ip", "-4", "-o", "addr", "show"]).stdout
    taken = {ipaddress.ip_interface(m).network for m in re.findall(r"inet (\S+)", used)}
    start = secrets.randbelow(250)
    for i in range(250):
        net = ipaddress.ip_network(f"10.231.{(start + i) % 250 + 1}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise ClusterError("no free /24 left in 10.231.0.0/16 for the bridge")


def _processes_in(netns: str) -> list[int]:
    """Pids of the processes whose network namespace is `netns` (from /run/netns)."""
    try:
        target = os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def _kill_all(pids: Sequence[int], wait_s: float = 5.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    for pid in pids:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended: its parent reaps it, not us)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def sweep(prefix: Optional[str] = None) -> list[str]:
    """Removes what test beds left: every namespace, link and state directory named `prefix`
    (default: every test bed's, ``pmcc`` and 4 hex digits), the processes inside first.
    Returns the names removed."""
    if prefix is not None and not _PREFIX.match(prefix):
        raise ValueError(f"prefix={prefix!r}: a test bed's prefix is {PREFIX_ROOT} and 4 hex digits")

    def ours(name: str) -> bool:
        head = name[:len(PREFIX_ROOT) + 4]
        return (name.startswith(prefix) if prefix else bool(_PREFIX.match(head)))

    removed = []
    netns = _run(["ip", "netns", "list"], check=False).stdout.split()
    for name in [n for n in netns if ours(n)]:
        _kill_all(_processes_in(name))
        _run(["ip", "netns", "del", name], check=False)
        removed.append(name)
    links = re.findall(r"^\d+: ([^:@]+)", _run(["ip", "-o", "link", "show"], check=False).stdout, re.M)
    for name in [n for n in links if ours(n)]:
        _run(["ip", "link", "del", name], check=False)
        removed.append(name)
    base = Path(tempfile.gettempdir())
    for d in base.glob(f"{prefix or PREFIX_ROOT}*"):
        if d.is_dir() and ours(d.name):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


class Cluster:
    """`hosts` hosts on this machine, joined by a bridge; see the module's docstring.

    Args:
        hosts: how many hosts (1 to 200).
        rate: a rate limit on every host's link, as tc writes it ("1gbit"); None: none.
        detach: keep the hosts when this process exits (the cluster CLI's ``up``); `close` or
            ``python -m pymcoll cluster down`` removes them.
    """

    def __init__(self, hosts: int = 2, *, rate: Optional[str] = None, detach: bool = False) -> None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= 200:
            raise ValueError(f"hosts={hosts!r}: expected an integer from 1 to 200")
        if rate is not None:
            _check_rate(rate)
        reason = available()
        if reason is not None:
            raise ClusterUnavailable(reason)
        self.prefix = f"{PREFIX_ROOT}{secrets.token_hex(2)}"
        self.subnet = _free_subnet()
        self.bridge = f"{self.prefix}br"
        self.bridge_address = str(self.subnet.network_address + 1)
        self.directory = Path(tempfile.mkdtemp(prefix=self.prefix))
        self.hosts: list[Host] = []
        self.rates: dict[str, Optional[str]] = {}
        self.closed = False
        self._keepers: list[subprocess.Popen] = []
        if not detach:
            atexit.register(self.close)
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{self.bridge_address}/{self.subnet.prefixlen}", "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
            self._nhosts = hosts
            for i in range(1, hosts + 1):
                self._add_host(i)
            self._write_launcher()
            for host in self.hosts:
                self.set_rate(host.name, rate)
            self.save()
        except BaseException:
            self.close()
            raise

    # -- making and finding hosts -------------------------------------------------------------

    def _add_host(self, i: int) -> None:
        name, netns, link = f"h{i}", f"{self.prefix}h{i}", f"{self.prefix}v{i}"
        address = str(self.subnet.network_address + 10 + i)
        _run(["ip", "netns", "add", netns])
        _run(["ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", netns])
        _run(["ip", "link", "set", link, "master", self.bridge, "up"])
        inside = ["ip", "netns", "exec", netns]
        _run(inside + ["ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0"])
        _run(inside + ["ip", "link", "set", "eth0", "up"])
        _run(inside + ["ip", "link", "set", "lo", "up"])
        # The keeper holds the host's UTS, IPC and mount namespaces: its hostname, its System V
        # IPC and a /dev/shm of its own. Every command on the host joins them through its pid.
        ready = self.directory / f"{name}.ready"
        script = (f"hostname {name} && mount -t tmpfs -o mode=1777,size=50% tmpfs /dev/shm && "
                  f"touch {shlex.quote(str(ready))} && exec sleep 2147483647")
        keeper = subprocess.Popen(inside + ["unshare", "--uts", "--ipc", "--mount", "--propagation", "private",
                                            "sh", "-c", script], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + _CMD_TIMEOUT
        while not ready.exists():
            if keeper.poll() is not None or time.monotonic() > deadline:
                err = keeper.stderr.read().decode(errors="replace") if keeper.poll() is not None else ""
                keeper.kill()
                raise ClusterUnavailable(f"host {name}: cannot make its UTS/IPC/mount namespaces: {err.strip()}")
            time.sleep(0.01)
        self._keepers.append(keeper)
        self.hosts.append(Host(name, address, netns, link, keeper.pid, _cpus_of(i - 1, self._nhosts)))

    def host(self, host: Union[str, int, Host]) -> Host:
        """The host named `host` ("h2"), of index `host` (1-based) or `host` itself."""
        if isinstance(host, Host):
            return host
        for h in self.hosts:
            if h.name == host or (isinstance(host, int) and h.name == f"h{host}"):
                return h
        raise KeyError(f"host={host!r}: this cluster has {', '.join(h.name for h in self.hosts)}")

    def on_host(self, host: Union[str, int, Host], argv: Sequence[str]) -> list[str]:
        """The command line that runs `argv` on `host` (inside its namespaces)."""
        h = self.host(host)
        pin = ["taskset", "-c", h.cpus] if h.cpus else []
        return ["nsenter", "-t", str(h.pid), "--uts", "--ipc", "--mount", "--net", "--", *pin, *argv]

    def _write_launcher(self) -> None:
        # Called by hydra like ssh: [-x] HOST COMMAND...; HOST is an address on the bridge.
        table = "\n".join(f"    {h.address}) pid={h.pid}; cpus={h.cpus or 'all'} ;;" for h in self.hosts)
        text = f"""#!/bin/sh
# Starts a command on a test-bed host ({self.prefix}); called like ssh by mpiexec.
[ "$1" = "-x" ] && shift
case "$1" in
{table}
    *) echo "{self.prefix}: no host $1" >&2; exit 255 ;;
esac
shift
[ "$cpus" = all ] && exec nsenter -t "$pid" --uts --ipc --mount --net -- sh -c "$*"
exec nsenter -t "$pid" --uts --ipc --mount --net -- taskset -c "$cpus" sh -c "$*"
"""
        self.launcher = self.directory / "launch"
        self.launcher.write_text(text)
        self.launcher.chmod(0o700)

    # -- MPI jobs ------------------------------------------------------------------------------

    def mpiexec_command(self, argv: Sequence[str], ranks_per_host: Union[int, Sequence[int]],
                        mpiexec: Optional[str] = None) -> list[str]:
        """mpiexec (MPICH's hydra) running `argv` with `ranks_per_host` ranks on each host
        (an int for all, or one count per host in order, 0 leaving a host out)."""
        from ..cli.launch import find_mpiexec, mpiexec_flavor

        counts = [ranks_per_host] * len(self.hosts) if isinstance(ranks_per_host, int) else list(ranks_per_host)
        if len(counts) != len(self.hosts) or any(not isinstance(n, int) or n < 0 for n in counts) or not sum(counts):
            raise ValueError(f"ranks_per_host={ranks_per_host!r}: expected an int >= 1, or {len(self.hosts)} "
                             f"counts >= 0 (one per host) with at least one rank")
        exe = find_mpiexec(mpiexec)
        if mpiexec_flavor(exe) != "mpich":
            raise ClusterUnavailable(f"{exe} is not MPICH's hydra: the test bed starts jobs with hydra's ssh "
                                     f"launcher (Open MPI's daemons would need the hosts' names in /etc/hosts)")
        hosts = ",".join(f"{h.address}:{n}" for h, n in zip(self.hosts, counts) if n)
        return [exe, "-launcher", "ssh", "-launcher-exec", str(self.launcher), "-localhost", self.bridge_address,
                "-hosts", hosts, "-n", str(sum(counts)), *argv]

    def launch(self, argv: Sequence[str], ranks_per_host: Union[int, Sequence[int]], *,
               env: Optional[Mapping[str, str]] = None, mpiexec: Optional[str] = None,
               capture_output: bool = True, cwd: Optional[str] = None) -> subprocess.Popen:
        """Starts the MPI job (see `mpiexec_command`) in a session of its own and returns at once."""
        cmd = self.mpiexec_command(argv, ranks_per_host, mpiexec)
        full_env = dict(os.environ)
        full_env.update(env or {})
        out = subprocess.PIPE if capture_output else None
        return subprocess.Popen(cmd, env=full_env, cwd=cwd, stdout=out, stderr=out, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def run(self, argv: Sequence[str], ranks_per_host: Union[int, Sequence[int]], *, timeout: float,
            env: Optional[Mapping[str, str]] = None, mpiexec: Optional[str] = None,
            cwd: Optional[str] = None) -> subprocess.CompletedProcess:
        """Runs the MPI job to its end; past `timeout` s it is killed (mpiexec and every rank on
        every host) and the result has returncode 124 with what it printed so far."""
        proc = self.launch(argv, ranks_per_host, env=env, mpiexec=mpiexec, cwd=cwd)
        return self.finish(proc, timeout)

    def finish(self, proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
        """Waits for a job `launch` started; past `timeout` s ends it as `run` does."""
        try:
            out, err = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            self.end_job(proc)
            try:
                out, err = proc.communicate(timeout=_CMD_TIMEOUT)
            except subprocess.TimeoutExpired as late:
                # A process outside the hosts still holds the output pipes: give up on the rest.
                out, err = late.stdout, late.stderr
                for pipe in (proc.stdout, proc.stderr):
                    if pipe is not None:
                        pipe.close()
            code = 124
        return subprocess.CompletedProcess(proc.args, code, out, err)

    def end_job(self, proc: subprocess.Popen) -> None:
        """Kills a job: mpiexec's session, and every process on the hosts but their keepers."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for h in self.hosts:
            _kill_all([p for p in _processes_in(h.netns) if p != h.pid])

    # -- faults --------------------------------------------------------------------------------

    def link_down(self, host: Union[str, int, Host]) -> None:
        """Cuts `host`'s link: its packets are dropped in silence, in both directions."""
        _run(["ip", "link", "set", self.host(host).link, "down"])

    def link_up(self, host: Union[str, int, Host]) -> None:
        """Restores `host`'s link."""
        _run(["ip", "link", "set", self.host(host).link, "up"])

    def set_rate(self, host: Union[str, int, Host], rate: Optional[str]) -> None:
        """Limits `host`'s link to `rate` in each direction ("1gbit", "100mbit"); None removes the limit."""
        h = self.host(host)
        inside = ["ip", "netns", "exec", h.netns]
        if rate is None:
            for prefix, dev in (([], h.link), (inside, "eth0")):
                _run(prefix + ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        else:
            _check_rate(rate)
            # The smallest bucket that still reaches the rate: two of the veth's 64 KiB GSO
            # segments (one alone holds 4 Gbit/s to 2.3). A bigger one lets a timing loop run
            # at the veth's speed until it drains (10 ms of 4 Gbit/s outlasts a whole loop of
            # 128 KiB calls), which no wire does.
            burst = TBF_BURST
            for prefix, dev in (([], h.link), (inside, "eth0")):
                _run(prefix + ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                               "burst", str(burst), "latency", "100ms"])
        self.rates[h.name] = rate

    def kill(self, host: Union[str, int, Host]) -> list[int]:
        """SIGKILLs every process on `host` (the host itself stays); returns their pids."""
        h = self.host(host)
        pids = [p for p in _processes_in(h.netns) if p != h.pid]
        _kill_all(pids)
        return pids

    # -- state and teardown --------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.directory / "cluster.json"

    def save(self, path: Optional[Union[str, Path]] = None) -> Path:
        """Writes what this cluster made (for `attach` and ``cluster down``); returns the path."""
        doc = {"prefix": self.prefix, "subnet": str(self.subnet), "bridge": self.bridge,
               "bridge_address": self.bridge_address, "directory": str(self.directory),
               "hosts": [asdict(h) for h in self.hosts], "rates": self.rates}
        target = Path(path) if path is not None else self.state_file
        target.write_text(json.dumps(doc, indent=1) + "\n")
        return target

    @classmethod
    def attach(cls, path: Union[str, Path]) -> "Cluster":
        """The cluster a state file names (made by another process, e.g. ``cluster up``)."""
        try:
            doc = json.loads(Path(path).read_text())
            cl = cls.__new__(cls)
            cl.prefix, cl.bridge, cl.bridge_address = doc["prefix"], doc["bridge"], doc["bridge_address"]
            cl.subnet = ipaddress.ip_network(doc["subnet"])
            cl.directory = Path(doc["directory"])
            cl.hosts = [Host(**h) for h in doc["hosts"]]
            cl.rates = dict(doc.get("rates", {}))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path}: not a test bed's state file ({exc})") from None
        if not _PREFIX.match(cl.prefix):
            raise ClusterError(f"{path}: prefix {cl.prefix!r} is not a test bed's")
        cl.closed, cl._keepers = False, []
        cl.launcher = cl.directory / "launch"
        return cl

    def close(self) -> None:
        """Removes everything this cluster made: processes on its hosts, namespaces, links,
        the bridge, the state directory. Safe to call twice."""
        if getattr(self, "closed", True):
            return
        self.closed = True
        for h in getattr(self, "hosts", []):
            _kill_all(_processes_in(h.netns) + [h.pid])
        for keeper in getattr(self, "_keepers", []):
            try:
                keeper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        sweep(self.prefix)
        try:
            atexit.unregister(self.close)
        except Exception:  # pragma: no cover - interpreter shutting down
            pass

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.address}" for h in self.hosts)
        return f"Cluster({self.prefix}: {hosts}{'; closed' if self.closed else ''})"


def _cpus_of(index: int, hosts: int) -> str:
    """The CPUs of host `index` of `hosts`: this process's CPUs dealt out in turn, so that hosts
    have CPUs of their own as real hosts do (while there are enough), and a host's ranks that
    outnumber its CPUs see it (pymcoll then yields instead of spinning)."""
    cpus = sorted(os.sched_getaffinity(0))
    if hosts <= 1 or not cpus:
        return ""
    mine = [c for j, c in enumerate(cpus) if j % hosts == index % len(cpus) % hosts] if hosts <= len(cpus) \
        else [cpus[index % len(cpus)]]
    return ",".join(str(c) for c in mine)


def _check_rate(rate: str) -> None:
    if not isinstance(rate, str) or not _RATE.match(rate.lower()):
        raise ValueError(f"rate={rate!r}: expected a rate as tc writes it, e.g. '1gbit', '100mbit', '500kbit'")


def rate_bits(rate: str) -> float:
    """Bits per second of a rate as tc writes it ("1gbit" -> 1e9; "bps" means bytes per second)."""
    _check_rate(rate)
    m = re.match(r"^(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)$", rate.lower())
    assert m is not None
    value = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return value * (8 if m.group(3) == "bps" else 1)
