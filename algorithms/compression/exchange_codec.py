"""The error-bounded codec as the DLRM exchange's codec hook.

:class:`ErrorBoundedCodec` compresses the forward pooled-embedding blocks
(and the backward gradient blocks only when ``backward=True``) with the C
codec at the dual-level adaptive bound (:mod:`.adaptive`): a bound per table
from its cardinality, times the iteration's multiplier (the exchange's step
count). The exchange sends the encoded sizes first, then the bytes.

Bypass: a block crosses the wire raw when compressing would not pay on the
link, by a model of the three times: compress + transfer of the compressed
bytes + decompress, against the transfer of the raw bytes, with the codec's
throughput measured as it runs (and calibrated once at construction) and
each table's compression ratio as last measured (re-measured every
``probe_every`` iterations while bypassed). The link's speed is
``link_gbps``, or the exchange's emulated link when the codec is attached to
one; with neither, every block is compressed.

Each encoded block starts with one byte: 0 for raw float32, 1 for the codec's
buffer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from pymcoll.algorithms.dlrm.codec import BACKWARD, FORWARD, BlockInfo, Codec

from .adaptive import AdaptiveBound
from .codec import compress, decompress, inspect

RAW, COMPRESSED = 0, 1


@dataclass
class CodecStats:
    """What the codec did, summed over blocks."""

    blocks: int = 0
    bypassed: int = 0
    raw_bytes: int = 0  # float32 bytes of the blocks encoded
    sent_bytes: int = 0  # bytes the encoded blocks take
    encode_s: float = 0.0
    decode_s: float = 0.0
    ratio_by_table: dict[int, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.sent_bytes if self.sent_bytes else 1.0


class ErrorBoundedCodec(Codec):
    """Lossy, error-bounded codec for the pooled-embedding exchange.

    bound: an :class:`~.adaptive.AdaptiveBound` (default: the paper's levels
      and a 2x multiplier decaying to 1x over 1000 iterations).
    backward: also compress the gradients (with the same bound).
    link_gbps: the link's bandwidth for the bypass model (None: the
      exchange's emulated link, else always compress).
    bypass: False compresses every block whatever the link.
    """

    name = "error-bounded"

    def __init__(self, bound: Optional[AdaptiveBound] = None, *, backward: bool = False,
                 link_gbps: Optional[float] = None, bypass: bool = True, stage: str = "auto",
                 probe_every: int = 50, calibrate: bool = True) -> None:
        self.bound = bound if bound is not None else AdaptiveBound()
        self.backward, self.link_gbps, self.bypass, self.stage = backward, link_gbps, bypass, stage
        if link_gbps is not None and not link_gbps > 0:
            raise ValueError(f"link_gbps={link_gbps}: a bandwidth > 0 Gb/s, or None")
        if probe_every < 1:
            raise ValueError(f"probe_every={probe_every}: use 1 or more iterations")
        self.probe_every = probe_every
        self.stats = CodecStats()
        # Bytes per second of compress and decompress (of the raw float32 bytes), running estimates.
        self.compress_Bps, self.decompress_Bps = 1e9, 1.5e9
        self._ratio: dict[int, float] = {}
        # (step, table) -> sum of the absolute bounds of the blocks received: the most a pooled
        # embedding can be off (row-wise shards' partial sums add their errors).
        self.received_bounds: dict[tuple[int, int], float] = {}
        self._last_probe: dict[int, int] = {}
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

    def pays(self, raw_bytes: int, table: int) -> bool:
        """Whether compress + transfer + decompress beats the raw transfer on the link."""
        if not self.bypass or self.link_gbps is None:
            return True
        wire = self.link_gbps * 1e9 / 8
        ratio = self._ratio.get(table, 10.0)
        t_raw = raw_bytes / wire
        t_codec = raw_bytes / self.compress_Bps + raw_bytes / ratio / wire + raw_bytes / self.decompress_Bps
        return t_codec < t_raw

    def encode(self, block: torch.Tensor, info: BlockInfo) -> np.ndarray:
        t0 = time.perf_counter()  # the model's compress time is the whole call's, overheads included
        x = block.detach().contiguous().numpy()
        raw = x.nbytes
        st = self.stats
        st.blocks += 1
        st.raw_bytes += raw
        probe = info.step - self._last_probe.get(info.table, -self.probe_every) >= self.probe_every
        if x.size == 0 or not (self.pays(raw, info.table) or probe):
            st.bypassed += 1
            st.sent_bytes += raw + 1
            return np.concatenate([np.array([RAW], np.uint8), x.reshape(-1).view(np.uint8)])
        buf = compress(x, self.bound(info.table_rows, info.step), relative=True, stage=self.stage)
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
        self.compress_Bps = 0.8 * self.compress_Bps + 0.2 * raw / max(took, 1e-9)
        return out

    def decode(self, data: np.ndarray, info: BlockInfo) -> torch.Tensor:
        if data.size < 1:
            raise ValueError(f"{self.name} codec: an empty block for table {info.table} from rank {info.source}")
        t0 = time.perf_counter()
        if data[0] == RAW:
            return super().decode(data[1:], info)
        if data[0] != COMPRESSED:
            raise ValueError(f"{self.name} codec: block kind {int(data[0])} for table {info.table} from rank "
                             f"{info.source}; expected 0 (raw) or 1 (compressed)")
        view = memoryview(data)[1:]
        out = decompress(view)
        key = (info.step, info.table)
        self.received_bounds[key] = self.received_bounds.get(key, 0.0) + inspect(view).bound
        if out.shape != info.shape:
            raise ValueError(f"{self.name} codec: decoded {out.shape} for table {info.table}, expected {info.shape}")
        result = torch.from_numpy(out)
        took = time.perf_counter() - t0
        raw = info.shape[0] * info.shape[1] * 4
        self.decompress_Bps = 0.8 * self.decompress_Bps + 0.2 * raw / max(took, 1e-9)
        self.stats.decode_s += took
        return result
