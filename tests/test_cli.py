"""python -m pymcoll info and bench, as users run them."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import TESTS_DIR, mpi_env, mpiexec_command


def run(cmd: list[str], env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=TESTS_DIR, env=mpi_env(env), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_info_singleton_lists_every_option() -> None:
    out = run([sys.executable, "-P", "-m", "pymcoll", "info"]).stdout
    from pymcoll.config import OPTIONS

    for name in OPTIONS:
        assert name in out
    for word in ("MPI built with", "MPI loaded", "layout", "segment", "CMA"):
        assert word in out, word


def test_info_under_mpiexec_json_reports_virtual_nodes() -> None:
    cmd = mpiexec_command(3) + [sys.executable, "-P", "-m", "pymcoll", "info", "--json"]
    out = run(cmd, env={"PYMCOLL_NODE_SIZE": "2"}).stdout
    data = json.loads(out)
    lay = data["layout"]
    assert lay["ranks"] == 3 and lay["nnodes"] == 2 and lay["virtual_node_size"] == 2
    assert [n["ranks"] for n in lay["nodes"]] == [[0, 1], [2]]
    node_size = next(o for o in data["options"] if o["name"] == "PYMCOLL_NODE_SIZE")
    assert node_size["current"] == 2 and node_size["from_env"]


def test_bench_launches_mpiexec_itself_and_prints_ratio_table() -> None:
    cmd = [sys.executable, "-P", "-m", "pymcoll", "bench", "--np", "2", "--max-bytes", "1K", "--min-bytes", "8"]
    out = run(cmd).stdout
    assert "vs_ref" in out
    for coll in ("Bcast", "Allgather", "Barrier"):
        assert coll.lower() in out.lower(), coll
    rows = [ln for ln in out.splitlines() if ln.strip().startswith(("8 ", "1024 "))]
    assert rows, out


def test_bench_rejects_bad_option_with_a_message() -> None:
    proc = subprocess.run([sys.executable, "-P", "-m", "pymcoll", "bench", "--max-bytes", "lots"],
                          cwd=TESTS_DIR, env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--max-bytes" in proc.stderr


def test_bench_ranks_ignore_a_pymcoll_folder_in_the_working_directory(tmp_path) -> None:
    # A checkout's root holds pymcoll/ without the compiled core; the ranks
    # that bench starts must still import the installed package.
    decoy = tmp_path / "pymcoll"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('decoy package imported')\n")
    cmd = [sys.executable, "-P", "-m", "pymcoll", "bench", "--np", "2", "--colls", "barrier"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "vs_ref" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
