"""``python -m pymcoll bench --plot FILE.png``: latency and bus bandwidth against size.

One figure, two panels per collective (latency, log-log; bus bandwidth, log-log),
pymcoll and the reference on the same axes. matplotlib is optional: only --plot
needs it, and :func:`check_matplotlib` says how to get it.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any, Sequence

from .bench_cases import TITLES
from .bench_table import IMPL_LABELS, mpi_short_name

COLORS = {"pymcoll": "tab:blue", "mpi4py": "tab:orange"}
MARKERS = {"pymcoll": "o", "mpi4py": "s"}
COLLS_PER_ROW = 2  # each collective takes two panels side by side


def check_matplotlib() -> None:
    """Raise RuntimeError naming --plot and the fix when matplotlib cannot be imported."""
    if importlib.util.find_spec("matplotlib") is None:
        raise RuntimeError("--plot needs matplotlib, which is not installed: "
                           "pip install matplotlib (the plot extra: pip install 'pymcoll[plot]'), or run without --plot")


def _size_label(size: float, _pos: Any = None) -> str:
    """8 -> '8', 4096 -> '4K', 1048576 -> '1M' (axis ticks)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size:g}"


def _log_ticks(axis: Any, values: Sequence[float]) -> None:
    """Labelled ticks on a log `axis` (ax.yaxis) at a density that suits the decades spanned, so a
    panel whose data spans less than a decade still shows numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    positive = [v for v in values if v > 0]
    decades = math.log10(max(positive) / min(positive)) if positive else 0.0
    if decades > 2:
        subs: tuple[float, ...] = (1.0,)
    elif decades > 0.8:
        subs = (1.0, 2.0, 5.0)
    else:
        subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _size_ticks(axis: Any, sizes: Sequence[int]) -> None:
    """Powers of two on the size axis, every one while they fit, else every 2nd, 4th, ..."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo, hi = min(sizes), max(sizes)
    span = max(1, math.ceil(math.log2(hi)) - math.floor(math.log2(max(lo, 1))) + 1)
    step = 1
    while span / step > 9:  # about nine labels fit a panel's width
        step *= 2
    first = math.floor(math.log2(max(lo, 1)))
    ticks = [2.0 ** e for e in range(first, math.ceil(math.log2(hi)) + 1, step)]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(_size_label))
    axis.set_minor_formatter(NullFormatter())


