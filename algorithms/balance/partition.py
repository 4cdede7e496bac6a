"""Partitioning of a global batch of variable-cost samples over ranks.

Every rank of a data-parallel step calls :func:`partition` with the same
per-sample costs and keeps the part of its rank: the result is the same on
every rank (ties go to the lower index or part, never to a hash or a random
draw) and each sample lands in exactly one part. The aim is the smallest
maximum part load (sum of its costs), since the step waits for the slowest
rank. No partition beats :func:`lower_bound`, ``max(largest cost, total /
nparts)``.

Methods, each followed by the same bounded refinement (move one sample, or
swap two, between the most loaded part and another while that lowers the
most loaded part):

* ``"lpt"``: longest processing time first, each sample in decreasing cost
  to the least loaded part (on its own within ``4/3 - 1/(3 nparts)`` of the
  optimum, Graham 1969);
* ``"kk"``: Karmarkar-Karp largest differencing generalised to k parts:
  every sample starts as a k-tuple of part loads, the two tuples with the
  largest spread are merged (largest load with smallest) until one remains;
* ``"auto"``: both, keeping the lower maximum (lpt on a tie); KK is not
  run when LPT ends within ``_REFINE_TOL`` (1e-4) of a lower bound, where
  nothing can do better by more (most batches of a few hundred samples).

With ``equal_count=True`` part sizes differ by at most one (for per-rank
batch shapes): LPT gives each sample to the least loaded part that still has
room; KK starts from rounds of k consecutive samples in cost order, one per
part (the balanced differencing of Michiels et al.); the refinement only
swaps, or moves a sample from a part one longer to a part one shorter.

Large batches. Placing every sample by the combinatorial heuristics costs a
Python step per sample (a differencing merge ~2 us), too slow for 2048
samples in a millisecond. So the heuristics place the largest samples, where
they differ: LPT the largest ``_HEAD_LPT`` (192), KK the largest
``_HEAD_KK`` (64; 32 when the rest is poured). The middle of the cost order
is then poured in bulk (numpy), in three passes, up to the water level of
each pass: a value straddling two parts' gaps is left for the next pass, so
no part overshoots. The last ``_FINE`` (192) smallest samples and the last
left-overs go by LPT greedily: small samples close the remaining gaps
finely, as they do at the end of a full LPT. A batch of up to 384 samples
runs LPT on every sample (KK: up to 64). With equal counts, the samples
after the KK head (LPT: from the first) go greedily with room for equal
counts up to sample ``_EQ_GREEDY`` (768); the middle is dealt in rounds of k
(the lightest part taking the largest until the spread is closed, then in
snake order), the smallest greedily within the final size caps.

The refinement stops when the most loaded part is within ``_REFINE_TOL``
(1e-4) of a lower bound (:func:`lower_bound`, or the two smallest of the
k + 1 largest samples together, which share a part), when a step would lower
it by less than that, or after 4 steps per part.

Measured (perf/bench_partition.py, perf/studies/partition.md), L**2 costs: on
MovieLens-100K history lengths every batch of 256 samples or more over 2, 4
and 8 parts ends within 1.0002 of the mean load (equal counts too). On
synthetic lengths capped at 1024 the same holds except where a single
sample outweighs the mean part ("bound-limited": about half the batches of
256 samples over 8, most of 64 over 4 or 8); there the measure is max /
lower_bound, within 1.001. Two exceptions, both from the samples, not the
method: more outsize samples than parts (three of 1024**2 among 64 samples
over 2 parts must pair up: 1.12 of the bound, the optimum), and equal counts,
where the part holding an outsize sample still takes its share of samples
(up to 1.023 of the count-aware bound at 256 samples). Time for 2048 samples
on one core: about 0.3 ms for 2, 4 or 8 parts (equal counts 0.4-0.5 ms).

Parts of different speeds (``speeds``): the same stages place samples against each part's share
of the total (the loads less the shares are what they even out; KK does not take shares), then
a refinement of the largest load / speed trades samples between the part that finishes last
and the others, earliest first. Measured on MovieLens-100K lengths with speeds spread 0.8-1.2:
within 1.0001 of the lower bound; 0.2-0.7 ms for 256 to 2048 samples (equal counts up to 1.4 ms
at 2048 over 8).
"""

