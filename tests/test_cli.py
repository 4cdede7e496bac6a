"""python -m pymcoll info and bench, as users run them."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

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
    # Few calls: the table's form is under test here, not its numbers.
    cmd = [sys.executable, "-P", "-m", "pymcoll", "bench", "--np", "2", "--max-bytes", "1K", "--min-bytes", "8",
           "--iters", "50", "--warmup", "5", "--blocks", "3"]
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


# -- python -m pymcoll bench: every collective, the columns, --json, --plot, --vs, -m ------------

BENCH = [sys.executable, "-P", "-m", "pymcoll", "bench"]
QUICK = ["-i", "5", "-w", "1", "--blocks", "2"]  # a handful of calls per size: tests check output, not speed


def table_rows(out: str) -> dict[str, list[dict[str, str]]]:
    """Title -> rows of every table in bench's stdout, each row a dict keyed by column name.

    A table is a '# Title, ...' line, maybe a '# Size = ...' line, a '# Size  count ...' column
    line (names joined by two or more spaces; OSU's names hold single spaces) and its rows.
    """
    tables: dict[str, list[dict[str, str]]] = {}
    title, columns = None, None
    for line in out.splitlines():
        if re.match(r"#\s+Size\s{2,}count", line):  # right-aligned: wide sizes push 'Size' right
            columns = re.split(r"\s{2,}", line[1:].strip())
            tables[title] = []
        elif line.startswith("# ") and not line.startswith("# Size") and "," in line:
            title, columns = line[2:].split(",")[0], None
        elif columns and line.strip() and not line.startswith("#"):
            fields = line.split()
            assert len(fields) == len(columns), (columns, line)
            tables[title].append(dict(zip(columns, fields)))
        elif not line.strip():
            columns = None
    return tables


ALL_TITLES = ("Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
              "Alltoall", "Alltoallv", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter",
              "Scan", "Exscan")


def test_bench_all_collectives_verify_with_both_column_sets_json_and_progress(tmp_path) -> None:
    path = tmp_path / "bench.json"
    proc = run(BENCH + ["-n", "2", "--colls", "all", "-m", "8:64", *QUICK, "--json", str(path)], timeout=120)
    tables = table_rows(proc.stdout)
    assert sorted(tables) == sorted(ALL_TITLES), list(tables)
    for title, rows in tables.items():
        assert rows, title
        for row in rows:
            assert row["#wrong"] == "0", (title, row)
            for column in ("Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations", "time(us)",
                           "algbw(GB/s)", "busbw(GB/s)", "count", "type", "redop", "root"):
                assert column in row, (title, column)
            assert row["Iterations"] == "10"  # 5 per block x 2 blocks
            if row["impl"] == "pymcoll":
                assert float(row["vs_ref"]) > 0, row
            else:
                assert row["impl"] == "mpi" and row["vs_ref"] == "-", row
        sizes = sorted({int(r["Size"]) for r in rows})
        assert sizes == ([0] if title == "Barrier" else [8, 16, 32, 64]), (title, sizes)
    assert {r["redop"] for r in tables["Allreduce"]} == {"sum"} and tables["Bcast"][0]["root"] == "0"
    assert tables["Allgather"][0]["count"] == "1"  # 8 B of float32 over 2 ranks: one element each

    data = json.loads(path.read_text())
    header, records = data[0], data[1:]
    assert header["kind"] == "header" and header["ranks"] == 2 and header["vs"] == "mpi"
    assert len(header["colls"]) == 16 and header["type"] == "float32" and header["op"] == "sum"
    assert len(records) == 2 * (15 * 4 + 1)  # per collective, size and implementation
    assert header["timing"] == "barrier" and {r["timing"] for r in records} == {"barrier"}  # OSU's, the default
    for r in records:
        assert r["wrong"] == 0 and r["impl"] in ("pymcoll", "mpi4py"), r
        assert r["osu_min_us"] <= r["osu_avg_us"] <= r["osu_max_us"], r
        assert (r["vs_ref"] is not None) == (r["impl"] == "pymcoll"), r
        assert len(r["block_us"]) == 2 and r["iters"] == 5
    allreduce = next(r for r in records if r["coll"] == "allreduce" and r["size"] == 64)
    assert allreduce["busbw_factor"] == 1.0 and allreduce["redop"] == "sum"  # 2(n-1)/n at n = 2

    # Progress: rank 0's lines on stderr, one per measurement, none in the tables.
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("pymcoll bench: ")]
    assert any("allreduce 64 B (" in ln for ln in progress), proc.stderr[-2000:]
    assert progress[-1].startswith("pymcoll bench: exscan 64 B (61/61)"), progress[-3:]
    assert "allreduce 64 B (" not in proc.stdout


def test_bench_three_ranks_virtual_nodes_int_max_verifies() -> None:
    # Across virtual nodes at an odd rank count, another type and op: sizes round down to
    # whole blocks of 3 ranks, and every result must still check out.
    cmd = BENCH + ["-n", "3", "--node-size", "2", "--colls", "all", "-m", "8:64", *QUICK,
                   "--dtype", "int16", "--op", "max", "-q"]
    proc = run(cmd, timeout=120)
    tables = table_rows(proc.stdout)
    assert len(tables) == 16
    for title, rows in tables.items():
        assert rows and all(r["#wrong"] == "0" for r in rows), title
    assert [r["Size"] for r in tables["Alltoall"][::2]] == ["6", "12", "30", "60"]
    assert {r["redop"] for r in tables["Scan"]} == {"max"} and tables["Scan"][0]["type"] == "int16"
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith("pymcoll bench: ")]  # -q: no progress


def test_bench_plot_writes_a_png(tmp_path) -> None:
    import matplotlib  # noqa: F401 - the test extra installs it; --plot must work
    path = tmp_path / "plots" / "out.png"
    proc = run(BENCH + ["-n", "2", "--colls", "bcast,allreduce,barrier", "-m", "8:256", *QUICK,
                        "--vs", "mpi", "--plot", str(path)], timeout=120)
    assert f"# wrote {path}" in proc.stdout
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_bench_vs_none_has_no_ratio_column() -> None:
    proc = run(BENCH + ["-n", "2", "--colls", "allgather,barrier", "-m", "64", *QUICK, "--vs", "none"],
               timeout=120)
    assert "vs_ref" not in proc.stdout
    tables = table_rows(proc.stdout)
    assert sorted(tables) == ["Allgather", "Barrier"]
    for rows in tables.values():
        assert [r["impl"] for r in rows] == ["pymcoll"] and rows[0]["#wrong"] == "0"


def test_bench_message_sizes_parse() -> None:
    from pymcoll.cli.bench import doubling_sizes, parse_message_sizes

    assert parse_message_sizes("8:16M") == (8, 16 << 20)
    assert parse_message_sizes("1K") == (1024, 1024)
    assert parse_message_sizes(":64K") == (8, 64 << 10)
    assert parse_message_sizes("4K:") == (4096, 1 << 20)
    assert doubling_sizes(8, 64) == [8, 16, 32, 64] and doubling_sizes(100, 1000) == [100, 200, 400, 800]


def test_bench_bad_message_sizes_name_the_option() -> None:
    for bad in ("lots", "1M:8", "8:16:32", ":", "8:x"):
        proc = subprocess.run(BENCH + ["-m", bad], cwd=TESTS_DIR, env=mpi_env(), capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and "-m/--message-sizes" in proc.stderr, (bad, proc.stderr)
        assert "not started by mpiexec" not in proc.stderr  # refused before launching anything
    proc = subprocess.run(BENCH + ["-m", "8:1K", "--max-bytes", "1M"], cwd=TESTS_DIR, env=mpi_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--max-bytes" in proc.stderr and "-m" in proc.stderr
    proc = subprocess.run(BENCH + ["--colls", "allreduce,bogus"], cwd=TESTS_DIR, env=mpi_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--colls" in proc.stderr and "bogus" in proc.stderr


def test_bench_plot_without_matplotlib_says_how_to_get_it(monkeypatch, capsys) -> None:
    import importlib.util

    from pymcoll.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "matplotlib" else real(name, *a, **k))
    assert main(["bench", "--plot", "out.png"]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "pip install matplotlib" in err


def test_bench_persistent_back_to_back_verifies_every_collective(tmp_path) -> None:
    # X_init once per size on both sides, Start + Wait timed, no Barrier between the calls.
    path = tmp_path / "bench.json"
    proc = run(BENCH + ["-n", "2", "--colls", "all", "-m", "8:16", *QUICK, "--persistent", "--back-to-back",
                        "--json", str(path), "-q"], timeout=120)
    tables = table_rows(proc.stdout)
    assert sorted(tables) == sorted(ALL_TITLES), list(tables)
    assert all(r["#wrong"] == "0" for rows in tables.values() for r in rows)
    assert "persistent calls" in proc.stdout and "back to back" in proc.stdout
    data = json.loads(path.read_text())
    header, records = data[0], data[1:]
    assert header["mode"] == "persistent" and header["timing"] == "back-to-back"
    assert {r["mode"] for r in records} == {"persistent"} and {r["timing"] for r in records} == {"back-to-back"}
    assert {r["impl"] for r in records} == {"pymcoll", "mpi4py"}  # MPICH has every X_init
    assert all(r["reference_missing"] is None for r in records)


def test_bench_mem_frac_from_64k_against_a_memcpy_of_the_same_traffic(tmp_path) -> None:
    path = tmp_path / "bench.json"
    proc = run(BENCH + ["-n", "2", "--colls", "allreduce,allgather,barrier", "-m", "32K:64K", *QUICK,
                        "--json", str(path), "-q"], timeout=120)
    rows = table_rows(proc.stdout)
    assert "mem_frac" in rows["Allreduce"][0] and "mem_frac" not in rows["Barrier"][0]
    records = json.loads(path.read_text())[1:]
    for r in records:
        if r["coll"] == "barrier":
            assert r["traffic_bytes"] is None and r["mem_frac"] is None
        elif r["size"] < 64 << 10:
            assert r["traffic_bytes"] > 0 and r["mem_frac"] is None, r
        else:
            assert 0 < r["mem_frac"] < 20, r  # a ratio of two times of the same traffic
    assert "mem_frac = memcpy time" in proc.stdout  # the column is explained
    no_mem = run(BENCH + ["-n", "2", "--colls", "allreduce", "-m", "64K", *QUICK, "--no-mem-frac", "-q"],
                 timeout=120)
    assert "mem_frac" not in table_rows(no_mem.stdout)["Allreduce"][0]


def test_bench_traffic_counts_reads_and_writes_of_the_busiest_rank() -> None:
    from pymcoll.cli.bench_cases import rank_traffic

    m = 1 << 20
    assert rank_traffic("bcast", m, 4) == 2 * m
    assert rank_traffic("scatter", m, 4) == rank_traffic("gather", m, 4) == 2 * (m // 4)
    assert rank_traffic("allgather", m, 4) == rank_traffic("alltoall", m, 4) == 2 * m
    # a quarter of every input reduced and written, the other three quarters of the result copied
    assert rank_traffic("allreduce", m, 4) == m + m // 4 + 2 * (3 * m // 4)
    assert rank_traffic("reduce_scatter_block", m, 4) == m + m // 4
    assert rank_traffic("scan", m, 4) is None and rank_traffic("barrier", 0, 4) is None


@pytest.mark.parametrize("shape", [(1, 1024), (4, 256), (3, 1), (2, 5000), (16, 16)])
def test_bench_stamp_writes_one_new_value_per_page_of_every_block(shape) -> None:
    from pymcoll.cli.bench_cases import DTYPES, STAMP_BYTES, STAMP_SCALAR_MAX, make_stamp

    for name in DTYPES:
        dtype = np.dtype(name)
        stride = max(1, STAMP_BYTES // dtype.itemsize)
        arrays = [np.zeros(shape, dtype), np.full(shape, 7, dtype)]
        untouched = [a.copy() for a in arrays]
        stamp = make_stamp(arrays, dtype)
        # both ways of stamping (element by element, numpy views) are exercised by these shapes
        scalar = sum(a[:, ::stride].size for a in arrays) <= STAMP_SCALAR_MAX
        for tick in range(1, 203):
            stamp()
            for a, before in zip(arrays, untouched):
                want = before.copy()
                want[:, ::stride] = 1 + tick % 100
                assert np.array_equal(a, want), (name, shape, tick, scalar)


def test_bench_call_forms_reject_an_unknown_mode() -> None:
    from pymcoll.cli.bench import bench_collective
    from pymcoll.cli.bench_cases import make_call

    with pytest.raises(ValueError, match="mode='lazy'"):
        make_call(object(), "Allreduce", (), "lazy")
    with pytest.raises(ValueError, match="mode='nonblocking'"):
        bench_collective(None, "allreduce", [8], mode="nonblocking")


def test_bench_timing_flags_exclude_each_other() -> None:
    proc = subprocess.run(BENCH + ["--barrier", "--back-to-back"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_bench_heap_buffers_verify_every_collective_and_say_so(tmp_path) -> None:
    # Buffers from pymcoll.alloc for both implementations; the heap is sized to fit unless set.
    path = tmp_path / "bench.json"
    proc = run(BENCH + ["-n", "2", "--colls", "all", "-m", "8:64K", *QUICK, "--heap", "--json", str(path), "-q"],
               timeout=180)
    tables = table_rows(proc.stdout)
    assert sorted(tables) == sorted(ALL_TITLES), list(tables)
    assert all(r["#wrong"] == "0" for rows in tables.values() for r in rows)
    assert "buffers from pymcoll.alloc" in proc.stdout
    data = json.loads(path.read_text())
    assert data[0]["buffers"] == "heap" and {r["buffers"] for r in data[1:]} == {"heap"}


def test_bench_heap_size_covers_a_send_and_a_receive_buffer_per_rank() -> None:
    from pymcoll.cli.bench import heap_bytes_needed

    assert heap_bytes_needed(64 << 20, 2) == 2 * (3 * (64 << 20) + (16 << 20))
    assert heap_bytes_needed(8, 1) > 16
