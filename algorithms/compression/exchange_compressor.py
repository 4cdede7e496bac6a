"""The error-bounded C codec as the DLRM exchange's block codec.

:class:`ExchangeCompressor` (a :class:`~pymcoll.algorithms.dlrm.block_codec.BlockCodec`)
compresses the forward pooled-embedding blocks (and the backward gradient
blocks only when ``backward=True``) with the C codec (:mod:`.error_bounded`)
at the dual-level adaptive bound (:mod:`.adaptive`): a bound per table from
its cardinality, times the iteration's multiplier (the exchange's step
count). The exchange sends the encoded sizes first, then the bytes.

Bypass: a block crosses the wire raw when compressing would not pay on the
link, by a model of the three times: compress + transfer of the compressed
bytes + decompress, against the transfer of the raw bytes, with the codec's
throughput measured as it runs (and calibrated once at construction) and
each table's compression ratio as last measured. A bypassed table is
measured again after 2 iterations, then after twice as many each time it
still does not pay, up to every ``probe_every``: one slow measurement (a
cold first call) does not bypass a table for long, and a table that never
pays costs a measurement every ``probe_every`` iterations in the end. A
table pays only when the model saves at least ``margin`` (20%) of its raw
transfer time: its rates are the fastest of the last measurements, so the
model is optimistic, and near the break-even point a wrong guess costs
more than a right one gains (the encoded path adds the size exchange and a
call per block that the model does not count).
The link's speed is ``link_gbps``, or the exchange's emulated link when the
compressor is attached to one; with neither, every block is compressed.

Stage: on a link of at least ``packed_above_gbps`` (0.25 Gb/s) the codes are
packed at a fixed width rather than Huffman coded: decoding packed codes is
about 1.6x faster and compressing them skips building the code, while the
Huffman stage's few percent fewer bytes save less wire time than that above
about 0.2 Gb/s (measured on the exchange's pooled blocks: ratio 29.9 packed
against 32.6, 4 Gb/s exchange 1.59x faster than raw against 1.38x). Slower
links, no known link, or an explicit ``stage`` keep the smallest.

A rank's blocks to itself cross no link and stay exact. Each encoded block
starts with one byte: 0 for raw float32, 1 for the codec's buffer.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from pymcoll.algorithms.dlrm.block_codec import BACKWARD, FORWARD, BlockCodec, BlockInfo

from .adaptive import AdaptiveBound
from .error_bounded import STAGES, compress, decompress, inspect

RAW, COMPRESSED = 0, 1
COPY_Bps = 2.5e9  # effective rate of the encoded path's extra copies of raw blocks (Python included)


@dataclass
class CompressorStats:
    """What the compressor did, summed over blocks."""

    blocks: int = 0  # blocks to other ranks (a rank's own skip the compressor)
    bypassed: int = 0  # of those, sent raw because compressing would not pay on the link
    raw_bytes: int = 0  # float32 bytes of the blocks encoded
    sent_bytes: int = 0  # bytes the encoded blocks take
    encode_s: float = 0.0
    decode_s: float = 0.0
    ratio_by_table: dict[int, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.sent_bytes if self.sent_bytes else 1.0


class ExchangeCompressor(BlockCodec):
    """Lossy, error-bounded block codec for the pooled-embedding exchange.

    Args:
        bound: an :class:`~.adaptive.AdaptiveBound` (default: the paper's levels
            and a 2x multiplier decaying to 1x over 1000 iterations).
        backward: also compress the gradients (with the same bound).
        link_gbps: the link's bandwidth for the bypass model (None: the
            exchange's emulated link, else always compress).
        bypass: False compresses every block whatever the link.
        stage: the codec stage ("auto", "packed", "huffman", "exact"); None:
            "packed" on links of at least ``packed_above_gbps``, else "auto".
        probe_every: the most iterations between measurements of a table.
        calibrate: measure the codec's speed once at construction.
        packed_above_gbps: the link speed from which codes are packed at a fixed
            width instead of Huffman coded (when ``stage`` is None).
        margin: the least share of a table's raw transfer time the model must
            save for its blocks to be compressed (0 <= margin < 1).
    """

    name = "error-bounded"
    local_exact = True  # a rank's blocks to itself cross no link: the exchange keeps them exact

    def __init__(self, bound: Optional[AdaptiveBound] = None, *, backward: bool = False,
                 link_gbps: Optional[float] = None, bypass: bool = True, stage: Optional[str] = None,
                 probe_every: int = 50, calibrate: bool = True, packed_above_gbps: float = 0.25,
                 margin: float = 0.2) -> None:
        self.bound = bound if bound is not None else AdaptiveBound()
        self.backward, self.link_gbps, self.bypass, self.stage = backward, link_gbps, bypass, stage
        if link_gbps is not None and not link_gbps > 0:
            raise ValueError(f"link_gbps={link_gbps}: a bandwidth > 0 Gb/s, or None")
        if stage is not None and stage not in STAGES:
            raise ValueError(f"stage={stage!r}: use one of {', '.join(STAGES)}, or None (chosen by the link)")
        if not packed_above_gbps >= 0:
            raise ValueError(f"packed_above_gbps={packed_above_gbps}: a bandwidth >= 0 Gb/s")
        self.packed_above_gbps = packed_above_gbps
        if probe_every < 1:
            raise ValueError(f"probe_every={probe_every}: use 1 or more iterations")
        self.probe_every = probe_every
        if not 0 <= margin < 1:
            raise ValueError(f"margin={margin}: a share of the raw transfer time in [0, 1)")
        self.margin = margin
        self.stats = CompressorStats()
        # Bytes per second of compress and decompress (of the raw float32 bytes): a calibrated default
        # and running estimates per table (a table of few distinct rows compresses many times faster).
        self.compress_Bps, self.decompress_Bps = 1e9, 1.5e9
        # The last few rates measured per ("compress" or "decompress", table): the estimate is the fastest
        # of them, since a slow call (a cold first call, the core lent to another process) says little
        # about the next one.
        self._rates: dict[tuple[str, int], list[float]] = {}
        self._ratio: dict[int, float] = {}
        # (step, table) -> sum of the absolute bounds of the blocks received: the most a pooled
        # embedding can be off (row-wise shards' partial sums add their errors); the last two steps.
        self.received_bounds: dict[tuple[int, int], float] = {}
        self._last_probe: dict[int, int] = {}
        self._probe_gap: dict[int, int] = {}  # tables not paying: iterations from the last measurement to the next
        if calibrate:
            self._calibrate()

    def attach(self, exchange: Any) -> None:
        """Called by the collection: take the link speed from its limiter when none was given."""
        if self.link_gbps is None and getattr(exchange, "limiter", None) is not None:
            self.link_gbps = exchange.limiter.gbps

    def applies(self, direction: str) -> bool:
        return direction == FORWARD or (direction == BACKWARD and self.backward)

    def _calibrate(self) -> None:
        g = np.random.default_rng(0)
        pool = (g.standard_normal((256, 64)) * 0.1).astype(np.float32)
        x = pool[g.integers(0, 256, 2048)]
        for _ in range(2):
            t0 = time.perf_counter()
            buf = compress(x, 0.01)
            t1 = time.perf_counter()
            decompress(buf)
            t2 = time.perf_counter()
        self.compress_Bps = x.nbytes / max(t1 - t0, 1e-9)
        self.decompress_Bps = x.nbytes / max(t2 - t1, 1e-9)

    def _observe_rate(self, kind: str, table: int, rate: float, keep: int = 4) -> None:
        """Record a measured rate, keeping the last `keep`."""
        recent = self._rates.setdefault((kind, table), [])
        recent.append(rate)
        del recent[:-keep]

    def _rate(self, kind: str, table: int, default: float) -> float:
        """Bytes per second of `kind` for `table`: the fastest recent measurement, else `default`."""
        recent = self._rates.get((kind, table))
        return max(recent) if recent else default

    def stage_used(self) -> str:
        """The codec stage blocks are compressed with: `stage`, or chosen by the link (module docstring)."""
        if self.stage is not None:
            return self.stage
        return "packed" if self.link_gbps is not None and self.link_gbps >= self.packed_above_gbps else "auto"

    def pays(self, table: int) -> bool:
        """Whether compress + transfer + decompress beats the raw transfer on the link by `margin`."""
        if not self.bypass or self.link_gbps is None:
            return True
        raw, codec = self._seconds_per_byte(table)
        return self._saves(raw, codec)

    def _saves(self, raw: float, codec: float) -> bool:
        """Whether the codec's time per byte beats the raw transfer's by at least `margin` of it."""
        return codec < raw * (1.0 - self.margin)

    def _probe_due(self, table: int, step: int) -> bool:
        if table not in self._last_probe:
            return True
        return step - self._last_probe[table] >= self._probe_gap.get(table, self.probe_every)

    def _seconds_per_byte(self, table: int) -> tuple[float, float]:
        """(raw transfer, compress + compressed transfer + decompress) per raw byte of `table`."""
        wire = self.link_gbps * 1e9 / 8 if self.link_gbps else float("inf")
        comp = self._rate("compress", table, self.compress_Bps)
        # The sender seldom decodes its own tables' blocks: scale its compress rate by the calibrated ratio.
        decomp = self._rate("decompress", table, comp * self.decompress_Bps / self.compress_Bps)
        return 1 / wire, 1 / comp + 1 / (self._ratio.get(table, 10.0) * wire) + 1 / decomp

    def encodes(self, shards: list[tuple[int, int]], step: int) -> bool:
        """Whether this rank's pooled blocks, of (table, columns) `shards`, go through the codec at
        `step`: when a table is due a measurement, or when the time the paying tables save exceeds
        what the others cost on the encoded path (two more copies of their bytes)."""
        if not self.bypass or self.link_gbps is None:
            return True
        if any(self._probe_due(t, step) for t, _ in shards):
            return True
        gain = cost = 0.0
        for table, cols in shards:
            raw, codec = self._seconds_per_byte(table)
            if self._saves(raw, codec):
                gain += cols * (raw - codec)
            else:
                cost += cols * 2 / COPY_Bps
        return gain > cost

    def encode(self, block: torch.Tensor, info: BlockInfo) -> np.ndarray:
        t0 = time.perf_counter()  # the model's compress time is the whole call's, overheads included
        x = block.detach().contiguous().numpy()
        raw = x.nbytes
        st = self.stats
        st.blocks += 1
        st.raw_bytes += raw
        probe = self._probe_due(info.table, info.step)
        if x.size == 0 or not (self.pays(info.table) or probe):
            st.bypassed += 1
            st.sent_bytes += raw + 1
            return np.concatenate([np.array([RAW], np.uint8), x.reshape(-1).view(np.uint8)])
        buf = compress(x, self.bound(info.table_rows, info.step), relative=True, stage=self.stage_used())
        ratio = raw / len(buf)
        self._ratio[info.table] = ratio
        self._last_probe[info.table] = info.step
        st.ratio_by_table[info.table] = ratio
        st.sent_bytes += len(buf) + 1
        out = np.empty(len(buf) + 1, np.uint8)
        out[0] = COMPRESSED
        out[1:] = np.frombuffer(buf, np.uint8)
        took = time.perf_counter() - t0
        st.encode_s += took
        rate = raw / max(took, 1e-9)
        self._observe_rate("compress", info.table, rate)
        # Not paying: look again soon, then less and less often. Paying: every probe_every at most.
        if self.pays(info.table):
            self._probe_gap.pop(info.table, None)
        else:
            self._probe_gap[info.table] = min(self.probe_every, 2 * self._probe_gap.get(info.table, 1))
        return out

    def decode(self, data: np.ndarray, info: BlockInfo) -> torch.Tensor:
        out = np.empty(info.shape, np.float32)
        self.decode_into(data, info, out)
        return torch.from_numpy(out)

    def decode_into(self, data: np.ndarray, info: BlockInfo, out: np.ndarray) -> None:
        if data.size < 1:
            raise ValueError(f"{self.name} codec: an empty block for table {info.table} from rank {info.source}")
        t0 = time.perf_counter()
        if data[0] == RAW:
            if data.size - 1 != out.nbytes:
                raise ValueError(f"{self.name} codec: raw block of table {info.table} from rank {info.source} has "
                                 f"{data.size - 1} bytes, expected {out.nbytes}")
            out[...] = data[1:].view(np.float32).reshape(out.shape)
            return
        if data[0] != COMPRESSED:
            raise ValueError(f"{self.name} codec: block kind {int(data[0])} for table {info.table} from rank "
                             f"{info.source}; expected 0 (raw) or 1 (compressed)")
        view = memoryview(data)[1:]
        header = inspect(view)
        if header.shape != info.shape or header.dtype != "float32":
            raise ValueError(f"{self.name} codec: a {header.dtype} block of shape {header.shape} for table "
                             f"{info.table}, expected float32 {info.shape}")
        decompress(view, out=out)
        key = (info.step, info.table)
        if key not in self.received_bounds:
            # Keep this step's and the previous step's only: a long run would grow it without end.
            for old in [k for k in self.received_bounds if k[0] < info.step - 1]:
                del self.received_bounds[old]
        self.received_bounds[key] = self.received_bounds.get(key, 0.0) + header.bound
        took = time.perf_counter() - t0
        raw = out.nbytes
        rate = raw / max(took, 1e-9)
        self._observe_rate("decompress", info.table, rate)
        self.stats.decode_s += took


# The names before the exchange's compressor was told apart from the C codec: kept working, with a warning.
_RENAMED = {"ErrorBoundedCodec": "ExchangeCompressor", "CodecStats": "CompressorStats"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(f"pymcoll.algorithms.compression.exchange_compressor.{name} is deprecated; use {new}",
                      DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
