"""The thread contract (as MPI_THREAD_MULTIPLE: one thread per communicator,
concurrently) and request progress: by the background thread, by Test loops,
and for many outstanding requests waited for in reverse order."""

from __future__ import annotations

import pytest

from conftest import run_mpi

CONFIGS = {
    # parts a (a thread per communicator), c (Test loops), d (reversed Waitall)
    "no-progress-thread": ("acd", {}),
    # parts a and d again with the background thread racing the callers, and b
    "progress-thread": ("abd", {"PYMCOLL_PROGRESS_THREAD": "1"}),
    # waits that only sleep (PYMCOLL_WAIT=sleep), with and without the background thread
    "sleep-waits": ("acd", {"PYMCOLL_WAIT": "sleep"}),
    "sleep-waits-progress-thread": ("abd", {"PYMCOLL_PROGRESS_THREAD": "1", "PYMCOLL_WAIT": "sleep"}),
}


def _run(n: int, parts: str, env: dict[str, str]) -> None:
    proc = run_mpi(n, "threads", "--parts", parts, env=dict(env, PYMCOLL_TIMEOUT="60"), timeout=150)
    if "SKIP:" in proc.stdout:
        pytest.skip(proc.stdout.split("SKIP:", 1)[1].strip().splitlines()[0])
    assert proc.stdout.count("threads ok") == n, proc.stdout[-4000:]


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_threads(n: int, config: str) -> None:
    parts, env = CONFIGS[config]
    _run(n, parts, env)


def test_threads_virtual_nodes() -> None:
    """Threads on different communicators whose inter-node steps go through MPI."""
    _run(4, "acd", {"PYMCOLL_NODE_SIZE": "2"})
    _run(4, "acd", {"PYMCOLL_NODE_SIZE": "2", "PYMCOLL_WAIT": "sleep"})  # MPI waits that sleep
