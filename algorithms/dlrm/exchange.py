"""The embedding exchange: sparse ids to the tables' owners, pooled
embeddings back to the data-parallel ranks, their gradients to the owners.

Every rank is both a data-parallel rank (it holds a batch of samples, of any
size) and an owner (it holds shards of tables, placed by the planner). One
forward pass runs four all-to-alls:

1. ``splits``: per destination, a short header (plan signature, input
   status, batch size, lengths and ids it will send, weights or not). Every
   rank sees every other rank's header, so a bad input or a mismatched
   feature list on one rank stops all of them with an error, never a hang.
2. ``lengths``: per destination, the lengths of the samples' id lists for
   each shard it owns (row-wise shards get only the ids in their rows).
3. ``ids`` (and ``weights`` when per-sample weights are given).
4. ``pooled``: the owners' pooled sums, per destination the rows of its
   samples; the backward pass sends their gradients back the same way
   (``pooled_grad``), as a torch autograd function.

Each call is timed by name and paced by the link limiter; the pooled
blocks go through the block codec (:mod:`.block_codec`) when one is set.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from .block_codec import BACKWARD, FORWARD, BlockCodec, BlockInfo
from .link import ExchangeTimer, LinkLimiter
from .planner import Shard, ShardingPlan
from .transport import Transport

# Header fields sent to every destination in the `splits` all-to-all.
_SIGNATURE, _STATUS, _BATCH, _LENGTHS, _IDS, _WEIGHTS, _ENCODES = range(7)
_HEADER = 7
_OK, _BAD_INPUT = 0, 1


class ExchangeInputError(ValueError):
    """Bad input to the exchange, on this rank or another (every rank raises)."""


class Exchange:
    """The collectives of the embedding exchange, timed, paced and optionally encoded."""

    def __init__(self, transport: Transport, *, link_gbps: Optional[float] = None, link_latency_us: float = 0.0,
                 codec: Optional[BlockCodec] = None, link: Optional[LinkLimiter] = None) -> None:
        self.transport = transport
        self.rank, self.size = transport.rank, transport.size
        if link is not None and (link_gbps is not None or link_latency_us):
            raise ValueError("link: give either a LinkLimiter or link_gbps/link_latency_us, not both")
        self.limiter = link if link is not None else LinkLimiter(link_gbps, link_latency_us)
        self.codec = codec
        if codec is not None:
            codec.attach(self)
        self.timer = ExchangeTimer()
        # Wall time of the pooled exchange end to end (encoding, sizes, transfer, decoding), per direction.
        self.pooled_seconds = {"forward": 0.0, "backward": 0.0}
        # The last pooled exchange's (start, end) per direction, time.perf_counter() seconds: with
        # every rank's, the part of an exchange after the last rank entered it.
        self.pooled_window = {"forward": (0.0, 0.0), "backward": (0.0, 0.0)}
        self.step = 0  # forward exchanges so far (BlockInfo.step)
        # Called as observer(name, arrived, left) after every collective (time.perf_counter() seconds):
        # how a timeline sees this rank wait at each synchronization.
        self.observer: Optional[Callable[[str, float, float], None]] = None

    def alltoallv(self, name: str, send: np.ndarray, send_counts: Sequence[int],
                  recv_counts: Sequence[int]) -> np.ndarray:
        """One timed, paced all-to-all of 1-D arrays (counts in elements)."""
        item = send.dtype.itemsize
        me = self.rank
        sent = (int(sum(send_counts)) - int(send_counts[me])) * item
        received = (int(sum(recv_counts)) - int(recv_counts[me])) * item
        started = time.perf_counter()
        out = self.transport.alltoallv(send, send_counts, recv_counts)
        self.limiter.pace(started, sent, received)
        left = time.perf_counter()
        self.timer.add(name, left - started, sent)
        if self.observer is not None:
            self.observer(name, started, left)
        return out


@dataclass
class RoutedInput:
    """What an owner received for its shards: per local shard, the lengths,
    ids and weights of every rank's samples (rank 0's first)."""

    batch_sizes: list[int]  # every rank's batch size
    lengths: list[torch.Tensor]  # per local shard: (sum(batch_sizes),) int64
    ids: list[torch.Tensor]  # per local shard: int64 global row ids
    weights: Optional[list[torch.Tensor]]  # per local shard: float32, or None
    encoded: bool = False  # whether some rank's codec will encode its pooled blocks this step


def plan_signature(plan: ShardingPlan, table_sizes: Sequence[int], pooling: str) -> int:
    """A 31-bit digest of everything every rank must agree on."""
    text = repr((list(table_sizes), plan.dim, plan.world_size, pooling,
                 [(t.kind, t.shards) for t in plan.tables]))
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _sample_index(lengths: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(lengths.numel()), lengths)


_Part = tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]


def _split_for_shards(table_shards: Sequence[Shard], kind: str, lengths: torch.Tensor, ids: torch.Tensor,
                      weights: Optional[torch.Tensor]) -> list[_Part]:
    """Per shard of one table, the (lengths, ids, weights) its owner needs:
    everything for whole and column-wise shards, the ids in its rows for row-wise ones."""
    if kind != "row" or len(table_shards) == 1:
        return [(lengths, ids, weights)] * len(table_shards)
    bounds = torch.tensor([s.row_start for s in table_shards[1:]], dtype=torch.int64)
    bucket = torch.bucketize(ids, bounds, right=True)
    counts = torch.zeros(len(table_shards), lengths.numel(), dtype=torch.int64)
    counts.index_put_((bucket, _sample_index(lengths)), torch.ones_like(bucket), accumulate=True)
    order = torch.argsort(bucket, stable=True)
    per_shard = counts.sum(dim=1).tolist()
    id_parts = torch.split(ids[order], per_shard)
    w_parts = torch.split(weights[order], per_shard) if weights is not None else [None] * len(table_shards)
    return [(counts[k], id_parts[k], w_parts[k]) for k in range(len(table_shards))]


def check_local_input(lengths: torch.Tensor, ids: torch.Tensor, weights: Optional[torch.Tensor],
                      table_sizes: Sequence[int]) -> Optional[str]:
    """The first problem with this rank's sparse input, or None."""
    if lengths.dim() != 2:
        return f"lengths has shape {tuple(lengths.shape)}; expected (num_features, batch)"
    if lengths.shape[0] != len(table_sizes):
        return f"{lengths.shape[0]} features given; the collection has {len(table_sizes)} tables (one per feature)"
    if ids.dim() != 1:
        return f"ids has shape {tuple(ids.shape)}; expected a 1-D tensor of all features' ids"
    if lengths.numel() and int(lengths.min()) < 0:
        return "lengths holds a negative length"
    total = int(lengths.sum())
    if total != ids.numel():
        return f"lengths sum to {total} but {ids.numel()} ids were given"
    if weights is not None and tuple(weights.shape) != tuple(ids.shape):
        return f"per_sample_weights has shape {tuple(weights.shape)}; it needs one weight per id ({ids.numel()})"
    per_feature = lengths.sum(dim=1).tolist()
    for f, part in enumerate(torch.split(ids, per_feature)):
        if part.numel():
            lo, hi = int(part.min()), int(part.max())
            if lo < 0 or hi >= table_sizes[f]:
                bad = lo if lo < 0 else hi
                return f"feature {f}: id {bad} lies outside its table of {table_sizes[f]} rows"
    return None