from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Optional, Sequence

import numpy as np

METHODS = ("auto", "lpt", "kk")

# Samples placed exactly by the heuristic, largest first: an LPT heap step costs
# ~0.1 us, a k-way differencing merge ~2 us, hence the different sizes.
_HEAD_LPT = 192
_HEAD_KK = 64
# Smallest samples placed by the LPT greedy after the bulk pour.
_FINE = 192
# Equal counts: values placed greedily (with room for equal counts) before the bulk deal;
# a deal can only even out loads by the spread of its values, the greedy by more.
_EQ_GREEDY = 768
# Refinement steps per part (each one moves or swaps samples of the most loaded part),
# and the least a step must take off the most loaded part, relative to the lower bound:
# below 1e-4 no step time can tell the difference, and it keeps large batches cheap.
_REFINE_PER_PART = 4
_REFINE_TOL = 1e-4


# ---------------------------------------------------------------------------
# Checks and the public helpers
# ---------------------------------------------------------------------------

def _check_costs(costs: object, name: str = "costs") -> np.ndarray:
    arr = np.asarray(costs)
    if arr.dtype.kind == "O":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected numbers, got {type(costs).__name__} holding other objects") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} has dtype {arr.dtype}; expected real numbers (one cost per sample)")
    if arr.ndim != 1:
        raise ValueError(f"{name} has shape {arr.shape}; expected a 1-D array, one cost per sample "
                         "(one batch at a time)")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}]={arr[i]}: costs must be finite and not negative")
    return arr


def _check_nparts(nparts: object) -> int:
    if isinstance(nparts, bool) or not isinstance(nparts, (int, np.integer)):
        raise TypeError(f"nparts={nparts!r}: an integer number of parts is needed")
    if int(nparts) < 1:
        raise ValueError(f"nparts={nparts}: use 1 or more parts")
    return int(nparts)


def _check_speeds(speeds: object, k: int) -> Optional[np.ndarray]:
    """The relative speeds as float64 (None when not given)."""
    if speeds is None:
        return None
    try:
        sp = np.asarray(speeds, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"speeds: expected {k} numbers (one per part), got {type(speeds).__name__}") from None
    if sp.shape != (k,):
        raise ValueError(f"speeds has shape {sp.shape}; expected one speed per part ({k},)")
    bad = ~np.isfinite(sp) | (sp <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"speeds[{i}]={sp[i]}: speeds must be finite and > 0 (relative: 1.0 for a part of "
                         "average speed)")
    return sp


def lower_bound(costs: object, nparts: int, equal_count: bool = False, speeds: object = None) -> float:
    """No partition's maximum load is below ``max(largest cost, total / nparts)`` (0 for no samples).

    equal_count=True: nor, when part sizes differ by at most one, below the
    largest cost plus the ``n // nparts - 1`` smallest other costs (the part
    holding the largest sample holds at least ``n // nparts`` samples).
    speeds: the bound on the largest load / speed instead, ``max(largest cost / fastest
    speed, total / sum of the speeds)`` (equal_count adds nothing to it).
    """
    c = _check_costs(costs)
    k = _check_nparts(nparts)
    sp = _check_speeds(speeds, k)
    if c.size == 0:
        return 0.0
    if sp is not None:
        return max(float(c.max()) / float(sp.max()), float(np.cumsum(c)[-1]) / float(np.cumsum(sp)[-1]))
    if not equal_count:
        return max(float(c.max()), float(c.sum()) / k)
    return _bound(np.sort(c)[::-1], k, True)


def _bound(s: np.ndarray, k: int, equal_count: bool, pigeonhole: bool = False) -> float:
    """lower_bound of the decreasing costs `s` (at least one).

    pigeonhole=True adds ``s[k-1] + s[k]``: two of the k + 1 largest share a
    part (a bound the refinement and auto use to stop early).
    """
    # Sequential sums (cumsum, not the pairwise sum, whose rounding may vary with the CPU's
    # vector width): every rank takes the same early stops.
    bound = max(float(s[0]), float(np.cumsum(s)[-1]) / k)
    fill = s.size // k - 1  # the fewest other samples beside the largest, with equal counts
    if equal_count and fill > 0:
        bound = max(bound, float(s[0]) + float(np.cumsum(s[s.size - fill:])[-1]))
    if pigeonhole and s.size > k:
        bound = max(bound, float(s[k - 1]) + float(s[k]))
    return bound


