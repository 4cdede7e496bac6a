"""MPICH's own collective test suite (test/mpi/coll), its C programs run through the preload library.

The suite is the ``test/mpi`` folder of MPICH's source, fetched when the test starts from
Debian's archive (the original tarball of Debian's ``mpich`` source package, checked against the
sha256 that Debian's source index gives), then configured and built with the mpicc on PATH;
nothing of it is kept in this repository. ``PYMCOLL_MPICH_SUITE=DIR`` names a ``test/mpi`` folder
already configured and built (``make`` in util, dtpools and coll) instead, for offline runs.

Every program of ``coll/testlist`` runs at the rank count the list gives, twice: with the MPI
alone (the reference) and with ``LD_PRELOAD`` of libpymcoll_pmpi.so. With the preload library a
program must print "No Errors" wherever the MPI alone does, and may fail only where the MPI alone
fails too (the suite comes from an older MPICH release, and a few of its programs expect answers
this MPI gives otherwise); programs that pass only with it (the MPI alone past its time limit)
are listed. The preload library's report must show
collectives in pymcoll's core.

Building the suite takes minutes and a run of its 188 program runs twice more, so it runs outside CI
(slow marker).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import CI, launcher_env, mpi_env, mpiexec_command
from test_pmpi import preload_path

MIRROR = os.environ.get("PYMCOLL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
RELEASE = "bookworm"
#: Seconds one program may take (MPICH's own collectives at 10 ranks on 2 cores are slow).
PROGRAM_TIMEOUT = 180


def _debian_orig(where: Path) -> Path:
    """Debian's original MPICH source tarball, checked against the sha256 of Debian's source index."""
    index_url = f"{MIRROR}/dists/{RELEASE}/main/source/Sources.xz"
    with urllib.request.urlopen(index_url, timeout=120) as r:
        index = lzma.decompress(r.read()).decode("utf-8", "replace")
    stanza = next((s for s in index.split("\n\n") if s.startswith("Package: mpich\n")), None)
    if stanza is None:
        pytest.fail(f"{index_url} lists no mpich source package")
    directory = re.search(r"^Directory: (\S+)$", stanza, re.M)
    orig = re.search(r"^ ([0-9a-f]{64}) \d+ (mpich_[^ ]+\.orig\.tar\.[a-z0-9]+)$",
                     stanza.partition("Checksums-Sha256:")[2], re.M)
    if directory is None or orig is None:
        pytest.fail(f"{index_url}: the mpich entry names no directory or no sha256 of an orig tarball; set "
                    f"PYMCOLL_MPICH_SUITE to a built test/mpi folder to run offline")
    directory = directory.group(1)
    sha, name = orig.groups()
    out = where / name
    with urllib.request.urlopen(f"{MIRROR}/{directory}/{name}", timeout=300) as r:
        out.write_bytes(r.read())
    if hashlib.sha256(out.read_bytes()).hexdigest() != sha:
        pytest.fail(f"{name}: sha256 differs from the one {index_url} gives")
    return out


def _build(test_mpi: Path) -> None:
    """Configures MPICH's test suite for the mpicc on PATH and builds what coll/ needs."""
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        pytest.fail("mpicc not found on PATH: the MPI's compiler wrapper builds MPICH's test programs")
    prefix = str(Path(mpicc).resolve().parent.parent)
    steps = [(["./configure", f"--with-mpi={prefix}", "--disable-fortran", "--disable-cxx", "--disable-romio",
               "--disable-spawn", "--disable-ft-tests"], 900)]
    steps += [(["make", "-j2", "-C", sub], 900) for sub in ("util", "dtpools", "coll")]
    for cmd, limit in steps:
        proc = subprocess.run(cmd, cwd=test_mpi, capture_output=True, text=True, timeout=limit)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed in {test_mpi}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built test/mpi folder."""
    given = os.environ.get("PYMCOLL_MPICH_SUITE")
    if given:
        return Path(given)
    where = tmp_path_factory.mktemp("mpich-source")
    archive = _debian_orig(where)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[1:3] == ["test", "mpi"]]
        tar.extractall(where, members=members, filter="tar")  # "tar": keeps the scripts executable
    test_mpi = next(where.glob("mpich-*/test/mpi"))
    _build(test_mpi)
    return test_mpi


def programs(coll: Path) -> list[tuple[str, int, list[str], dict[str, str]]]:
    """coll/testlist: (program, ranks, arguments, environment) per line that is not a comment."""
    out = []
    for line in (coll / "testlist").read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        args, env = [], {}
        for option in fields[2:]:
            key, _, value = option.partition("=")
            if key == "arg":
                args.append(value)
            elif key == "env":
                name, _, val = value.partition("=")
                env[name] = val
        out.append((fields[0], int(fields[1]), args, env))
    return out


def _run(coll: Path, name: str, n: int, args: list[str], env: dict[str, str], preload: bool) -> tuple[bool, str]:
    """(whether the program passed, its output's tail)."""
    settings = dict(env)
    if preload:
        settings.update({"LD_PRELOAD": str(preload_path()), "PYMCOLL_PMPI_VERBOSE": "1"})
    cmd = mpiexec_command(n) + launcher_env(settings) + [f"./{name}", *args]
    try:
        proc = subprocess.run(cmd, cwd=coll, env=mpi_env(), capture_output=True, text=True, timeout=PROGRAM_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {PROGRAM_TIMEOUT} s"
    text = proc.stdout + proc.stderr
    return proc.returncode == 0 and "No Errors" in proc.stdout, text[-2500:]


def _core_calls(text: str) -> int:
    """Calls the preload library's report (PYMCOLL_PMPI_VERBOSE) counts in pymcoll's core."""
    return sum(int(m.group(1)) for m in re.finditer(r"^\s+MPI_\w+\s+(\d+)\s+\d+", text, re.M))


@pytest.mark.slow
@pytest.mark.skipif(CI, reason="runs outside CI (slow marker): it builds MPICH's test suite from source")
@pytest.mark.timeout(7200)
def test_mpich_coll_suite_through_preload(suite: Path) -> None:
    coll = suite / "coll"
    listed = programs(coll)
    assert len(listed) > 100, f"{coll / 'testlist'} lists only {len(listed)} programs"
    both_fail: list[str] = []
    only_ours: list[str] = []  # the MPI alone failed or timed out: not a difference pymcoll made wrong
    differ: list[str] = []
    core = 0
    t0 = time.monotonic()
    for name, n, args, env in listed:
        label = " ".join([name, str(n), *args])
        ours_ok, ours = _run(coll, name, n, args, env, preload=True)
        core += _core_calls(ours)
        ref_ok, ref = _run(coll, name, n, args, env, preload=False)
        if ours_ok and ref_ok:
            continue
        if not ours_ok and not ref_ok:
            both_fail.append(label)
        elif ours_ok:
            only_ours.append(f"{label} ({ref.strip().splitlines()[-1] if ref.strip() else 'no output'})")
        else:
            differ.append(f"{label}: the MPI alone passes, with the preload library it fails\n--- with preload\n"
                          f"{ours}\n--- the MPI alone\n{ref}")
    print(f"\nMPICH coll suite ({suite}): {len(listed)} programs in {time.monotonic() - t0:.0f} s; "
          f"{len(listed) - len(both_fail) - len(only_ours) - len(differ)} pass with and without the preload "
          f"library; failing with the MPI alone as well: {both_fail or 'none'}; passing only with the preload "
          f"library: {only_ours or 'none'}; {core} calls in pymcoll's core")
    assert not differ, "\n\n".join(differ)
    assert core > 0, "the preload library's reports count no call in pymcoll's core"


def test_testlist_is_read_as_mpich_writes_it(tmp_path: Path) -> None:
    """The list's format: comments, arguments and environment options."""
    (tmp_path / "testlist").write_text("# a comment\nallred 4 arg=-count=10 timeLimit=300\n\n"
                                       "bcasttest 8 env=MPIR_CVAR_X=1 strict=false\n")
    assert programs(tmp_path) == [("allred", 4, ["-count=10"], {}), ("bcasttest", 8, [], {"MPIR_CVAR_X": "1"})]