def route_sparse(exchange: Exchange, plan: ShardingPlan, kinds: Sequence[str], signature: int,
                 lengths: torch.Tensor, ids: torch.Tensor, weights: Optional[torch.Tensor],
                 problem: Optional[str]) -> RoutedInput:
    """Runs the splits, lengths, ids (and weights) all-to-alls: every owner gets
    the ids of every rank's samples for its shards. `problem` is this rank's
    input error (from check_local_input): it is announced, and every rank raises.
    The header also carries whether this rank's codec will encode its pooled
    blocks this step (when none will, the pooled exchange goes plain)."""
    world, me = exchange.size, exchange.rank
    owned = [plan.shards_on(d) for d in range(world)]
    header = np.zeros((world, _HEADER), np.int64)
    codec = exchange.codec
    if codec is not None and codec.applies(FORWARD):
        header[:, _ENCODES] = int(codec.encodes([(s.table, s.cols) for s in owned[me]], exchange.step))
    header[:, _SIGNATURE] = signature
    header[:, _STATUS] = _OK if problem is None else _BAD_INPUT
    header[:, _WEIGHTS] = int(weights is not None)
    len_parts: list[list[torch.Tensor]] = [[] for _ in range(world)]
    id_parts: list[list[torch.Tensor]] = [[] for _ in range(world)]
    w_parts: list[list[torch.Tensor]] = [[] for _ in range(world)]
    if problem is None:
        batch = lengths.shape[1]
        header[:, _BATCH] = batch
        per_feature = lengths.sum(dim=1).tolist()
        feature_ids = torch.split(ids, per_feature)
        feature_w = torch.split(weights, per_feature) if weights is not None else [None] * len(per_feature)
        routed: dict[tuple[int, int], tuple] = {}
        for tp in plan.tables:
            for s, part in zip(tp.shards, _split_for_shards(tp.shards, kinds[tp.table], lengths[tp.table],
                                                            feature_ids[tp.table], feature_w[tp.table]), strict=True):
                routed[(s.table, s.col_start, s.row_start)] = part
        for d in range(world):
            for s in owned[d]:
                ln, ix, w = routed[(s.table, s.col_start, s.row_start)]
                len_parts[d].append(ln)
                id_parts[d].append(ix)
                if w is not None:
                    w_parts[d].append(w)
            header[d, _LENGTHS] = batch * len(owned[d])
            header[d, _IDS] = sum(int(x.numel()) for x in id_parts[d])
    got = exchange.alltoallv("splits", header.reshape(-1), [_HEADER] * world, [_HEADER] * world)
    got = got.reshape(world, _HEADER)
    _agree(got, problem, me, signature)

    n_local = len(owned[me])
    batch_sizes = [int(b) for b in got[:, _BATCH]]
    with_weights = bool(got[0, _WEIGHTS])

    def flat(parts: list[list[torch.Tensor]], dtype: torch.dtype) -> np.ndarray:
        pieces = [x for per_dest in parts for x in per_dest]
        return torch.cat(pieces).to(dtype).numpy() if pieces else np.zeros(0, torch.empty(0, dtype=dtype).numpy().dtype)

    send_len = flat(len_parts, torch.int32)
    recv_len = exchange.alltoallv("lengths", send_len, header[:, _LENGTHS].tolist(),
                                  [b * n_local for b in batch_sizes])
    id_counts = got[:, _IDS].tolist()
    recv_ids = exchange.alltoallv("ids", flat(id_parts, torch.int64), header[:, _IDS].tolist(), id_counts)
    recv_w = None
    if with_weights:
        recv_w = exchange.alltoallv("weights", flat(w_parts, torch.float32), header[:, _IDS].tolist(), id_counts)

    # Regroup source-major blocks (each: local shard after local shard) into per-shard tensors.
    lens_t = torch.from_numpy(recv_len.astype(np.int64))
    ids_t = torch.from_numpy(recv_ids)
    w_t = torch.from_numpy(recv_w) if recv_w is not None else None
    shard_len: list[list[torch.Tensor]] = [[] for _ in range(n_local)]
    shard_ids: list[list[torch.Tensor]] = [[] for _ in range(n_local)]
    shard_w: list[list[torch.Tensor]] = [[] for _ in range(n_local)]
    len_at = id_at = 0
    for r in range(world):
        b = batch_sizes[r]
        block = lens_t[len_at:len_at + b * n_local].view(n_local, b)
        len_at += b * n_local
        totals = block.sum(dim=1).tolist()
        if sum(totals) != id_counts[r]:
            raise ExchangeInputError(f"rank {r} announced {id_counts[r]} ids but its lengths sum to {sum(totals)}")
        for j in range(n_local):
            shard_len[j].append(block[j])
            shard_ids[j].append(ids_t[id_at:id_at + totals[j]])
            if w_t is not None:
                shard_w[j].append(w_t[id_at:id_at + totals[j]])
            id_at += totals[j]
    return RoutedInput(batch_sizes, [torch.cat(x) if x else torch.zeros(0, dtype=torch.int64) for x in shard_len],
                       [torch.cat(x) if x else torch.zeros(0, dtype=torch.int64) for x in shard_ids],
                       [torch.cat(x) for x in shard_w] if w_t is not None else None,
                       encoded=bool(got[:, _ENCODES].any()))