def loads(costs: object, parts: Sequence[object]) -> np.ndarray:
    """Load (sum of the costs of its samples) of each part, float64."""
    c = _check_costs(costs)
    out = np.zeros(len(parts), dtype=np.float64)
    for j, part in enumerate(parts):
        idx = np.asarray(part)
        if idx.size == 0:
            continue
        if idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise TypeError(f"parts[{j}]: expected a 1-D array of sample indices, got dtype {idx.dtype} "
                            f"shape {idx.shape}")
        if int(idx.min()) < 0 or int(idx.max()) >= c.size:
            raise ValueError(f"parts[{j}] holds an index outside 0..{c.size - 1}")
        out[j] = float(c[idx].sum())
    return out


def imbalance(costs: object, parts: Sequence[object], speeds: object = None) -> float:
    """Maximum over mean part load (1.0 is perfect balance; 1.0 when every load is 0).

    speeds: the largest load / speed over the total load / the sum of the speeds (the time
    of the slowest part over the time if every part finished together).
    """
    ld = loads(costs, parts)
    sp = _check_speeds(speeds, len(parts))
    if sp is not None:
        even = float(ld.sum()) / float(sp.sum())
        return float((ld / sp).max()) / even if even > 0 else 1.0
    mean = float(ld.mean()) if ld.size else 0.0
    return float(ld.max()) / mean if mean > 0 else 1.0


# ---------------------------------------------------------------------------
# Placement stages; all work on positions in decreasing cost order
# ---------------------------------------------------------------------------

def _greedy(vals: Sequence[float], ld: list[float], counts: Optional[list[int]] = None,
            cap: int = 0, big_left: int = 0) -> list[int]:
    """LPT: each value (in the order given, decreasing) to the least loaded part; that part's index each.

    `ld` (and `counts`) are updated in place. With `counts`: a part takes at
    most `cap` + 1 values while `big_left` more parts may reach `cap` + 1,
    else at most `cap`; full parts leave the heap for good.
    """
    heap = [(x, p) for p, x in enumerate(ld)]
    heapq.heapify(heap)
    out = []
    push = heapq.heapreplace
    if counts is None:
        for v in vals:
            x, p = heap[0]
            push(heap, (x + v, p))
            out.append(p)
        for x, p in heap:
            ld[p] = x
        return out
    limit = cap + 1 if big_left > 0 else cap
    for v in vals:
        x, p = heap[0]
        while counts[p] >= limit:
            heapq.heappop(heap)
            x, p = heap[0]
        c = counts[p] + 1
        counts[p] = c
        if c > cap:
            big_left -= 1
            if big_left == 0:
                limit = cap
        ld[p] = x + v
        out.append(p)
        if c < limit:
            push(heap, (x + v, p))
        else:
            heapq.heappop(heap)
    return out


def _kk(vals: Sequence[float], k: int, rounds: bool) -> tuple[list[int], list[float]]:
    """Karmarkar-Karp differencing over k parts: (part of each value, part loads).

    A partial partition is a list of k (load, positions) pairs in decreasing
    load. The two with the largest spread (largest minus smallest load)
    merge, the largest load of one with the smallest of the other, until one
    remains. rounds=False: every value starts alone. rounds=True: values
    (decreasing, a multiple of k of them) start as tuples of k consecutive
    values, one per part, so that every part ends with the same count.
    """
    n = len(vals)
    if rounds:
        heap = [(vals[r + k - 1] - vals[r], r, [(vals[r + j], [r + j]) for j in range(k)]) for r in range(0, n, k)]
    else:
        heap = [(-v, i, [(v, [i])] + [(0.0, [])] * (k - 1)) for i, v in enumerate(vals)]
    heapq.heapify(heap)
    pop, push, first = heapq.heappop, heapq.heappush, itemgetter(0)
    seq = n  # equal spreads: the older tuple first
    while len(heap) > 1:
        a = pop(heap)[2]
        b = pop(heap)[2]
        m = [(x[0] + y[0], x[1] + y[1]) for x, y in zip(a, b[::-1], strict=True)]
        m.sort(key=first, reverse=True)
        push(heap, (m[-1][0] - m[0][0], seq, m))
        seq += 1
    part = [0] * n
    final = heap[0][2]
    for p, (_, items) in enumerate(final):
        for i in items:
            part[i] = p
    return part, [x for x, _ in final]


