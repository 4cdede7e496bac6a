"""The DLRM embedding exchange with and without the codec over emulated links of 1, 4 and 10 Gb/s.

    python perf/bench_exchange_codec.py             # 2 ranks -> results/exchange_codec.json
    python perf/bench_exchange_codec.py --np 2 --links 1,4,10 --iters 8
    python perf/bench_exchange_codec.py --hosts --links 1,4   # over real links (root) beside the limiter

Starts itself under mpiexec. Every rank holds a batch of --batch-size
samples of the Criteo schema (tables capped at --cap rows, dimension --dim);
the embedding collection runs over an emulated link per rank
(``link_gbps``) with the error-bounded codec (adaptive bound, automatic
bypass) or without. Timed per iteration, slowest rank, median: the forward
exchange end to end (ids out, lookup, pooled embeddings back, with encoding,
the size exchange and decoding) and the backward gradient exchange
(uncompressed unless --compress-backward). The two variants alternate in
blocks at each link speed.

With --hosts the same exchange also runs over real links: 2 hosts of pymcoll's multi-host test
bed, one rank each, every host link limited by tc's tbf to the same rate (no emulation: MPI's
TCP across the veths), beside the emulated limiter on one host, in one invocation. The codec's
speedup (raw pooled time / codec pooled time) is compared between the two; the codec is told the
link's rate in both (its bypass decision). The limiter runs twice: as a bare wire of the rate,
and as a TCP link (LinkLimiter.tcp: Ethernet framing, plus the hosts' stack cost per byte
measured first on the test bed's unlimited links). Writes results/exchange_codec_hosts.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

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
    from pymcoll.algorithms.dlrm.link import LinkLimiter

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    sizes = cap_table_sizes(CRITEO_KAGGLE_CARDINALITIES, a.cap)
    data = SyntheticCriteo(sizes, seed=1)
    records = []
    for gbps in [float(x) for x in a.links.split(",")]:
        variants = {}
        for name in ("raw", "codec"):
            # Over a real link the exchange is not paced; the codec is told the rate for its bypass.
            codec = (ExchangeCompressor(backward=a.compress_backward, link_gbps=gbps if a.real_link else None)
                     if name == "codec" else None)
            if a.real_link:
                link = LinkLimiter(None)
            elif a.link_stack_gbps:
                link = LinkLimiter.tcp(gbps, stack_gbps=a.link_stack_gbps)
            else:
                link = LinkLimiter(gbps)
            variants[name] = (ShardedEmbeddingBagCollection(sizes, a.dim, comm, seed=0, codec=codec, link=link), codec)
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
                                        emb.exchange.pooled_seconds["backward"] - pooled["backward"],
                                        *emb.exchange.pooled_window["forward"]))
        for name, rows in times.items():
            local = np.array(rows)
            slowest = np.empty_like(local)
            comm.Allreduce(local, slowest, op=MPI.MAX)
            # From the last rank's entry to the last rank's exit (ranks share one clock here: one
            # machine, or test-bed hosts on it): the exchange without the ranks' arrival skew.
            after_last = slowest[:, 5] - slowest[:, 4]
            codec = variants[name][1]
            if rank == 0:
                kind = "tbf" if a.real_link else ("limiter-tcp" if a.link_stack_gbps else "limiter")
                rec = {"link_gbps": gbps, "variant": name, "link": kind, "forward_ms": float(np.median(slowest[:, 0])) * 1e3,
                       "backward_ms": float(np.median(slowest[:, 1])) * 1e3,
                       "pooled_forward_ms": float(np.median(slowest[:, 2])) * 1e3,
                       "pooled_backward_ms": float(np.median(slowest[:, 3])) * 1e3,
                       "pooled_forward_after_last_ms": float(np.median(after_last)) * 1e3,
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


#: What the speedups of a --hosts run compare: the pooled exchange after the last rank entered it.
SPEED_KEY = "pooled_forward_after_last_ms"

#: The links of a --hosts run: the emulated wire, the emulated TCP link, the real one.
KINDS = ("limiter", "limiter-tcp", "tbf")


def on_hosts(a: argparse.Namespace, gbps: float) -> Optional[dict[str, Any]]:
    """The worker on 2 test-bed hosts whose links tbf limits to `gbps`; its RESULT (None: failed)."""
    from pymcoll.testing.cluster import Cluster

    argv = [x for x in sys.argv[1:] if x != "--hosts"]
    links = argv.index("--links") if "--links" in argv else None
    if links is not None:
        del argv[links:links + 2]
    with Cluster(2, rate=f"{gbps:g}gbit") as cl:
        proc = cl.run([sys.executable, "-P", str(Path(__file__).resolve()), *argv, "--links", f"{gbps:g}",
                       "--real-link", "--worker"], 1, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(f"the run over {gbps:g} Gbit/s links failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
              f"{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1][len("RESULT "):])


def speedups(records: list[dict[str, Any]]) -> dict[tuple[str, float], float]:
    """(link kind, Gb/s) -> raw pooled forward time / codec pooled forward time: per launch, then
    the median over the launches."""
    by = {(r.get("link", "limiter"), r["link_gbps"], r.get("launch", 0), r["variant"]): r for r in records}
    per: dict[tuple[str, float], list[float]] = {}
    for (k, g, n, v), r in by.items():
        if v == "raw" and (k, g, n, "codec") in by:
            per.setdefault((k, g), []).append(r[SPEED_KEY] / by[(k, g, n, "codec")][SPEED_KEY])
    return {key: float(np.median(v)) for key, v in per.items()}


def median_ms(records: list[dict[str, Any]], kind: str, gbps: float, variant: str, key: str) -> float:
    return float(np.median([r[key] for r in records
                            if (r["link"], r["link_gbps"], r["variant"]) == (kind, gbps, variant)]))


def run_hosts(a: argparse.Namespace) -> int:
    """The emulated wire, the emulated TCP link (one host) and tbf links between 2 hosts, rate by
    rate, --launches times each (interleaved); table, JSON, PNG."""
    from pymcoll.testing.cluster import ClusterUnavailable

    if a.np != 2:
        print("--hosts runs 2 ranks (one per host); drop --np", file=sys.stderr)
        return 2
    from cost_model_hosts import stack_seconds_per_byte

    records: list[dict[str, Any]] = []
    argv = [x for x in sys.argv[1:] if x != "--hosts"]
    if "--launches" in argv:
        at = argv.index("--launches")
        del argv[at:at + 2]
    try:
        stack_gbps = 8 / stack_seconds_per_byte() / 1e9
        print(f"the hosts' TCP stack: {stack_gbps:.1f} Gbit/s of payload on unlimited links", file=sys.stderr)
        for launch in range(a.launches):
            for gbps in [float(x) for x in a.links.split(",")]:
                print(f"launch {launch + 1}/{a.launches}, {gbps:g} Gbit/s: the emulated wire, the emulated TCP "
                      "link, tbf links between 2 hosts ...", file=sys.stderr, flush=True)
                local = run_worker(2, __file__, [*argv, "--links", f"{gbps:g}", "--worker"], timeout=1800)
                tcp = run_worker(2, __file__, [*argv, "--links", f"{gbps:g}", "--link-stack-gbps",
                                               f"{stack_gbps:.3f}", "--worker"], timeout=1800)
                real = on_hosts(a, gbps)
                if local is None or tcp is None or real is None:
                    return 1
                records += [{**r, "launch": launch} for r in local["records"] + tcp["records"] + real["records"]]
    except ClusterUnavailable as exc:
        print(f"--hosts: {exc}", file=sys.stderr)
        return 2
    sp = speedups(records)
    print(f"# DLRM pooled-embedding exchange, 2 ranks, ms (median; median of {a.launches} launches): the "
          "forward pooled exchange end to end on the slowest rank, and from the last rank's entry to the "
          "last exit; speedup = raw / codec of the latter, per launch, median")
    print(f"# {'Gb/s':>5} {'link':<12} {'raw':>8} {'codec':>8} {'raw':>8} {'codec':>8} {'speedup':>8} {'tbf/this':>9}")
    print(f"# {'':>5} {'':<12} {'end to end':>17} {'after the last entry':>17}")
    for gbps in sorted({r["link_gbps"] for r in records}):
        for kind in KINDS:
            cols = [median_ms(records, kind, gbps, v, key) for key in ("pooled_forward_ms", SPEED_KEY)
                    for v in ("raw", "codec")]
            print(f"  {gbps:>5g} {kind:<12} " + " ".join(f"{c:>8.1f}" for c in cols)
                  + f" {sp[(kind, gbps)]:>8.2f} {sp[('tbf', gbps)] / sp[(kind, gbps)]:>9.2f}")
    doc = run_record(args={**vars(a), "out": str(a.out)}, ranks=2, records=records, stack_gbps=stack_gbps,
                     speedup={f"{k}@{g:g}": v for (k, g), v in sp.items()})
    write_results(doc, a.out, plot_hosts)
    return 0


@plotter("bench_exchange_codec")
def plot_hosts(plt: Any, doc: dict) -> Any:
    """The codec's speedup per link rate, over tbf-limited links and with the emulated limiter."""
    sp = speedups(doc["records"])
    links = sorted({g for _, g in sp})
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = {"limiter": "limiter: bare wire (one host)", "limiter-tcp": "limiter: TCP link (one host)",
              "tbf": "tbf-limited links (2 hosts, TCP)"}
    kinds = [k for k in KINDS if any(kk == k for kk, _ in sp)]
    width = 0.8 / len(kinds)
    for k, (kind, color) in enumerate(zip(kinds, ("tab:orange", "tab:green", "tab:blue"))):
        vals = [sp[(kind, g)] for g in links]
        xs = np.arange(len(links)) + (k - (len(kinds) - 1) / 2) * width
        ax.bar(xs, vals, width, color=color, label=labels[kind])
        for x, v in zip(xs, vals):
            ax.text(x, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(links)), [f"{g:g} Gb/s" for g in links])
    ax.set_ylabel("codec speedup of the pooled exchange")
    ax.set_title("DLRM exchange with the codec: real links against the limiter")
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
    ap.add_argument("--hosts", action="store_true",
                    help="also run over real rate-limited links between 2 test-bed hosts (root); "
                         "writes results/exchange_codec_hosts.* unless --out is given")
    ap.add_argument("--launches", type=int, default=1,
                    help="with --hosts: launch every variant this many times; speedups are medians (default 1)")
    ap.add_argument("--link-stack-gbps", type=float, default=None,
                    help="emulate a TCP link: Ethernet framing plus a host stack of this rate (Gb/s)")
    ap.add_argument("--real-link", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.hosts and a.out == HERE / "results" / "exchange_codec.json":
        a.out = HERE / "results" / "exchange_codec_hosts.json"
    if a.worker:
        worker(a)
        return 0
    if a.from_json:
        doc = json.loads(a.from_json.read_text())
        draw = plot_hosts if any(r.get("link") == "tbf" for r in doc["records"]) else plot
        return 0 if draw(doc, a.from_json.with_suffix(".png")) else 1
    if a.hosts:
        return run_hosts(a)
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
