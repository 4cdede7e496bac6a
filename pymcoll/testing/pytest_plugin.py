"""A pytest fixture that runs pymcoll.testing checks under mpiexec.

Enable it in a conftest.py with ``pytest_plugins = ["pymcoll.testing.pytest_plugin"]``
(or ``pytest -p pymcoll.testing.pytest_plugin``). Each check runs in its own
``mpiexec`` job with a timeout, so a hang fails the test instead of the run::

    def test_my_allgather(mpi_check):
        result = mpi_check(3, "mypkg.comms:make_comm", collectives=["Allgather"], examples=50)
        result.assert_ok()

Loading the plugin imports pymcoll, which initialises MPI in the pytest
process as a singleton; the checks themselves run in the mpiexec jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

import pytest

from ..cli.launch import mpiexec_command, python_command


@dataclass
class MPICheckResult:
    """What one ``python -m pymcoll.testing`` job found."""

    returncode: int
    ok: bool
    failures: list[dict[str, Any]] = field(default_factory=list)
    examples: dict[str, int] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""

    def assert_ok(self) -> None:
        """Fail the calling test with the report unless every check passed."""
        if not self.ok:
            lines = [f"{f['collective']} [{f['layout']}]: {f['message']}\n    reproduce: {f['call']}"
                     for f in self.failures]
            detail = "\n".join(lines) or (self.stdout[-3000:] + self.stderr[-3000:])
            pytest.fail(f"pymcoll.testing found problems (exit status {self.returncode}):\n{detail}",
                        pytrace=False)


def run_check(np_: int, impl: str = "pymcoll", *, collectives: Optional[Iterable[str]] = None,
              examples: int = 50, layouts: Iterable[str] = ("world",), max_bytes: str = "64K",
              thresholds: Iterable[int] = (), dtypes: Optional[Iterable[str]] = None,
              deadline: float = 60.0, env: Optional[dict[str, str]] = None,
              timeout: float = 600.0, cwd: Optional[str] = None, spec_forms: bool = False,
              compare_wrapped: bool = False) -> MPICheckResult:
    """Run ``python -m pymcoll.testing`` on `np_` ranks and parse its JSON report.

    impl: 'pymcoll', 'mpi4py' or 'module:function' (importable from `cwd` or
    the installed packages). A job that outlives `timeout` fails the test.
    spec_forms, compare_wrapped: see :func:`pymcoll.testing.check`.
    """
    args = ["--impl", impl, "--examples", str(examples), "--layouts", ",".join(layouts),
            "--max-bytes", str(max_bytes), "--deadline", str(deadline), "--json", "--launched"]
    if collectives:
        args += ["--collectives", ",".join(collectives)]
    if thresholds:
        args += ["--thresholds", ",".join(str(t) for t in thresholds)]
    if dtypes:
        args += ["--dtypes", ",".join(dtypes)]
    if spec_forms:
        args.append("--spec-forms")
    if compare_wrapped:
        args.append("--compare-wrapped")
    cmd, job_env = mpiexec_command(np_, python_command("pymcoll.testing", *args))
    job_env.update(env or {})
    try:
        proc = subprocess.run(cmd, env=job_env, cwd=cwd or os.getcwd(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pymcoll.testing job ran past {timeout} s: {' '.join(cmd)}", pytrace=False)
    report: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
    return MPICheckResult(proc.returncode, bool(report.get("ok")) and proc.returncode == 0,
                          report.get("failures", []), report.get("examples", {}), proc.stdout, proc.stderr)


@pytest.fixture
def mpi_check() -> Callable[..., MPICheckResult]:
    """The :func:`run_check` function: ``mpi_check(np, impl, collectives=..., ...)``."""
    return run_check
