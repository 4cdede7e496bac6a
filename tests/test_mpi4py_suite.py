"""mpi4py's own collective test suite, run against pymcoll.Comm.

The suite is the ``test/`` folder of the sdist of the installed mpi4py
version, downloaded from PyPI when the tests start (or taken from
``PYMCOLL_MPI4PY_SUITE=DIR``); nothing of it is kept in this repository. Each
configuration runs the modules twice under mpiexec: unchanged (the
reference) and with every test's communicator replaced by a pymcoll.Comm
over a fresh duplicate (mpi_programs/mpi4py_suite.py). The pymcoll run must
pass every test the reference runs, skip exactly what the reference skips,
and finish within its timeout.

CI runs 2 ranks and 4 ranks across virtual nodes of 2 (and 2 ranks again on
the Open MPI route); at 4 ranks, oversubscribed twice on the CI machine, it
runs the blocking modules (buffer and vector forms, objects) and leaves the
non-blocking and persistent ones, which take the same argument parsing, to
full runs. The other configurations carry the ``slow`` marker and run outside
CI.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from conftest import CI
from suite_runs import Launcher, launch_here, run_suite, verdicts

MODULES = ("test_cco_buf", "test_cco_vec", "test_cco_nb_buf", "test_cco_nb_vec", "test_cco_pr_buf",
           "test_cco_pr_vec", "test_cco_obj")
# CI past 2 ranks: the blocking modules (about a third of the 4-rank run's time).
MODULES_BLOCKING = ("test_cco_buf", "test_cco_vec", "test_cco_obj")


@pytest.fixture(scope="session")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test/ folder of the installed mpi4py version's sdist."""
    return fetch_suite(tmp_path_factory)


def download_from_index(name: str, version: str, where: Path, timeout: float = 120.0) -> tuple[Optional[Path], str]:
    """The sdist `name`-`version`.tar.gz from the package index's simple page (PIP_INDEX_URL, else PyPI),
    checked against the sha256 the page gives; (path, "") or (None, why not)."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{name}/"
    try:
        with urllib.request.urlopen(page_url, timeout=30) as r:
            page = r.read().decode("utf-8", "replace")
        filename = f"{name}-{version}.tar.gz"
        links = [h for h in re.findall(r'href="([^"]+)"', page) if urllib.parse.urlsplit(h).path.endswith("/" + filename)
                 or urllib.parse.urlsplit(h).path == filename]
        if not links:
            return None, f"{page_url} lists no {filename}"
        url = urllib.parse.urljoin(page_url, links[0].replace("&amp;", "&"))
        want = urllib.parse.urlsplit(url).fragment.partition("sha256=")[2]
        with urllib.request.urlopen(url.split("#")[0], timeout=timeout) as r:
            data = r.read()
        if want and hashlib.sha256(data).hexdigest() != want:
            return None, f"{url}: sha256 differs from the index's"
        out = where / filename
        out.write_bytes(data)
        return out, ""
    except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
        return None, f"{page_url}: {exc}"


def fetch_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PYMCOLL_MPI4PY_SUITE, else the test/ folder of the installed mpi4py's sdist, downloaded."""
    given = os.environ.get("PYMCOLL_MPI4PY_SUITE")
    if given:
        return Path(given)
    import mpi4py

    version = mpi4py.__version__
    where = tmp_path_factory.mktemp("mpi4py-sdist")
    # Straight from the index first: pip prepares an sdist's metadata after downloading it, which needs
    # the build backend (this environment's setuptools, or an isolated environment that downloads its
    # requirements: minutes against a slow registry). pip is the fallback (a mirror, a proxy pip knows).
    archive, why = download_from_index("mpi4py", version, where)
    archives = [archive] if archive is not None else []
    notes = [why] if why else []
    base = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", "-d", str(where)]
    for extra, limit in ((["--no-build-isolation"], 120), ([], 300)):
        if archives:
            break
        cmd = base + extra + [f"mpi4py=={version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            notes.append(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-1000:]}")
        except subprocess.TimeoutExpired:
            notes.append(f"{' '.join(cmd)}: timed out after {limit} s")
        archives = sorted(where.glob("mpi4py-*.tar.gz"))
    if not archives:
        pytest.fail(f"could not download the mpi4py {version} sdist:\n" + "\n".join(notes)
                    + "\nSet PYMCOLL_MPI4PY_SUITE to its test/ folder to run offline.")
    with tarfile.open(archives[0]) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[1:2] == ["test"]]
        tar.extractall(where, members=members, filter="data")
    test_dir = where / f"mpi4py-{version}" / "test"
    assert (test_dir / "test_cco_buf.py").is_file(), f"no test_cco_buf.py in {test_dir}"
    return test_dir


