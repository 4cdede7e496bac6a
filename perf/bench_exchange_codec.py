"""The DLRM embedding exchange with and without the codec over emulated links of 1, 4 and 10 Gb/s.

    python perf/bench_exchange_codec.py             # 2 ranks -> results/exchange_codec.json
    python perf/bench_exchange_codec.py --np 2 --links 1,4,10 --iters 8

Starts itself under mpiexec. Every rank holds a batch of --batch-size
samples of the Criteo schema (tables capped at --cap rows, dimension --dim);
the embedding collection runs over an emulated link per rank
(``link_gbps``) with the error-bounded codec (adaptive bound, automatic
bypass) or without. Timed per iteration, slowest rank, median: the forward
exchange end to end (ids out, lookup, pooled embeddings back, with encoding,
the size exchange and decoding) and the backward gradient exchange
(uncompressed unless --compress-backward). The two variants alternate in
blocks at each link speed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))  # perfutil, also under python -P
from perfutil import plotter, run_record, run_worker, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent


def worker(a: argparse.Namespace) -> None:
    import torch
    from mpi4py import MPI

    from pymcoll.algorithms.compression.exchange_compressor import ExchangeCompressor
    from pymcoll.algorithms.dlrm import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo, cap_table_sizes
    from pymcoll.algorithms.dlrm.embedding import ShardedEmbeddingBagCollection

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, a.cap)
    data = SyntheticCriteo(sizes, seed=1)
    records = []
    for gbps in [float(x) for x in a.links.split(",")]:
        variants = {}
        for name in ("raw", "codec"):
            codec = ExchangeCompressor(backward=a.compress_backward) if name == "codec" else None
            variants[name] = (ShardedEmbeddingBagCollection(sizes, a.dim, comm, seed=0, codec=codec, link_gbps=gbps),
                              codec)
        times: dict[str, list[tuple[float, float]]] = {n: [] for n in variants}
        for it in range(a.iters + 2):
            order = list(variants) if it % 2 == 0 else list(reversed(variants))
            for name in order:
                emb, _ = variants[name]
                batch = data.batch(it * size + rank, a.batch_size)
                comm.Barrier()
                pooled = dict(emb.exchange.pooled_seconds)
                t0 = time.perf_counter()
                out = emb(batch.sparse)
                t1 = time.perf_counter()
                out.sum().backward()
                t2 = time.perf_counter()
                emb.zero_grad()
                if it >= 2:  # two warm-up rounds
                    times[name].append((t1 - t0, t2 - t1,
                                        emb.exchange.pooled_seconds["forward"] - pooled["forward"],
                                        emb.exchange.pooled_seconds["backward"] - pooled["backward"]))
        for name, rows in times.items():
            local = np.array(rows)
            slowest = np.empty_like(local)
            comm.Allreduce(local, slowest, op=MPI.MAX)
            codec = variants[name][1]
            if rank == 0:
                rec = {"link_gbps": gbps, "variant": name, "forward_ms": float(np.median(slowest[:, 0])) * 1e3,
                       "backward_ms": float(np.median(slowest[:, 1])) * 1e3,
                       "pooled_forward_ms": float(np.median(slowest[:, 2])) * 1e3,
                       "pooled_backward_ms": float(np.median(slowest[:, 3])) * 1e3,
                       "pooled_bytes_sent_per_iter": variants[name][0].exchange.timer.sent_bytes.get("pooled", 0)
                       / (a.iters + 2)}
                if codec is not None:
                    st = codec.stats
                    rec.update(ratio=st.ratio, blocks=st.blocks, bypassed=st.bypassed,
                               encode_ms_per_iter=st.encode_s / (a.iters + 2) * 1e3,
                               decode_ms_per_iter=st.decode_s / (a.iters + 2) * 1e3)
                records.append(rec)
    if rank == 0:
        print("RESULT " + json.dumps({"ranks": size, "records": records}), flush=True)


@plotter("bench_exchange_codec")
def plot(plt: Any, doc: dict) -> Any:
    """Bars of the pooled exchange's time per link speed, raw and with the codec."""
    links = sorted({r["link_gbps"] for r in doc["records"]})
    by = {(r["link_gbps"], r["variant"]): r for r in doc["records"]}
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (variant, color) in enumerate((("raw", "tab:orange"), ("codec", "tab:blue"))):
        ax.bar(np.arange(len(links)) + (k - 0.5) * 0.38, [by[(g, variant)]["pooled_forward_ms"] for g in links], 0.38,
               color=color, label="no codec" if variant == "raw" else "error-bounded codec (bypass on)")
    for i, g in enumerate(links):
        speed = by[(g, "raw")]["pooled_forward_ms"] / by[(g, "codec")]["pooled_forward_ms"]
        ax.text(i, by[(g, "raw")]["pooled_forward_ms"], f"{speed:.2f}x", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(links)), [f"{g:g} Gb/s" for g in links])
    ax.set_ylabel("pooled exchange, ms (median, slowest rank)")
    ax.set_title(f"DLRM pooled-embedding exchange, {doc['ranks']} ranks, emulated link")
    ax.legend(fontsize=8)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--links", default="1,4,10")
    ap.add_argument("--batch-size", type=int, default=4096, help="samples per rank")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--compress-backward", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "exchange_codec.json")
    ap.add_argument("--from-json", type=Path, default=None, help="only plot a recorded run (next to it, .png)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    if a.from_json:
        return 0 if plot(json.loads(a.from_json.read_text()), a.from_json.with_suffix(".png")) else 1
    result = run_worker(a.np, __file__, [*sys.argv[1:], "--worker"], timeout=1800)
    if result is None:
        return 1
    print(f"# embedding exchange, {result['ranks']} ranks, {a.batch_size} samples per rank, dim {a.dim}: "
          "ms per iteration (median, slowest rank)")
    print("# pooled: the pooled-embedding all-to-all end to end (encode, sizes, transfer, decode);"
          " forward/backward: the whole pass")
    print(f"# {'Gb/s':>5} {'variant':<8}{'pooled':>9}{'speedup':>9}{'forward':>10}{'backward':>10}{'ratio':>8}"
          f"{'bypassed':>10}")
    by = {(r["link_gbps"], r["variant"]): r for r in result["records"]}
    for r in result["records"]:
        raw = by[(r["link_gbps"], "raw")]
        speed = raw["pooled_forward_ms"] / r["pooled_forward_ms"]
        extra = f"{r.get('ratio', 1.0):>8.1f}{str(r.get('bypassed', '-')) + '/' + str(r.get('blocks', '-')):>10}"
        print(f"  {r['link_gbps']:>5g} {r['variant']:<8}{r['pooled_forward_ms']:>9.1f}{speed:>9.2f}"
              f"{r['forward_ms']:>10.1f}{r['backward_ms']:>10.1f}{extra}")
    doc = run_record(args={**vars(a), "out": str(a.out)}, **result)
    write_results(doc, a.out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