def _agree(headers: np.ndarray, problem: Optional[str], me: int, signature: int) -> None:
    """Raises on every rank when any rank's header shows a problem."""
    if problem is not None:
        raise ExchangeInputError(f"rank {me}: {problem} (every rank stopped; no exchange took place)")
    bad = [r for r in range(headers.shape[0]) if headers[r, _STATUS] != _OK]
    if bad:
        raise ExchangeInputError(f"rank(s) {', '.join(map(str, bad))} passed bad input to the embedding exchange "
                                 f"(see their error); every rank stopped, no exchange took place")
    other = [r for r in range(headers.shape[0]) if headers[r, _SIGNATURE] != signature]
    if other:
        raise ExchangeInputError(f"rank(s) {', '.join(map(str, other))} built a different embedding collection "
                                 "(tables, dimension, sharding or pooling) than this rank; every rank must build "
                                 "the same one")
    w = headers[:, _WEIGHTS]
    if (w != w[0]).any():
        given = [r for r in range(len(w)) if w[r]]
        raise ExchangeInputError(f"per_sample_weights were given on rank(s) {', '.join(map(str, given))} only; "
                                 "give them on every rank or on none")


@dataclass
class PooledLayout:
    """The blocks of one pooled all-to-all, in send and receive order."""

    send_blocks: list[BlockInfo]
    recv_blocks: list[BlockInfo]
    send_counts: list[int]  # floats per destination
    recv_counts: list[int]  # floats per source
    encoded: bool = True  # forward: through the codec (when there is one); False: plain floats