def _run(n: int, suite: Path, out: Path, env: dict[str, str | None], plain: bool, timeout: float,
         launch: Launcher = launch_here, modules: tuple[str, ...] = MODULES) -> dict:
    program = [sys.executable, "-m", "mpi_programs.mpi4py_suite", str(suite), str(out)]
    program += (["--plain"] if plain else []) + list(modules)
    return run_suite(n, program, out, env, timeout, launch)


CONFIGS = [
    pytest.param(2, {}, id="np2"),
    pytest.param(4, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "block"}, id="np4-nodes2-block"),
] + [
    pytest.param(n, env, id=name, marks=[pytest.mark.slow,
                                         pytest.mark.skipif(CI, reason="runs outside CI (slow marker)")])
    for name, n, env in (
        ("np1", 1, {}), ("np3", 3, {}), ("np4", 4, {}),
        ("np4-nodes2-cyclic", 4, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "cyclic"}),
        ("np5-nodes2-block", 5, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "block"}),
        ("np5-nodes2-cyclic", 5, {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_NODE_LAYOUT": "cyclic"}),
    )
]


@pytest.mark.parametrize("n,env", CONFIGS)
def test_mpi4py_suite(n: int, env: dict[str, str], suite_dir: Path, tmp_path: Path) -> None:
    check_suite(n, env, suite_dir, tmp_path)


def check_suite(n: int, env: dict[str, str], suite_dir: Path, tmp_path: Path, launch: Launcher = launch_here,
                where: str = "", modules: Optional[tuple[str, ...]] = None) -> None:
    """Runs the suite plain and on pymcoll.Comm with `launch`; pymcoll must match the reference.
    `modules` defaults to every module, and to the blocking ones past 2 ranks in CI."""
    if modules is None:
        modules = MODULES_BLOCKING if CI and n > 2 else MODULES
    reference = verdicts(_run(n, suite_dir, tmp_path / "plain", {}, plain=True, timeout=300, launch=launch,
                               modules=modules))
    # A short deadline turns a rank left waiting by another's error into a failure, not a hang.
    result = _run(n, suite_dir, tmp_path / "pymcoll", dict(env, PYMCOLL_TIMEOUT="30"), plain=False,
                  timeout=240 + 60 * n, launch=launch, modules=modules)
    ours = verdicts(result)
    counts = {k: sum(1 for v in ours.values() if v == k) for k in ("pass", "skip", "fail", "error")}
    print(f"\nmpi4py suite at {n} ranks {where}{env or ''} ({len(modules)} modules): {len(ours)} tests, {counts['pass']} passed, "
          f"{counts['skip']} skipped; reference: {sum(1 for v in reference.values() if v == 'pass')} passed, "
          f"{sum(1 for v in reference.values() if v == 'skip')} skipped")
    assert set(ours) == set(reference), (f"tests only in the reference: {sorted(set(reference) - set(ours))}; "
                                         f"only with pymcoll: {sorted(set(ours) - set(reference))}")
    bad = {tid: v for tid, v in ours.items() if v not in ("pass", "skip")}
    assert not bad, "\n\n".join(f"{tid}: {v}\n{result['details'].get(tid, '')}" for tid, v in sorted(bad.items()))
    differ = {tid: (reference[tid], ours[tid]) for tid in ours if (ours[tid] == "skip") != (reference[tid] == "skip")}
    assert not differ, f"skips differ from plain mpi4py (reference, pymcoll): {differ}"
    # The substitution really happened: every communicator-bound test ran on a pymcoll.Comm.
    assert min(result["substituted"]) >= counts["pass"] - 10, result["substituted"]