def _water_level(ld: Sequence[float], mass: float) -> float:
    """The level L with sum(max(0, L - load)) = mass."""
    u = sorted(ld)
    acc = 0.0
    for m, x in enumerate(u, start=1):
        acc += x
        level = (mass + acc) / m
        if m == len(u) or level <= u[m]:
            return level
    return mass  # no parts: unreachable, partition() needs nparts >= 1


def _pour(vals: np.ndarray, ld: list[float]) -> np.ndarray:
    """Bulk placement of decreasing `vals`: the part of each, -1 for the few left over.

    The parts' gaps up to the water level of these values are laid end to
    end, lightest part first, and the values in order: a value wholly inside
    a part's gap goes there, one that straddles two gaps (at most one per
    gap) is left over. No part rises above the level. `ld` is updated.
    """
    k = len(ld)
    ends = np.cumsum(vals)
    level = _water_level(ld, float(ends[-1]))
    porder = sorted(range(k), key=ld.__getitem__)
    bounds, acc = [], 0.0
    for p in porder:
        acc += max(level - ld[p], 0.0)
        bounds.append(acc)
    stops = np.searchsorted(ends, bounds, side="right").tolist()  # values ending at or before each bound
    labels, lengths = [], []
    prev, low = 0, 0.0
    for p, stop, bound in zip(porder, stops, bounds, strict=True):
        if stop > prev:
            start = float(ends[prev - 1]) if prev else 0.0
            if start < low:  # straddles the previous gap's end
                labels.append(-1)
                lengths.append(1)
                start = float(ends[prev])
                prev += 1
            if stop > prev:
                labels.append(p)
                lengths.append(stop - prev)
                ld[p] += float(ends[stop - 1]) - start
                prev = stop
        low = bound
    labels.append(-1)
    lengths.append(vals.size - prev)
    return np.repeat(np.asarray(labels, dtype=np.int64), lengths)


def _deal(vals: np.ndarray, ld: np.ndarray) -> np.ndarray:
    """Equal-count bulk: rounds of k decreasing values, one per part (the part of each value).

    The parts are ranked by load; the lightest takes the largest value of
    each round until the rounds have closed the spread between the lightest
    and the heaviest, then the direction alternates (snake order), which
    keeps the parts even. `ld` is updated.
    """
    k = ld.size
    rv = vals.reshape(-1, k)
    nrounds = rv.shape[0]
    porder = np.argsort(ld, kind="stable")
    closed = np.cumsum(rv[:, 0] - rv[:, -1])
    forward = int(np.searchsorted(closed, float(ld[porder[-1]] - ld[porder[0]]), side="left")) + 1
    r = np.arange(nrounds)
    rank = np.tile(np.arange(k), (nrounds, 1))
    flip = (r >= forward) & ((r - forward) % 2 == 0)
    rank[flip] = rank[flip, ::-1]
    out = porder[rank].reshape(-1)
    ld += np.bincount(out, weights=vals, minlength=k)
    return out


def _closest_exchange(s: np.ndarray, part: np.ndarray, ip: np.ndarray, q: int, amount: float,
                      may_move: bool) -> tuple[int, int, float]:
    """The exchange between positions `ip` (of one part) and part q whose moved cost is closest to
    `amount`: (the position leaving, the position coming back or -1 for a move, the distance).

    may_move: a move (an exchange with nothing) is allowed; else only swaps (equal counts).
    (-1, -1, inf) when q holds nothing to swap.
    """
    x = s[ip]
    iq = np.flatnonzero(part == q)[::-1]  # increasing cost
    if may_move:
        iq = np.concatenate((np.full(1, -1, dtype=np.int64), iq))
        y = np.concatenate((np.zeros(1), s[iq[1:]]))
    elif iq.size:
        y = s[iq]
    else:
        return -1, -1, float("inf")
    want = x - amount  # the partner's value that would move `amount`
    at = np.searchsorted(y, want)
    lo = np.maximum(at - 1, 0)
    hi = np.minimum(at, y.size - 1)
    err_lo = np.abs(want - y[lo])
    err_hi = np.abs(want - y[hi])
    j_lo = int(err_lo.argmin())
    j_hi = int(err_hi.argmin())
    if err_lo[j_lo] <= err_hi[j_hi]:
        return int(ip[j_lo]), int(iq[lo[j_lo]]), float(err_lo[j_lo])
    return int(ip[j_hi]), int(iq[hi[j_hi]]), float(err_hi[j_hi])