def pooled_layout(plan: ShardingPlan, table_sizes: Sequence[int], batch_sizes: Sequence[int], me: int,
                  step: int) -> PooledLayout:
    """Owners send, per destination rank, the pooled rows of its samples for
    each shard they own (in plan order); every rank receives them source by source."""
    world = plan.world_size
    owned = [plan.shards_on(d) for d in range(world)]
    send, recv = [], []
    send_counts, recv_counts = [0] * world, [0] * world
    for d in range(world):
        for s in owned[me]:
            send.append(BlockInfo(FORWARD, s.table, table_sizes[s.table], me, d, (batch_sizes[d], s.cols), step))
            send_counts[d] += batch_sizes[d] * s.cols
    for src in range(world):
        for s in owned[src]:
            recv.append(BlockInfo(FORWARD, s.table, table_sizes[s.table], src, me, (batch_sizes[me], s.cols), step))
            recv_counts[src] += batch_sizes[me] * s.cols
    return PooledLayout(send, recv, send_counts, recv_counts)


def _reverse(block: BlockInfo) -> BlockInfo:
    return BlockInfo(BACKWARD, block.table, block.table_rows, block.dest, block.source, block.shape, block.step)


def _encoded_alltoallv(exchange: Exchange, name: str, flat: torch.Tensor, send_blocks: list[BlockInfo],
                       recv_blocks: list[BlockInfo], world: int) -> torch.Tensor:
    """An all-to-all of float blocks through the codec: encoded sizes first, then the bytes. A
    rank's blocks to itself skip the codec when it keeps them exact (``codec.local_exact``)."""
    codec = exchange.codec
    assert codec is not None
    me = exchange.rank
    skip_local = getattr(codec, "local_exact", False)
    flat = flat.detach()
    send_at, at = [], 0
    for b in send_blocks:
        send_at.append(at)
        at += b.shape[0] * b.shape[1]
    encoded, sizes = [], []
    send_n, recv_n = [0] * world, [0] * world
    local_src = []  # offsets in `flat` of this rank's blocks to itself, in order
    for b, off in zip(send_blocks, send_at, strict=True):
        n = b.shape[0] * b.shape[1]
        if skip_local and b.dest == me:
            local_src.append(off)
            continue
        data = np.ascontiguousarray(codec.encode(flat[off:off + n].view(b.shape), b), dtype=np.uint8).reshape(-1)
        encoded.append(data)
        sizes.append(data.size)
        send_n[b.dest] += 1
    for b in recv_blocks:
        if not (skip_local and b.source == me):
            recv_n[b.source] += 1
    got_sizes = exchange.alltoallv(name + "_sizes", np.array(sizes, np.int64), send_n, recv_n).tolist()
    send_bytes = [0] * world
    k = 0
    for b in send_blocks:
        if not (skip_local and b.dest == me):
            send_bytes[b.dest] += sizes[k]
            k += 1
    remote_recv = [b for b in recv_blocks if not (skip_local and b.source == me)]
    recv_bytes = [0] * world
    for b, n in zip(remote_recv, got_sizes, strict=True):
        recv_bytes[b.source] += n
    payload = np.concatenate(encoded) if encoded else np.zeros(0, np.uint8)
    got = exchange.alltoallv(name, payload, send_bytes, recv_bytes)
    out = torch.empty(sum(b.shape[0] * b.shape[1] for b in recv_blocks))
    out_np = out.numpy()
    at = got_at = 0
    sizes_iter, local_iter = iter(got_sizes), iter(local_src)
    for b in recv_blocks:
        n = b.shape[0] * b.shape[1]
        if skip_local and b.source == me:
            off = next(local_iter)
            out[at:at + n] = flat[off:off + n]
        else:
            size = next(sizes_iter)
            codec.decode_into(got[got_at:got_at + size], b, out_np[at:at + n].reshape(b.shape))
            got_at += size
        at += n
    return out


