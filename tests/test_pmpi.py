"""The preload library: unmodified C programs with their MPI collectives run
in pymcoll's core, with the same results as the MPI library's own.

The C programs in tests/pmpi_programs are built with the MPI's mpicc and run
with and without ``LD_PRELOAD`` of libpymcoll_pmpi.so, at 2 and 4 ranks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from conftest import TESTS_DIR, launcher_env, mpi_env, mpiexec_command

PROGRAMS = TESTS_DIR / "pmpi_programs"
# Every MPI_* collective the core implements (the large-count forms too where the MPI has them).
COLLECTIVES = ("Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
               "Alltoall", "Alltoallv", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan",
               "Exscan")


def preload_path() -> Path:
    from pymcoll.preload import library_path

    return library_path()


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The test programs, compiled with the MPI's own mpicc."""
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        pytest.fail("mpicc not found on PATH: the MPI's compiler wrapper builds the test programs")
    out = tmp_path_factory.mktemp("pmpi")
    built = {}
    for src in sorted(PROGRAMS.glob("*.c")):
        exe = out / src.stem
        proc = subprocess.run([mpicc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{src.name} did not compile:\n{proc.stderr}"
        built[src.stem] = exe
    return built


def launch(n: int, exe: Path, preload: bool, env: dict[str, str] | None = None,
           timeout: float = 240) -> subprocess.CompletedProcess:
    """`exe` on n ranks; with the preload library (and `env`) passed by the launcher's own flags."""
    settings = dict(env or {})
    if preload:
        settings["LD_PRELOAD"] = str(preload_path())
    cmd = mpiexec_command(n) + launcher_env(settings) + [str(exe)]
    try:
        return subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s\n{exc.stdout}\n{exc.stderr}")


@pytest.fixture(scope="module")
def mpi_digests(programs: dict[str, Path]) -> Callable[[int], list[str]]:
    """check_collectives' digests under the MPI's own collectives at n ranks, run once per n: the
    reference of every preload run (MPICH's collectives at 4 ranks on 2 cores take seconds a run)."""
    cache: dict[int, list[str]] = {}

    def get(n: int) -> list[str]:
        if n not in cache:
            cache[n] = digests(launch(n, programs["check_collectives"], preload=False))
        return cache[n]

    return get


def digests(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert re.search(r"checks \d+ failures 0", proc.stdout), proc.stdout + proc.stderr[-3000:]
    found = re.findall(r"digest rank \d+ ([0-9a-f]{16})", proc.stdout)
    assert found, proc.stdout
    return found


def report(stderr: str) -> dict[str, tuple[int, int, str]]:
    """The verbose report: call -> (calls in the core, calls passed to MPI, why)."""
    rows = {}
    for line in stderr.splitlines():
        m = re.match(r"\s+(MPI_\w+)\s+(\d+)\s+(\d+)\s*(.*)$", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), m.group(4))
    assert rows, f"no verbose report in stderr:\n{stderr[-3000:]}"
    return rows


def has_large_count() -> bool:
    """Whether the library defines the MPI 4 large-count entries (the MPI has them)."""
    import ctypes

    lib = ctypes.CDLL(str(preload_path()), mode=ctypes.RTLD_LOCAL)
    return hasattr(lib, "MPI_Allreduce_c")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_same_results_with_and_without_preload(programs: dict[str, Path],
                                                                mpi_digests: Callable[[int], list[str]],
                                                                n: int) -> None:
    plain = mpi_digests(n)
    proc = launch(n, programs["check_collectives"], preload=True, env={"PYMCOLL_PMPI_VERBOSE": "1"})
    assert digests(proc) == plain
    rows = report(proc.stderr)
    for name in COLLECTIVES:
        core, passed, why = rows.get(f"MPI_{name}", (0, 0, ""))
        assert core > 0, f"MPI_{name} never ran in the core: {rows}"
        if name != "Allreduce":
            assert passed == 0, f"MPI_{name} went to MPI: {why}"
    # The program's user-defined op, MINLOC and intercommunicator calls must go to MPI, and say why.
    core, passed, why = rows["MPI_Allreduce"]
    assert passed > 0 and "op without a core kernel" in why and "intercommunicator" in why, rows["MPI_Allreduce"]
    if has_large_count():
        assert rows.get("MPI_Allreduce_c", (0,))[0] > 0 and rows.get("MPI_Allgatherv_c", (0,))[0] > 0, rows


@pytest.mark.timeout(600)
@pytest.mark.parametrize("env", [{"PYMCOLL_NODE_SIZE": "2"}, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "cyclic"}],
                         ids=["nodes-of-2", "cyclic-nodes-of-2"])
def test_virtual_nodes_through_preload(programs: dict[str, Path], mpi_digests: Callable[[int], list[str]],
                                       env: dict[str, str]) -> None:
    # Across (virtual) nodes the core's lane algorithms carry the calls.
    assert digests(launch(4, programs["check_collectives"], preload=True, env=env)) == mpi_digests(4)


@pytest.mark.timeout(300)
def test_core_failure_reaches_the_error_handler_and_job_goes_on(programs: dict[str, Path]) -> None:
    proc = launch(2, programs["late_rank"], preload=True, env={"PYMCOLL_TIMEOUT": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0 late allreduce failed" in proc.stdout, proc.stdout + proc.stderr
    assert re.search(r"pymcoll preload: rank 0: MPI_Allreduce failed: .*timed out", proc.stderr), proc.stderr
    assert proc.stdout.count("rc 0 sum 2") == 2, proc.stdout


@pytest.mark.timeout(300)
def test_preload_calls_are_traced_and_the_late_rank_named(programs: dict[str, Path], tmp_path: Path) -> None:
    from pymcoll.trace import analyze

    proc = launch(2, programs["late_rank"], preload=True,
                  env={"PYMCOLL_TIMEOUT": "1", "PYMCOLL_TRACE": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dump = json.loads((tmp_path / "rank0.json").read_text())
    assert dump["source"] == "preload" and [c["id"] for c in dump["comms"]] == ["p0.1", "p0.2"], dump["comms"]
    assert [r["coll"] for r in dump["comms"][0]["records"]] == ["Bcast", "Allreduce"]
    assert (tmp_path / "rank0.timeout.json").exists() and (tmp_path / "rank1.sigusr1.json").exists()
    report = analyze(tmp_path)
    (hang,) = report.hangs
    assert (hang["comm"], hang["seq"], hang["coll"], hang["named"]) == ("p0.1", 2, "Allreduce", [1]), hang
    assert "Rank 1" in report.paragraph and "Bcast #1" in report.paragraph, report.paragraph


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,value,message", [
    ("PYMCOLL_NODE_LAYOUT", "diagonal", "PYMCOLL_NODE_LAYOUT='diagonal': expected 'block' or 'cyclic'"),
    ("PYMCOLL_WAIT", "spin", "PYMCOLL_WAIT='spin': expected 'auto' or 'sleep'"),
    ("PYMCOLL_HUGE_PAGES", "always", "PYMCOLL_HUGE_PAGES='always': expected 'auto' or 'off'"),
    ("PYMCOLL_STREAM_MIN", "fast", "PYMCOLL_STREAM_MIN='fast' is neither a size"),
    ("PYMCOLL_CELL_MOVSB_MIN", "big", "PYMCOLL_CELL_MOVSB_MIN='big' is neither a size"),
    ("PYMCOLL_PATH_TRIALS", "sometimes", "PYMCOLL_PATH_TRIALS='sometimes': expected 1 or 0"),
])
def test_bad_setting_stops_the_job_naming_it(programs: dict[str, Path], name: str, value: str, message: str) -> None:
    proc = launch(2, programs["late_rank"], preload=True, env={name: value})
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("wait", ["auto", "sleep"])
def test_mpi4py_program_runs_through_preload(wait: str) -> None:
    code = ("from mpi4py import MPI\nimport numpy as np\nc = MPI.COMM_WORLD\n"
            "a = np.arange(5.0) + c.rank\nb = np.empty(5)\nc.Allreduce(a, b)\n"
            "assert (b == sum(np.arange(5.0) + r for r in range(c.size))).all(), b\n"
            "g = np.empty(5 * c.size)\nc.Allgather(a, g)\nassert (g.reshape(c.size, 5)[:, 0] == np.arange(c.size)).all()\n"
            "print('ok', c.rank)\n")
    cmd = mpiexec_command(2) + launcher_env({"LD_PRELOAD": str(preload_path()), "PYMCOLL_PMPI_VERBOSE": "1",
                                             "PYMCOLL_WAIT": wait})
    proc = subprocess.run(cmd + [sys.executable, "-c", code], cwd=TESTS_DIR, env=mpi_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("ok") == 2, proc.stdout + proc.stderr
    rows = report(proc.stderr)
    assert any(name.startswith("MPI_Allreduce") and row[0] > 0 for name, row in rows.items()), rows
    assert any(name.startswith("MPI_Allgather") and row[0] > 0 for name, row in rows.items()), rows


def test_library_exports_mpi_entry_points_only() -> None:
    nm = shutil.which("nm")
    assert nm is not None, "nm (binutils) is needed to read the library's symbol table"
    lib = str(preload_path())
    defined = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in defined.splitlines() if line.strip()}
    # Nothing of the core leaks out (a process may load pymcoll's extension too).
    assert all(name.startswith("MPI_") for name in names if not name.startswith("_")), sorted(names)
    for name in COLLECTIVES:
        assert f"MPI_{name}" in names, name
        if has_large_count() and name != "Barrier":
            assert f"MPI_{name}_c" in names, name
    # The core inside calls MPI through PMPI_* only: its own calls never come back into the library.
    undefined = subprocess.run([nm, "-D", "--undefined-only", lib], capture_output=True, text=True, check=True).stdout
    assert not [ln for ln in undefined.splitlines() if re.search(r"\bMPI_\w+$", ln)], undefined


def test_preload_command_prints_path_and_launch_lines() -> None:
    proc = subprocess.run([sys.executable, "-P", "-m", "pymcoll", "preload"], cwd=TESTS_DIR, env=mpi_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path = str(preload_path())
    assert f"mpiexec -genv LD_PRELOAD {path}" in proc.stdout
    assert f"mpiexec -x LD_PRELOAD={path}" in proc.stdout
    only = subprocess.run([sys.executable, "-P", "-m", "pymcoll", "preload", "--path"], cwd=TESTS_DIR, env=mpi_env(),
                          capture_output=True, text=True, timeout=120)
    assert only.returncode == 0 and only.stdout.strip() == path