def _series(records: Sequence[dict[str, Any]], coll: str) -> dict[str, list[dict[str, Any]]]:
    """impl -> `coll`'s records in size order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "result" and r.get("coll") == coll:
            out.setdefault(r["impl"], []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["size"])
    return dict(sorted(out.items(), key=lambda kv: kv[0] != "pymcoll"))


def _label(impl: str, header: dict[str, Any]) -> str:
    if impl == "mpi4py":
        return f"{mpi_short_name(header.get('mpi'))} (mpi4py)"
    return IMPL_LABELS.get(impl, impl)


def _ratio_note(rows: list[dict[str, Any]]) -> str:
    ratios = [r["vs_ref"] for r in rows if r.get("vs_ref") is not None]
    if not ratios:
        return ""
    ratios.sort()
    mid = ratios[len(ratios) // 2]
    return f"; vs_ref {ratios[0]:.2f}-{ratios[-1]:.2f}, median {mid:.2f}"


def _draw_barrier(lat: Any, bw: Any, series: dict[str, list[dict[str, Any]]],
                  header: dict[str, Any]) -> None:
    """Barrier moves no data: its latency as bars, no bandwidth panel."""
    names = list(series)
    medians = [series[i][0]["median_us"] for i in names]
    lows = [m - series[i][0]["min_us"] for m, i in zip(medians, names)]
    highs = [series[i][0]["max_us"] - m for m, i in zip(medians, names)]
    lat.bar([_label(i, header) for i in names], medians, yerr=[lows, highs], capsize=4,
            color=[COLORS.get(i, "tab:gray") for i in names])
    # One slow block (a preempted rank) must not flatten the bars: log scale for a wide spread.
    if max(m + h for m, h in zip(medians, highs)) > 10 * min(medians):
        lat.set_yscale("log")
        _log_ticks(lat.yaxis, [v for i in names for v in (series[i][0]["min_us"], series[i][0]["max_us"])])
    lat.set_ylabel("time per call (us, median)", fontsize=8)
    lat.tick_params(labelsize=7)
    note = _ratio_note(series.get("pymcoll", []))
    lat.set_title(f"Barrier: latency{note}", fontsize=9)
    lat.grid(True, axis="y", alpha=0.3)
    bw.axis("off")
    bw.text(0.5, 0.5, "Barrier moves no data:\nno bandwidth", ha="center", va="center", fontsize=9)


def _draw(lat: Any, bw: Any, coll: str, series: dict[str, list[dict[str, Any]]],
          header: dict[str, Any]) -> None:
    """Latency and bus bandwidth of every implementation of `coll` against size."""
    first = next(iter(series.values()))[0]
    what = TITLES.get(coll, coll) + (f" {first['type']}" if first.get("type") else "")
    what += f" {first['redop']}" if first.get("redop") else ""
    for impl, rows in series.items():
        sizes = [r["size"] for r in rows]
        style = {"color": COLORS.get(impl, "tab:gray"), "marker": MARKERS.get(impl, "^"), "markersize": 3.5}
        lat.plot(sizes, [r["median_us"] for r in rows], "-", label=_label(impl, header), **style)
        # The spread over blocks shows how much the noise of the machine moves a median.
        lat.fill_between(sizes, [r["min_us"] for r in rows], [r["max_us"] for r in rows],
                         color=style["color"], alpha=0.15, linewidth=0)
        bws = [r["busbw_GBps"] for r in rows]
        if any(b > 0 for b in bws):
            bw.plot(sizes, bws, "-", label=_label(impl, header), **style)
    sizes = [r["size"] for rows in series.values() for r in rows]
    for ax in (lat, bw):
        ax.set_xscale("log", base=2)
        _size_ticks(ax.xaxis, sizes)
        ax.set_xlabel("size (bytes)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
    lat.set_yscale("log")
    _log_ticks(lat.yaxis, [v for rows in series.values() for r in rows for v in (r["min_us"], r["max_us"])])
    lat.set_ylabel("time per call (us, median)", fontsize=8)
    lat.set_title(f"{what}: latency{_ratio_note(series.get('pymcoll', []))}", fontsize=9)
    lat.legend(fontsize=7, loc="upper left")
    factor = first.get("busbw_factor")
    if bw.lines:
        bw.set_yscale("log")
        _log_ticks(bw.yaxis, [r["busbw_GBps"] for rows in series.values() for r in rows])
        bw.legend(fontsize=7, loc="upper left")
    bw.set_ylabel("bus bandwidth (GB/s)", fontsize=8)
    bw.set_title(f"{what}: busbw = algbw x {factor:.3g}" if factor is not None else f"{what}: busbw",
                 fontsize=9)


def plot(header: dict[str, Any], records: Sequence[dict[str, Any]], path: str) -> None:
    """Draw every collective of `records` into one figure at `path` (format from its extension).

    Raises RuntimeError when matplotlib is missing (see :func:`check_matplotlib`).
    """
    check_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # no display needed; ranks run headless
    import matplotlib.pyplot as plt

    colls = [c for c in dict.fromkeys(r["coll"] for r in records if r.get("kind") == "result")]
    per_row = min(COLLS_PER_ROW, max(1, len(colls)))
    nrows = max(1, math.ceil(len(colls) / per_row))
    size = (4.6 * 2 * per_row, 3.6 * nrows + 0.6)
    try:  # the constrained layout leaves room for the suptitle by itself
        fig, axes = plt.subplots(nrows, 2 * per_row, figsize=size, squeeze=False, layout="constrained")
    except TypeError:  # matplotlib < 3.5
        fig, axes = plt.subplots(nrows, 2 * per_row, figsize=size, squeeze=False, constrained_layout=True)
    for k, coll in enumerate(colls):
        row, col = divmod(k, per_row)
        lat, bw = axes[row][2 * col], axes[row][2 * col + 1]
        series = _series(records, coll)
        if coll == "barrier":
            _draw_barrier(lat, bw, series, header)
        else:
            _draw(lat, bw, coll, series, header)
    for k in range(len(colls), nrows * per_row):  # an odd number of collectives leaves a pair empty
        row, col = divmod(k, per_row)
        axes[row][2 * col].axis("off")
        axes[row][2 * col + 1].axis("off")
    if not colls:
        axes[0][0].text(0.5, 0.5, "no results", ha="center", va="center")
    ref = (f"vs {mpi_short_name(header.get('mpi'))} through mpi4py" if header.get("vs", "mpi") != "none"
           else "alone (--vs none)")
    node = f", virtual nodes of {header['node_size']}" if header.get("node_size") else ""
    fig.suptitle(f"pymcoll {header.get('pymcoll', '')} ({header.get('commit', '?')}) {ref}; "
                 f"{header.get('ranks', '?')} ranks{node}, {header.get('cores', '?')} cores, "
                 f"{str(header.get('date', ''))[:10]}; shaded: min-max over blocks", fontsize=10)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