def _plain_alltoallv(exchange: Exchange, name: str, flat: torch.Tensor, send_counts: list[int],
                     recv_counts: list[int]) -> torch.Tensor:
    send = flat.detach().contiguous().numpy()
    return torch.from_numpy(exchange.alltoallv(name, send, send_counts, recv_counts))


class PooledAllToAll(torch.autograd.Function):
    """Owners' pooled rows -> data-parallel ranks (forward); their gradients
    back to the owners (backward). Both directions are collectives: every
    rank runs forward and backward together."""

    @staticmethod
    def forward(ctx: Any, exchange: Exchange, layout: PooledLayout, send: torch.Tensor) -> torch.Tensor:
        ctx.exchange, ctx.layout = exchange, layout
        codec = exchange.codec
        started = time.perf_counter()
        if codec is not None and codec.applies(FORWARD) and layout.encoded:
            out = _encoded_alltoallv(exchange, "pooled", send, layout.send_blocks, layout.recv_blocks, exchange.size)
        else:
            out = _plain_alltoallv(exchange, "pooled", send, layout.send_counts, layout.recv_counts)
        left = time.perf_counter()
        exchange.pooled_seconds["forward"] += left - started
        exchange.pooled_window["forward"] = (started, left)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        exchange, layout = ctx.exchange, ctx.layout
        grad = grad.contiguous()
        codec = exchange.codec
        started = time.perf_counter()
        if codec is not None and codec.applies(BACKWARD):
            back = _encoded_alltoallv(exchange, "pooled_grad", grad, [_reverse(b) for b in layout.recv_blocks],
                                      [_reverse(b) for b in layout.send_blocks], exchange.size)
        else:
            back = _plain_alltoallv(exchange, "pooled_grad", grad, layout.recv_counts, layout.send_counts)
        left = time.perf_counter()
        exchange.pooled_seconds["backward"] += left - started
        exchange.pooled_window["backward"] = (started, left)
        return None, None, back
