"""Checkpoints of a sharded DLRM: each rank writes its own shards, rank 0 the
dense part, and a manifest written last marks the checkpoint complete.

Layout of a checkpoint directory::

    step-00000100/shards-rank0.pt ...   each rank's shard rows and optimizer state
    step-00000100/dense.pt              the MLPs and the dense optimizer (rank 0)
    step-00000100/manifest.json         step, tables, dimension, pooling, optimizer, world size
    latest                              the name of the newest complete step directory

``latest`` is replaced atomically after every rank has written, so a job
killed while saving resumes from the previous checkpoint. Loading works at
any number of ranks: each rank assembles its shards from the saved shards
that overlap them (the row-wise Adagrad state of a column block is exact
when the block is a union of saved blocks, else the column-weighted mean).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch

from .embedding import ShardedEmbeddingBagCollection

FORMAT = 1


def _agree_ok(transport: Any, ok: bool) -> bool:
    flag = np.array([0.0 if ok else 1.0])
    transport.allreduce_sum(flag)
    return flag[0] == 0


def _dense_state(model: torch.nn.Module) -> dict:
    return {k: v for k, v in model.state_dict().items() if not k.startswith("embeddings.")}


def save_checkpoint(directory: Union[str, Path], model: torch.nn.Module, emb: ShardedEmbeddingBagCollection,
                    step: int, dense_optimizer: Optional[torch.optim.Optimizer] = None,
                    extra: Optional[dict] = None, keep: int = 2) -> Path:
    """Writes step `step` of `model` (whose sparse part is `emb`) under
    `directory`, keeping the `keep` newest step directories (0: all); a
    collective. Returns the step's directory."""
    if keep < 0:
        raise ValueError(f"keep={keep}: the number of checkpoints to keep (0: all)")
    root = Path(directory)
    name = f"step-{step:08d}"
    where = root / name
    rank = emb.rank
    error = None
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        error = exc
    if not _agree_ok(emb.transport, error is None):
        raise OSError(f"checkpoint directory {where}: cannot be created on every rank ({error})")
    try:
        shards = [{"table": t.shard.table, "row_start": t.shard.row_start, "row_end": t.shard.row_end,
                   "col_start": t.shard.col_start, "col_end": t.shard.col_end, "weight": t.weight,
                   "adagrad": t.adagrad} for t in emb.shards]
        tmp = where / f".shards-rank{rank}.pt.tmp"
        torch.save({"shards": shards}, tmp)
        os.replace(tmp, where / f"shards-rank{rank}.pt")
        if rank == 0:
            tmp = where / ".dense.pt.tmp"
            torch.save({"dense": _dense_state(model),
                        "optimizer": dense_optimizer.state_dict() if dense_optimizer is not None else None}, tmp)
            os.replace(tmp, where / "dense.pt")
    except OSError as exc:
        error = exc
    if not _agree_ok(emb.transport, error is None):
        raise OSError(f"checkpoint {where}: a rank failed to write its part ({error})")
    if rank == 0:
        manifest = {"format": FORMAT, "step": step, "world_size": emb.transport.size, "table_sizes": emb.table_sizes,
                    "dim": emb.dim, "pooling": emb.pooling, "optimizer": emb.optimizer, "extra": extra or {}}
        (where / "manifest.json").write_text(json.dumps(manifest, indent=1))
        tmp = root / ".latest.tmp"
        tmp.write_text(name + "\n")
        os.replace(tmp, root / "latest")
        if keep:
            for old in sorted(root.glob("step-*"))[:-keep]:
                if old.name != name:
                    shutil.rmtree(old, ignore_errors=True)
    _agree_ok(emb.transport, True)
    return where


def latest_checkpoint(directory: Union[str, Path]) -> Optional[Path]:
    """The newest complete step directory under `directory`, or None."""
    pointer = Path(directory) / "latest"
    if not pointer.exists():
        return None
    where = Path(directory) / pointer.read_text().strip()
    return where if (where / "manifest.json").exists() else None


def load_checkpoint(directory: Union[str, Path], model: torch.nn.Module, emb: ShardedEmbeddingBagCollection,
                    dense_optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
    """Loads the newest checkpoint under `directory` (or the step directory
    itself) into `model` and `emb`; returns its manifest. A collective."""
    where = Path(directory)
    if not (where / "manifest.json").exists():
        found = latest_checkpoint(where)
        if found is None:
            raise FileNotFoundError(f"{directory}: no complete checkpoint (no 'latest' with a manifest.json)")
        where = found
    manifest = json.loads((where / "manifest.json").read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{where}: checkpoint format {manifest.get('format')}, this version reads {FORMAT}")
    for key, mine in (("table_sizes", emb.table_sizes), ("dim", emb.dim), ("pooling", emb.pooling),
                      ("optimizer", emb.optimizer)):
        if manifest[key] != mine:
            raise ValueError(f"{where}: saved with {key}={manifest[key]!r}, the model has {mine!r}; build the "
                             "model with the checkpoint's settings")
    saved = []
    for r in range(int(manifest["world_size"])):
        saved.extend(torch.load(where / f"shards-rank{r}.pt", weights_only=True, mmap=True)["shards"])
    for t in emb.shards:
        _fill(t, [s for s in saved if s["table"] == t.shard.table], where)
    dense = torch.load(where / "dense.pt", weights_only=True)
    missing, unexpected = model.load_state_dict(dense["dense"], strict=False)
    missing = [k for k in missing if not k.startswith("embeddings.")]
    if missing or unexpected:
        raise ValueError(f"{where}: the dense part does not match the model (missing {missing}, "
                         f"unexpected {unexpected})")
    if dense_optimizer is not None and dense["optimizer"] is not None:
        dense_optimizer.load_state_dict(dense["optimizer"])
    return manifest


def _fill(table: Any, saved: list[dict], where: Path) -> None:
    """Copies the saved rows (and Adagrad state) overlapping `table`'s shard into it."""
    s = table.shard
    covered = torch.zeros(s.rows, s.cols, dtype=torch.bool)
    acc = torch.zeros(s.rows, dtype=torch.float64)
    acc_cols = torch.zeros(s.rows, dtype=torch.float64)
    any_state = False
    for x in saved:
        r0, r1 = max(s.row_start, x["row_start"]), min(s.row_end, x["row_end"])
        c0, c1 = max(s.col_start, x["col_start"]), min(s.col_end, x["col_end"])
        if r0 >= r1 or c0 >= c1:
            continue
        w = x["weight"]
        table.weight[r0 - s.row_start:r1 - s.row_start, c0 - s.col_start:c1 - s.col_start] = \
            w[r0 - x["row_start"]:r1 - x["row_start"], c0 - x["col_start"]:c1 - x["col_start"]]
        covered[r0 - s.row_start:r1 - s.row_start, c0 - s.col_start:c1 - s.col_start] = True
        if x["adagrad"] is not None:
            any_state = True
            acc[r0 - s.row_start:r1 - s.row_start] += x["adagrad"][r0 - x["row_start"]:r1 - x["row_start"]].double() \
                * (c1 - c0)
            acc_cols[r0 - s.row_start:r1 - s.row_start] += c1 - c0
    if not bool(covered.all()):
        raise ValueError(f"{where}: the saved shards do not cover table {s.table}'s rows "
                         f"{s.row_start}-{s.row_end}, columns {s.col_start}-{s.col_end}")
    table.adagrad = (acc / acc_cols.clamp(min=1)).to(table.weight.dtype) if any_state else None