def _exchange(part: np.ndarray, counts: list[int], ld: np.ndarray, a: int, b: int, p: int, q: int,
              delta: float) -> None:
    """Position a from part p to q and b (-1: none) from q to p, `delta` their cost difference."""
    part[a] = q
    if b >= 0:
        part[b] = p
    else:
        counts[p] -= 1
        counts[q] += 1
    ld[p] -= delta
    ld[q] += delta


def _refine(s: np.ndarray, part: np.ndarray, ld: np.ndarray, k: int, equal_count: bool, bound: float) -> None:
    """Lower the most loaded part by moving one sample or swapping two with another part (in place).

    Partners are tried lightest first; the exchange whose value is closest
    to half the gap is taken (a move is an exchange with nothing). A step
    must lower the most loaded part by more than ``_REFINE_TOL * bound``;
    refinement stops when no step does, or after ``_REFINE_PER_PART * k``
    steps. `s` holds the costs in decreasing order, `part` the part of each
    position. With equal_count, a move only goes from a part one longer to
    a part one shorter, which keeps the sizes.
    """
    tol = _REFINE_TOL * bound
    counts = np.bincount(part, minlength=k).tolist()
    for _ in range(_REFINE_PER_PART * k):
        p = int(ld.argmax())
        top = float(ld[p])
        if top <= bound + tol:
            return
        ip = np.flatnonzero(part == p)
        for q in ld.argsort(kind="stable").tolist():
            if q == p:
                continue
            half = 0.5 * (top - float(ld[q]))
            if half <= tol:
                return  # the lighter partners are already tried; the others are as heavy
            a, b, err = _closest_exchange(s, part, ip, q, half, not equal_count or counts[p] == counts[q] + 1)
            if err >= half - tol:
                continue  # lowers the most loaded part by tol or less
            delta = float(s[a]) - (float(s[b]) if b >= 0 else 0.0)
            _exchange(part, counts, ld, a, b, p, q, delta)
            break
        else:
            return


def _refine_speeds(s: np.ndarray, part: np.ndarray, ld: np.ndarray, sp: np.ndarray, equal_count: bool,
                   bound: float, tol: float) -> None:
    """:func:`_refine` for parts of speeds `sp`: lowers the largest load / speed (in place).

    The slowest-finishing part p trades with partners in order of finishing time, earliest
    first: the exchange moving cost closest to ``(ld[p] sp[q] - ld[q] sp[p]) / (sp[p] + sp[q])``
    (both then finish together) is taken when it lowers p's time by more than `tol` without
    q's passing it. `bound` is a lower bound on the largest time; at most 4 k + 16 steps.
    """
    k = sp.size
    counts = np.bincount(part, minlength=k).tolist()
    for _ in range(_REFINE_PER_PART * k + 16):
        t = ld / sp
        p = int(t.argmax())
        top = float(t[p])
        if top <= bound + tol:
            return
        ip = np.flatnonzero(part == p)
        for q in t.argsort(kind="stable").tolist():
            if q == p:
                continue
            ideal = (float(ld[p]) * float(sp[q]) - float(ld[q]) * float(sp[p])) / (float(sp[p]) + float(sp[q]))
            if ideal <= tol * float(sp[p]):
                return  # the earlier-finishing partners are already tried; the others finish later
            a, b, err = _closest_exchange(s, part, ip, q, ideal, not equal_count or counts[p] == counts[q] + 1)
            if a < 0:
                continue
            delta = float(s[a]) - (float(s[b]) if b >= 0 else 0.0)
            after = max((float(ld[p]) - delta) / float(sp[p]), (float(ld[q]) + delta) / float(sp[q]))
            if after >= top - tol:
                continue  # lowers the latest finish by tol or less
            _exchange(part, counts, ld, a, b, p, q, delta)
            break
        else:
            return


