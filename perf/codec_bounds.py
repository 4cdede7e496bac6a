"""How far the codec is from what its quantized data allows: entropy bounds per data set and bound.

    python perf/codec_bounds.py                        # -> results/codec_bounds.json
    python perf/codec_bounds.py --emb-dir /tmp/emb     # + batches of perf/gen_embedding_batches.py

The codec's output is a row map (which rows repeat which) plus the codes of
the distinct rows. For each block this computes, from the same quantized
codes (code = round(x / (2 * bound)), the bound relative to the block's
value range, as the codec quantizes), the smallest sizes an entropy coder
with exact arithmetic could reach:

* row map: one bit per row (first occurrence or not) plus the order-0
  entropy of the repeated rows' indices;
* codes, order 0: the entropy of all codes of the distinct rows under one
  table, plus the table (12 bits per symbol present);
* codes, by row: each distinct row's largest |code| (capped at 8) as a
  context, coded per row at its entropy, and the codes under one table per
  context (each table counted as above): a model a static coder can use,
  which captures that trained tables mix rows of very different magnitudes;
* the bound: row map plus the smaller of the two code sizes.

and reports ratios (float32 bytes over bytes) next to the codec's actual
one. Headers and the handful of exact (exception) values are left out, so
the bounds are optimistic. One process; a few seconds per data set.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil and bench_codec, also under python -P
from bench_codec import BOUNDS, datasets  # noqa: E402
from perfutil import commit  # noqa: E402

HERE = Path(__file__).resolve().parent
CONTEXT_CAP = 8          # largest |code| context kept apart; larger ones share one context
TABLE_BITS_PER_SYMBOL = 12


def entropy_bits(counts: np.ndarray) -> float:
    """Bits to code the samples behind `counts` at their order-0 entropy."""
    counts = counts[counts > 0]
    if counts.size == 0:
        return 0.0
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum() * counts.sum())


def coded_bits(values: np.ndarray) -> float:
    """Entropy of non-negative integers plus the cost of their table."""
    counts = np.bincount(values.ravel())
    return entropy_bits(counts) + TABLE_BITS_PER_SYMBOL * np.count_nonzero(counts)


def block_bounds(x: np.ndarray, bound: float) -> dict[str, float]:
    """Bytes of the row map and of the codes (order 0, by row) of block `x` at relative `bound`."""
    finite = x[np.isfinite(x)]
    abs_bound = bound * (float(finite.max()) - float(finite.min())) if finite.size else 0.0
    distinct, first, inverse = np.unique(x, axis=0, return_index=True, return_inverse=True)
    repeated = np.ones(len(x), dtype=bool)
    repeated[first] = False  # a row's first occurrence is a bit of the map, its repeats are indices
    repeats = inverse.ravel()[repeated]
    rowmap = len(x) + (entropy_bits(np.bincount(repeats)) if repeats.size else 0.0)
    if abs_bound <= 0:
        return {"rowmap": rowmap / 8, "order0": 0.0, "by_row": 0.0}
    q = np.rint(np.nan_to_num(distinct.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0) / (2 * abs_bound))
    q = q.astype(np.int64)
    sym = q - q.min()
    order0 = coded_bits(sym)
    context = np.minimum(np.abs(q).max(axis=1), CONTEXT_CAP)
    by_row = coded_bits(context) + sum(coded_bits(sym[context == c]) for c in np.unique(context))
    return {"rowmap": rowmap / 8, "order0": order0 / 8, "by_row": by_row / 8}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emb-dir", type=Path, default=None, help="output of perf/gen_embedding_batches.py")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "codec_bounds.json")
    a = ap.parse_args()
    from pymcoll.algorithms import compression

    results: dict[str, dict[str, Any]] = {}
    for name, blocks in datasets(a).items():
        results[name] = {}
        for bound in BOUNDS:
            raw = sum(b.nbytes for b in blocks)
            per = [block_bounds(b, bound) for b in blocks]
            actual = [len(compression.compress(b, bound)) for b in blocks]
            tot = {k: sum(p[k] for p in per) for k in ("rowmap", "order0", "by_row")}
            best = tot["rowmap"] + min(tot["order0"], tot["by_row"])
            per_block_bound = [b.nbytes / (p["rowmap"] + min(p["order0"], p["by_row"]))
                               for b, p in zip(blocks, per, strict=True)]
            results[name][str(bound)] = r = {
                "codec": raw / sum(actual),
                "bound": raw / best,
                "codes_order0_only": raw / tot["order0"],
                "codes_by_row_only": raw / tot["by_row"],
                "rowmap_only": raw / tot["rowmap"] if tot["rowmap"] else None,
                "bound_per_block": [min(per_block_bound), max(per_block_bound)],
                "codec_per_block": [min(b.nbytes / n for b, n in zip(blocks, actual, strict=True)),
                                    max(b.nbytes / n for b, n in zip(blocks, actual, strict=True))],
            }
            print(f"{name:58s} {bound:5.2f}  codec {r['codec']:7.1f}x  bound {r['bound']:7.1f}x "
                  f"(blocks {r['bound_per_block'][0]:.1f}-{r['bound_per_block'][1]:.1f}x)  codes alone: "
                  f"order 0 {r['codes_order0_only']:.1f}x, by row {r['codes_by_row_only']:.1f}x", flush=True)
    doc = {"date": datetime.date.today().isoformat(), "commit": commit(), "context_cap": CONTEXT_CAP,
           "table_bits_per_symbol": TABLE_BITS_PER_SYMBOL, "results": results}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
