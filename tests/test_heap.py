"""The shared heap (pymcoll.alloc): its pages are taken from the segment's
directory as arrays are allocated, so a communicator costs its cells only,
and a directory without room is a MemoryError naming it, not a SIGBUS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import TESTS_DIR, mpi_env, mpiexec_command


def _can_mount_privately() -> str:
    """'' where a private mount namespace with a tmpfs can be made, else why not."""
    if os.geteuid() != 0:
        return "needs root (a tmpfs in a private mount namespace)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d && rmdir $d"],
                           capture_output=True, text=True, timeout=30)
    return "" if probe.returncode == 0 else f"cannot mount a tmpfs here: {probe.stderr.strip()}"


@pytest.mark.parametrize("n", [2, 3])
def test_heap_larger_than_its_directory(n: int, tmp_path) -> None:
    why = _can_mount_privately()
    if why:
        pytest.skip(why)
    room = 24 << 20
    where = tmp_path / "shm"
    where.mkdir()
    program = mpiexec_command(n) + [sys.executable, "-m", "mpi_programs.heap_room", str(room)]
    script = f'mount -t tmpfs -o size={room},mode=0700 tmpfs "$1" && shift && exec "$@"'
    env = mpi_env({"PYMCOLL_SHM_DIR": str(where), "PYMCOLL_HEAP_SIZE": "1G", "PYMCOLL_TIMEOUT": "30"})
    try:
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(where),
                               *program], cwd=TESTS_DIR, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"heap_room at {n} ranks hung: {exc}")
    assert proc.returncode == 0, f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    assert "ok" in proc.stdout, proc.stdout
