"""FTAR's end-to-end tests: the programs of tests/ftar_programs as replicas of a pymcoll.ftar LocalCluster."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from pymcoll.ftar.local_cluster import LocalCluster, LocalProcess

TESTS_DIR = Path(__file__).resolve().parent


class Cluster(LocalCluster):
    """A coordinator with the tests' short timeouts, and replicas run as ``python -m ftar_programs.<program>``."""

    def __init__(self, tmp: Path, min_replicas: int = 1, evict_ms: int = 1000, heartbeat_ms: int = 50,
                 join_timeout_ms: int = 500) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYMCOLL_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(TESTS_DIR), env.get("PYTHONPATH", "")] if p)
        super().__init__(tmp, env=env, cwd=TESTS_DIR)
        self.start_coordinator(min_replicas=min_replicas, evict_ms=evict_ms, heartbeat_ms=heartbeat_ms,
                               join_timeout_ms=join_timeout_ms)

    def program(self, rid: str, program: str, *args: str) -> list[str]:
        return [sys.executable, "-m", f"ftar_programs.{program}", "--coordinator", self.address, "--id", rid, *args]

    def start_program(self, rid: str, program: str, *args: str,
                      env: Optional[dict[str, str]] = None) -> LocalProcess:
        return self.start(rid, self.program(rid, program, *args), env=env)

    def start_programs(self, specs: list[tuple[str, str, list[str], Optional[dict[str, str]]]]
                                ) -> list[LocalProcess]:
        """Start replicas (id, program, args, env) that take their first step together."""
        return self.start_together([(rid, self.program(rid, prog, *args), env) for rid, prog, args, env in specs])
