"""Pooled-embedding batches of a trained DLRM, for the codec's tests and benchmarks.

    python perf/gen_embedding_batches.py --out /tmp/emb            # trains, then dumps
    python perf/gen_embedding_batches.py --out /tmp/emb --steps 0  # untrained tables

Trains the DLRM example (examples/dlrm_train.py, one rank, embedding
dimension --dim, Criteo Kaggle tables capped at --cap rows, power-law ids)
for --steps steps into a checkpoint, loads it, and writes the pooled
embeddings of --batches held-out batches of --batch-size samples for every
table: ``<out>/t<table>_b<batch>_d<dim>_<k>.f32`` (float32, row-major, rows x
dim), and ``<out>/manifest.json`` with each file's table, cardinality and
number of distinct rows. High-cardinality tables give hundreds to thousands
of distinct rows per 2048-row batch; tiny tables a few. Nothing it writes is
meant to be committed: run it where the data are needed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "dlrm_train.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=300, help="training steps before the dump (0: untrained)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as ckpt:
        if a.steps > 0:
            cmd = [sys.executable, "-P", str(EXAMPLE), "--steps", str(a.steps), "--dim", str(a.dim), "--cap",
                   str(a.cap), "--checkpoint-dir", ckpt, "--eval-samples", "4096", "--quiet", "--seed", str(a.seed)]
            print("training:", " ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        dump(a, Path(ckpt) if a.steps > 0 else None)
    return 0


def dump(a: argparse.Namespace, checkpoint: Path | None) -> None:
    import torch
    from mpi4py import MPI

    from pymcoll.algorithms.dlrm import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo, cap_table_sizes
    from pymcoll.algorithms.dlrm.checkpoint import load_checkpoint
    from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection
    from pymcoll.algorithms.dlrm.model import DLRM

    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, a.cap)
    emb = ShardedEmbeddingBagCollection(sizes, a.dim, MPI.COMM_SELF, optimizer="rowwise_adagrad", seed=a.seed)
    model = DLRM(emb, bottom=(64,), top=(128, 64), seed=a.seed)
    if checkpoint is not None:
        load_checkpoint(checkpoint, model, emb)
    data = SyntheticCriteo(sizes, seed=a.seed)
    files = []
    with torch.no_grad():
        for k in range(a.batches):
            batch = data.batch((1 << 41) + k, a.batch_size)
            pooled = emb(batch.sparse).numpy()  # (batch, tables, dim)
            for t in range(len(sizes)):
                block = np.ascontiguousarray(pooled[:, t, :], np.float32)
                name = f"t{t:02d}_b{a.batch_size}_d{a.dim}_{k}.f32"
                block.tofile(a.out / name)
                files.append({"file": name, "table": t, "table_rows": sizes[t], "rows": a.batch_size, "dim": a.dim,
                              "distinct_rows": int(len(np.unique(block, axis=0)))})
    (a.out / "manifest.json").write_text(json.dumps({"steps": a.steps, "cap": a.cap, "seed": a.seed,
                                                     "files": files}, indent=1))
    distinct = sorted(f["distinct_rows"] for f in files)
    print(f"wrote {len(files)} blocks to {a.out}: distinct rows per block from {distinct[0]} to {distinct[-1]}",
          file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
