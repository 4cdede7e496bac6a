#!/usr/bin/env python3
"""The learned policy against the best classical policy on many random id arrays.

The property test (tests/test_tiered_guard.py) draws a few arrays of each
shape per run; this sweep serves many: each shape of ``SHAPES`` (the test's)
and ``OPEN_SHAPES`` (shapes where the learned policy is known to trail) for
seeds in --seeds, at each capacity share of --shares. For each array, every
classical online policy and ``LearnedCachePolicy(**--kw)`` serve it through
``simulate``; the margin is learned minus the best classical, in points of
hit rate. Classical results do not depend on --kw and are cached in --cache,
so comparing settings of the learned policy costs one learned run per array.

    python perf/sweep_guard_arrays.py                                  # seeds 0-95, every shape
    python perf/sweep_guard_arrays.py --shapes scans --kw '{"scan_run": null}'   # without the scan filter

Prints progress, the arrays below -0.5 points and a summary per shape; writes
--out (JSON: every margin, the arguments, the run's head).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # perfutil, also under python -P
sys.path.insert(0, str(HERE.parent / "tests"))  # the property test's generator
from perfutil import run_record, write_results  # noqa: E402
from test_tiered_guard import OPEN_SHAPES, SHAPES, shaped_ids  # noqa: E402

from pymcoll.algorithms.tiered_cache import LearnedCachePolicy, simulate  # noqa: E402
from pymcoll.algorithms.tiered_cache.policies import ONLINE  # noqa: E402

_KW: dict[str, Any] = {}


def _key(case: tuple[str, int, float]) -> str:
    return f"{case[0]}:{case[1]}:{case[2]}"


def _classical(case: tuple[str, int, float]) -> tuple[str, float]:
    ids = shaped_ids(case[0], case[1])
    return _key(case), max(simulate(ids, case[2], name).hit_rate for name in ONLINE)


def _learned(case: tuple[str, int, float]) -> tuple[str, float]:
    ids = shaped_ids(case[0], case[1])
    return _key(case), simulate(ids, case[2], LearnedCachePolicy(int(ids.max()) + 1, **_KW)).hit_rate


def _init(kw: dict[str, Any]) -> None:
    _KW.clear()
    _KW.update(kw)


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=_seeds, default=_seeds("0-95"), help="a seed or a range, e.g. 0-95")
    ap.add_argument("--shapes", type=lambda s: s.split(","), default=list(SHAPES + OPEN_SHAPES))
    ap.add_argument("--shares", type=lambda s: [float(x) for x in s.split(",")], default=[0.02, 0.05, 0.1])
    ap.add_argument("--kw", type=json.loads, default={}, help="LearnedCachePolicy arguments, as JSON")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/pymcoll_guard_arrays_classical.json"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/guard_arrays.json"))
    args = ap.parse_args()
    bad = [s for s in args.shapes if s not in SHAPES + OPEN_SHAPES]
    if bad:
        ap.error(f"--shapes: unknown {bad}; choose from {', '.join(SHAPES + OPEN_SHAPES)}")
    LearnedCachePolicy(10, **args.kw)  # a wrong --kw fails here, with the policy's own message
    cases = [(shape, seed, share) for shape in args.shapes for seed in args.seeds for share in args.shares]
    cache: dict[str, float] = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    todo = [c for c in cases if _key(c) not in cache]
    started = time.perf_counter()
    learned: dict[str, float] = {}
    with Pool(args.procs, initializer=_init, initargs=(args.kw,)) as pool:
        for i, (k, v) in enumerate(pool.imap_unordered(_classical, todo, chunksize=4), 1):
            cache[k] = v
            if i % 100 == 0 or i == len(todo):
                print(f"classical {i}/{len(todo)}  {time.perf_counter() - started:.0f} s", flush=True)
        if todo:
            args.cache.write_text(json.dumps(cache))
        for i, (k, v) in enumerate(pool.imap_unordered(_learned, cases, chunksize=4), 1):
            learned[k] = v
            if i % 100 == 0 or i == len(cases):
                print(f"learned {i}/{len(cases)}  {time.perf_counter() - started:.0f} s", flush=True)
    margin = {k: 100.0 * (learned[k] - cache[k]) for k in learned}
    below = sorted((v, k) for k, v in margin.items() if v < -0.5)
    print(f"\n{len(cases)} arrays, {time.perf_counter() - started:.0f} s; below -0.5 points: {len(below)}")
    for v, k in below[:40]:
        print(f"  {k:28s} {v:+.2f}")
    print("\n| shape | arrays | below -0.5 | worst | mean |\n|---|---|---|---|---|")
    for shape in args.shapes:
        vals = [v for k, v in margin.items() if k.startswith(shape + ":")]
        print(f"| {shape} | {len(vals)} | {sum(v < -0.5 for v in vals)} | {min(vals):+.2f} | {np.mean(vals):+.2f} |")
    doc = run_record(script="perf/sweep_guard_arrays.py", seeds=[args.seeds[0], args.seeds[-1]],
                     shapes=args.shapes, shares=args.shares, kw=args.kw, margins=margin,
                     below=[k for _, k in below])
    write_results(doc, args.out, None)


if __name__ == "__main__":
    main()
