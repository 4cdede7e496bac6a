"""Held-out AUC of the DLRM example trained with and without the compressed exchange.

    python perf/compare_training_compression.py                  # 2 ranks, the example's defaults
    python perf/compare_training_compression.py --steps 1000 -- --link-gbps 4

Runs examples/dlrm_train.py twice under mpiexec (same data, seeds and
steps), once plain and once with --compress (the error-bounded codec at the
adaptive bound), and writes both summaries and the AUC difference to
results/dlrm_compression_auc.json. Arguments after ``--`` go to both runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import commit  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "dlrm_train.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="default: the example's")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "dlrm_compression_auc.json")
    ap.add_argument("extra", nargs="*", help="more arguments for the example (after --)")
    a = ap.parse_args()
    from pymcoll.cli import launch

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in (("plain", []), ("compressed", ["--compress"])):
            summary = Path(tmp) / f"{name}.json"
            args = [sys.executable, "-P", str(EXAMPLE), "--quiet", "--json", str(summary), *flags, *a.extra]
            if a.steps is not None:
                args += ["--steps", str(a.steps)]
            cmd, env = launch.mpiexec_command(a.np, args)
            print("running:", " ".join(cmd), file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                return 1
            print(proc.stdout, flush=True)
            runs[name] = json.loads(summary.read_text())
    diff = runs["compressed"]["heldout_auc"] - runs["plain"]["heldout_auc"]
    plain, compressed = runs["plain"]["heldout_auc"], runs["compressed"]["heldout_auc"]
    print(f"held-out AUC: plain {plain:.4f}, compressed {compressed:.4f}, difference {diff:+.4f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "commit": commit(), "ranks": a.np,
                                 "extra": a.extra, "auc_difference": diff, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