def _solve(s: np.ndarray, k: int, method: str, equal_count: bool, refine: bool,
           shares: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Part of each position of the decreasing costs `s`, and the part loads.

    shares: each part's share of the total load (its speed over the sum of the speeds); the
    stages then work on the loads less the parts' targets (share x total), so that the even
    loads they aim at are the targets.
    """
    n = s.size
    part = np.empty(n, dtype=np.int64)
    total = float(np.cumsum(s)[-1]) if n else 0.0
    start = None if shares is None else (-total * shares).tolist()
    if equal_count:
        _place_equal(s, k, method, part, start)
    else:
        _place(s, k, method, part, start)
    ld = np.bincount(part, weights=s, minlength=k).astype(np.float64)
    if refine and n > 1 and k > 1:
        if shares is None:
            _refine(s, part, ld, k, equal_count, _bound(s, k, equal_count, pigeonhole=True))
        else:  # times load / share: all equal to the total when every part finishes together
            bound = max(float(s[0]) / float(shares.max()), total)
            _refine_speeds(s, part, ld, shares, equal_count, bound, _REFINE_TOL * total)
        # Sums in a fixed order, so every rank holds bit-identical loads.
        ld = np.bincount(part, weights=s, minlength=k).astype(np.float64)
    return part, ld


def _place(s: np.ndarray, k: int, method: str, part: np.ndarray, start: Optional[list[float]] = None) -> None:
    n = s.size
    if method == "kk":
        # Where the bulk pour evens out the middle, the largest 32 suffice.
        h = min(n, _HEAD_KK if n <= _HEAD_LPT + _FINE else _HEAD_KK // 2)
        head, ld = _kk(s[:h].tolist(), k, rounds=False)
    else:
        h = min(n, _HEAD_LPT)
        ld = [0.0] * k if start is None else list(start)
        head = _greedy(s[:h].tolist(), ld)
    part[:h] = head
    rest = n - h
    if rest == 0:
        return
    if rest <= _FINE + max(0, _HEAD_LPT - h):
        part[h:] = _greedy(s[h:].tolist(), ld)
        return
    # Pour the bulk in three passes (half, quarter, quarter of it), each with the values the
    # previous one left over: the last left-overs are small, and the greedy closes their gaps.
    cut = n - _FINE
    edges = [h, h + (cut - h) // 2, h + 3 * (cut - h) // 4, cut]
    pending = np.empty(0, dtype=np.int64)
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        pos = np.concatenate([pending, np.arange(a, b)])
        if pos.size == 0:
            continue
        got = _pour(s[pos], ld)
        kept = got >= 0
        part[pos[kept]] = got[kept]
        pending = pos[~kept]
    tail = np.concatenate([pending, np.arange(cut, n)])
    part[tail] = _greedy(s[tail].tolist(), ld)


def _place_equal(s: np.ndarray, k: int, method: str, part: np.ndarray, start: Optional[list[float]] = None) -> None:
    n = s.size
    zero = [0.0] * k if start is None else list(start)
    cap, extra = divmod(n, k)
    if method == "kk" and n <= _HEAD_KK:
        # Pad with zero-cost samples to whole rounds; they sort last and are dropped.
        head, _ = _kk(s.tolist() + [0.0] * ((-n) % k), k, rounds=True)
        part[:] = head[:n]
        return
    if method == "lpt" and n <= _EQ_GREEDY + _FINE:
        part[:] = _greedy(s.tolist(), zero, [0] * k, cap, extra)
        return
    # Whole rounds: the head (KK), then greedily with room for the same count in every part
    # (where the values are large enough to even out the head), then dealt in bulk; the
    # smallest (at least _FINE) greedily with the final caps.
    h = (_HEAD_KK // k) * k if method == "kk" else 0
    if h:
        head, ld = _kk(s[:h].tolist(), k, rounds=True)
        part[:h] = head
    else:
        ld = zero
    g = max(h, min(((n - _FINE) // k) * k, (_EQ_GREEDY // k) * k))
    part[h:g] = _greedy(s[h:g].tolist(), ld, [h // k] * k, g // k, 0)
    cut = g + max(0, (n - g - _FINE) // k) * k
    ldv = np.asarray(ld, dtype=np.float64)
    if cut > g:
        part[g:cut] = _deal(s[g:cut], ldv)
    part[cut:] = _greedy(s[cut:].tolist(), ldv.tolist(), [cut // k] * k, cap, extra)


# ---------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------

def partition(costs: object, nparts: int, equal_count: bool = False, method: str = "auto", *,
              refine: bool = True, speeds: object = None) -> list[np.ndarray]:
    """Split samples of the given costs into `nparts` parts of low maximum load.

    Returns `nparts` int64 arrays of sample indices, each sorted ascending;
    every index appears exactly once (parts may be empty when there are
    fewer samples than parts). The same arguments give the same parts on
    every rank. equal_count=True: part sizes differ by at most one. method:
    "auto" (both heuristics, the lower maximum load; lpt on a tie; only lpt
    when it ends within 1e-4 of the lower bound), "lpt" or "kk" (see the
    module docstring). refine=False skips the refinement, for
    measuring it.

    speeds: one relative speed per part (a rank that computes 20% faster:
    1.2): the aim is then the smallest maximum of load / speed, each part
    loaded in proportion to its speed. The stages place samples against
    those shares (LPT with the bulk pour or deal; "kk" is refused) and the
    refinement evens out the loads less the shares. Equal speeds give the
    parts of no speeds. With equal_count the sizes still differ by at most
    one: a faster part takes costlier samples, not more of them.

    Balance reached (perf/studies/partition.md): max / mean load <= 1.02 (measured:
    1.0002) for batches of 256 samples or more over 2, 4 and 8 parts with
    the L**2 cost model on MovieLens-100K and on synthetic lengths wherever
    no single sample outweighs the mean part; where one does (small batches,
    capped heavy tails) no partition reaches the mean, and the measure is
    max / lower_bound (see the module docstring for the numbers).
    """
    c = _check_costs(costs)
    k = _check_nparts(nparts)
    if not isinstance(equal_count, (bool, np.bool_)):
        raise TypeError(f"equal_count={equal_count!r}: True or False")
    if method not in METHODS:
        raise ValueError(f"method={method!r}: use one of {', '.join(repr(m) for m in METHODS)}")
    sp = _check_speeds(speeds, k)
    if sp is not None and bool(np.all(sp == sp[0])):
        sp = None  # equal speeds: the plain problem
    if sp is not None and method == "kk":
        raise ValueError("method='kk' does not take speeds (its differencing assumes parts of one speed); "
                         "use method='lpt' or 'auto'")
    n = c.size
    # Decreasing cost, ties by index: the order every stage works in.
    order = np.argsort(-c, kind="stable")
    s = c[order]
    if k == 1 or n == 0:
        part = np.zeros(n, dtype=np.int64)
    elif sp is not None:  # (a fast part may take two samples where there are fewer than parts)
        part, _ = _solve(s, k, "lpt", bool(equal_count), refine, sp / float(np.cumsum(sp)[-1]))
    elif n <= k:
        part = np.arange(n, dtype=np.int64)
    elif method == "auto":
        part, ld = _solve(s, k, "lpt", bool(equal_count), refine)
        # Within _REFINE_TOL of the lower bound nothing can do better by more: skip KK.
        if float(ld.max()) > _bound(s, k, bool(equal_count), pigeonhole=True) * (1 + _REFINE_TOL):
            part_kk, ld_kk = _solve(s, k, "kk", bool(equal_count), refine)
            if ld_kk.max() < ld.max():
                part = part_kk
    else:
        part, _ = _solve(s, k, method, bool(equal_count), refine)
    # Small part numbers sort by radix: a stable grouping keeps each part's indices ascending.
    by_index = np.empty(n, dtype=np.int16 if k <= 32767 else np.int64)
    by_index[order] = part
    grouped = np.argsort(by_index, kind="stable")
    ends = np.cumsum(np.bincount(by_index, minlength=k)).tolist()
    return [grouped[a:b] for a, b in zip([0] + ends[:-1], ends, strict=True)]
