"""The learned caching policy: a small model says which rows are worth keeping, and a
guard makes it follow the best classical policy whenever the model falls behind.

For each lookup the model predicts the probability that Belady's optimum,
with the same capacity, would still hold the row at its next lookup (the
next-access outcome; a row with no next lookup is a 0). Its inputs are the
access features of :mod:`.features` (recency: gaps; frequency: lookup
counts decayed at several time scales, relative to the capacity) and the
classical policies' own decisions (whether each of them, serving the stream
alone, holds the row at this lookup). It is trained on a past stretch of the
trace: the policy serves the warm-up as LRU while it records the lookups and
their features, then labels them by replaying the optimum over that stretch
and fits the model. It can retrain on the most recent stretch every
`retrain_every` lookups (labels need only the past).

The model's order: a row's priority is ``t + horizon * capacity * log(p)``,
where t is its last lookup and p the prediction made then; the smallest goes
first. So rows the model calls worth keeping age like LRU, and a row with a
low p counts as if it had been looked up ``horizon * capacity * log(1/p)``
lookups earlier. With an untrained model (p = 1) the order is LRU's. With a
perfect predictor it is Belady's as long as no row worth keeping was last
looked up more than ``horizon * capacity * log(p_keep / p_drop)`` lookups
before a row not worth keeping: the offset is finite on purpose, so that a
row predicted worth keeping but never looked up again ages out instead of
holding its slot for ever (tested both ways).

The guard (:mod:`.guard`): the model's order and each classical policy of
`experts` serve the stream as shadow caches of the same capacity; once the
model is trained, the leader of each step is the
model's order unless a classical shadow is ahead of it, by more than
`guard_margin`, in the decayed and clipped comparison of their hit rates
over the steps already served (half-life `guard_half_life` lookups; see
:class:`~.guard.Guard`). At the first training a lead the untrained order
holds, which was LRU's, goes to the classical shadow furthest ahead: the
model must win it back. Each time the model takes the lead, the guard counts
its hits less those of the policy it took over from until it hands the lead
on (a stint); while the decayed sum of these balances is negative, the model
takes the lead back only if it also leads in a comparison with a half-life
`guard_slow` times longer. A model whose hit rate swings from batch to batch
is otherwise followed after its good batches into its bad ones, while a
model that is ahead after a change of popularity still takes over at once.
A step is at least `guard_step` lookups and ends at
the first lookup after that whose id is not above the one before (or at
`guard_step_max` lookups). Short steps let the guard leave a
policy that collapses within a batch (a popularity that moved at once), not
a whole batch later. Ending them where the ids stop rising keeps batches
that were deduplicated and sorted before the lookup whole: over ids numbered
by popularity each such batch walks from the hottest rows to the coldest,
every policy's hits come at its head, and steps that cut batches apart
compare heads with tails (on 288 such arrays 83 fell more than half a point
below the best classical policy with steps cut at 256 lookups, 14 with whole
batches). On ids in no order a step ends a lookup or two after `guard_step`.
The
real fast tier follows the leader: on a miss it evicts a row the leader's
shadow does not hold (the one the leader dropped last),
so its contents converge to the leader's and then hit exactly as the leader
does. Rows that came in during a sequential scan go first while the probation
area of :mod:`.scan_filter` is full, so a scan that flushes the leader does
not flush the tier. This is measured on the stream being served, whatever it is, not
assumed from the kind of trace. Rows brought in by a prefetcher are not in
any shadow: they stay, ranked by the model's order as looked up
`prefetch_age` lookups before they came, until looked up or until no row
outside the leader's contents is left to evict; past
`prefetch_grace` lookups unused they go first.

The model and the shadows run a batch ahead: :meth:`prepare` computes the
next batch's shadows, features and predictions (the simulator runs it in a
background thread while the current batch is served) and :meth:`observe`
picks them up. :meth:`prepare_batches` does the same for several batches in
one pass, when their ids are known ahead (a data loader's queue): every
shadow then fetches its hot rows into the caches once for all of them, which
is most of its cost a batch. The predictions of a batch come from the model
in use when the batch was prepared.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from itertools import islice
from typing import Container, Optional, Sequence

import numpy as np

from .features import AccessFeatures
from .guard import Guard, Shadow, ShadowBatch
from .model import TinyMLP
from .policies import _NO_PIN, CLASSIC, ONLINE, _HeapPolicy, opt_next_hit
from .scan_filter import ScanFilter

#: Time scales of the decayed counts, in capacities.
SCALES_IN_CAPACITIES = (1.0, 8.0, 64.0)


class LearnedOrder(_HeapPolicy):
    """The model's eviction order alone: priority ``t + horizon * capacity * log(p)``, smallest first.

    ``p`` comes per batch from :meth:`set_predictions` (1 before any: LRU's order).
    """

    name = "learned-order"

    def __init__(self, horizon: float = 10.0, prefetch_age: int = 0) -> None:
        super().__init__()
        self.horizon = float(horizon)
        self.prefetch_age = int(prefetch_age)
        self._t0 = 0
        self._offset_array: Optional[np.ndarray] = None
        # The same offsets as Python floats, made only when priority() runs in Python (the C
        # shadow takes the array).
        self._offset: Optional[list[float]] = None

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        self._t0 = 0
        self._offset_array = None
        self._offset = None

    def set_predictions(self, p: np.ndarray, t0: int) -> None:
        """The predictions of the lookups at times t0, t0+1, ..."""
        off = self.horizon * self.capacity * np.log(np.maximum(np.asarray(p, dtype=np.float64), 1e-6))
        self._offset_array, self._offset, self._t0 = off, None, t0

    def offsets(self, t0: int, n: int) -> np.ndarray:
        """The rank offsets of the lookups at times t0 .. t0+n-1 (0 where no prediction was set), as priority()."""
        have = self._offset_array
        if have is not None and t0 == self._t0 and n == have.size:
            return have
        out = np.zeros(n, dtype=np.float64)
        if have is not None:
            lo, hi = max(t0, self._t0), min(t0 + n, self._t0 + have.size)
            if lo < hi:
                out[lo - t0:hi - t0] = have[lo - self._t0:hi - self._t0]
        return out

    def native_config(self) -> Optional[dict]:
        return {"kind": "priority"} if type(self) is LearnedOrder else None

    def priority(self, t: int) -> tuple:
        off = self._offset
        if off is None:
            off = self._offset = [] if self._offset_array is None else self._offset_array.tolist()
        i = t - self._t0
        return (t + off[i] if 0 <= i < len(off) else float(t), t)

    def hit(self, row: int, t: int) -> None:
        self._set(row, self.priority(t))

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        if prefetched:
            # Not looked up yet: ranks as a row looked up prefetch_age lookups ago (its use is expected soon).
            self._set(row, (float(t - self.prefetch_age), t))
        else:
            self._set(row, self.priority(t))


class LearnedCachePolicy(LearnedOrder):
    """Keep rows by a learned prediction of Belady's next-access outcome, guarded by the classical
    policies (see the module docstring).

    `n_rows` is the table size (for the per-row access state). `horizon`
    scales how far back a low prediction pushes a row, in capacities.
    `window` is how many past lookups a (re)training uses (default: all
    recorded so far, up to 1,000,000); `retrain_every` retrains after that
    many lookups since the last training (None: train once, when asked).
    `train_steps`: the fewest optimizer steps a training takes (more
    epochs than `epochs` on a short record). `retrain_epochs`: a retraining
    goes on from the model in use for this many epochs over the window (0:
    a new model, trained as the first one).
    `prefetch_age` is how many lookups older than a row just looked up a
    prefetched row ranks when it comes in (0: as if just looked up), and
    `prefetch_grace` how long it may stay unused before it goes first
    (default: 4 x capacity). `experts`: the classical policies (names of
    :data:`~.policies.CLASSIC`, not "opt") whose shadows guard the model and
    whose decisions are features; `guard`: follow the best of them while the
    model is behind (False: always the model's order); `guard_step`: the
    fewest lookups between two choices of leader (within a batch too; the
    step ends at the next lookup whose id is not above the one before);
    `guard_step_max`: the most (None: 16 x `guard_step`); `guard_slow`: once
    the model's stints as leader have lost hits, it takes the lead back only
    if it also leads in a comparison with a half-life this many times longer
    (None: never);
    `guard_half_life`: the lookups after which a step's weight in the
    comparison halves (None: 6 capacities, at least 1024); `guard_margin`:
    the lead in hit rate a rival needs to take over; `guard_clip`: the most
    one step's difference in hit rate counts. `scan_run`: a row that misses
    on the last of this many lookups in a row, each of the id before + 1,
    waits in a probation area of `scan_hold` x capacity rows, measured and
    turned off where it costs hits (:mod:`.scan_filter`; None: no probation).
    """

    name = "learned"

    def __init__(self, n_rows: int, *, horizon: float = 10.0, hidden: tuple[int, int] = (16, 8),
                 epochs: int = 8, window: Optional[int] = None, retrain_every: Optional[int] = None,
                 prefetch_age: int = 0, prefetch_grace: Optional[int] = None, seed: int = 0,
                 experts: Sequence[str] = ONLINE, guard: bool = True, guard_step: int = 256,
                 guard_half_life: Optional[float] = None, guard_margin: float = 0.0025,
                 guard_clip: float = 0.05, guard_step_max: Optional[int] = None, guard_slow: Optional[float] = 4.0,
                 scan_run: Optional[int] = 8, scan_hold: float = 0.01, train_steps: int = 0,
                 retrain_epochs: int = 3) -> None:
        if horizon <= 0:
            raise ValueError(f"horizon must be positive (in capacities), got {horizon}")
        if retrain_epochs < 0:
            raise ValueError(f"retrain_epochs must be a non-negative number of epochs (0: a new model each "
                             f"time), got {retrain_epochs}")
        if train_steps < 0:
            raise ValueError(f"train_steps must be a non-negative number of optimizer steps, got {train_steps}")
        if retrain_every is not None and retrain_every < 1:
            raise ValueError(f"retrain_every must be a positive number of lookups or None, got {retrain_every}")
        if prefetch_age < 0:
            raise ValueError(f"prefetch_age must be a non-negative number of lookups, got {prefetch_age}")
        if prefetch_grace is not None and prefetch_grace < 0:
            raise ValueError(f"prefetch_grace must be a non-negative number of lookups or None, got {prefetch_grace}")
        bad = [e for e in experts if e not in CLASSIC or e == "opt"]
        if bad:
            raise ValueError(f"experts must be classical online policies ({', '.join(ONLINE)}), got {bad}")
        if guard_step < 1:
            raise ValueError(f"guard_step must be at least 1 lookup, got {guard_step}")
        if guard_slow is not None and not guard_slow >= 1:
            raise ValueError(f"guard_slow must be a factor of the half-life of at least 1, or None, got {guard_slow}")
        if guard_step_max is not None and guard_step_max < guard_step:
            raise ValueError(f"guard_step_max must be at least guard_step ({guard_step}) or None "
                             f"(16 x guard_step), got {guard_step_max}")
        if guard_half_life is not None and not guard_half_life >= 1:
            raise ValueError(f"guard_half_life must be at least 1 lookup or None, got {guard_half_life}")
        if not 0.0 <= guard_margin < 1.0:
            raise ValueError(f"guard_margin must be a lead in hit rate in [0, 1) (0.0025: a quarter point), "
                             f"got {guard_margin}")
        if not 0.0 < guard_clip <= 1.0:
            raise ValueError(f"guard_clip must be a difference in hit rate in (0, 1] (1: no clip), got {guard_clip}")
        # Checks its own arguments (a ValueError names scan_run or scan_hold).
        self.scan = ScanFilter(scan_run, scan_hold) if scan_run is not None else None
        super().__init__(horizon, prefetch_age)
        self.n_rows = int(n_rows)
        self.hidden = hidden
        self.epochs = epochs
        self.train_steps = int(train_steps)
        self.retrain_epochs = int(retrain_epochs)
        self.window = int(window) if window is not None else 1_000_000
        self.retrain_every = retrain_every
        self.prefetch_grace = prefetch_grace
        self.seed = seed
        self.experts = tuple(experts)
        self.guard_on = bool(guard)
        self.guard_step = int(guard_step)
        self.guard_step_max = int(guard_step_max) if guard_step_max is not None else 16 * self.guard_step
        self.guard_half_life = guard_half_life
        self.model: Optional[TinyMLP] = None
        self.model_seconds = 0.0   # CPU time of features + predictions
        self.guard_seconds = 0.0   # CPU time of the shadow caches
        self.train_seconds = 0.0   # CPU time of labelling + fitting
        self.predicted = 0
        self.trainings = 0
        # prepare() advances the shadows, possibly in another thread, while a batch is served; a change
        # of leader within that batch reads the shadow's contents under this lock.
        self._shadow_lock = threading.Lock()
        self._order = LearnedOrder(horizon, prefetch_age)
        shadows = {"learned": Shadow("learned", self._order, rows=self.n_rows)}
        shadows.update({e: Shadow(e, CLASSIC[e](), rows=self.n_rows) for e in self.experts})
        self.guard = Guard(shadows, "learned", guard_half_life or 8192, guard_margin, guard_clip, guard_slow)
        self._reset_stream()

    def _reset_stream(self) -> None:
        scales = tuple(max(64.0, f * max(self.capacity, 1)) for f in SCALES_IN_CAPACITIES)
        self.features = AccessFeatures(self.n_rows, scales=scales)
        self.n_features = self.features.n_features + len(self.experts)
        self._prepared: dict[int, tuple] = {}
        self._hist_ids: list[np.ndarray] = []
        self._hist_x: list[np.ndarray] = []
        self._hist_len = 0
        self._since_train = 0
        self._next_t = 0
        self.leader = "learned"
        # Held, not in the leader's shadow; the value orders them by when the leader dropped them (the
        # lookup's time; rows marked at a change of leader come before any time).
        self._outside: "OrderedDict[int, int]" = OrderedDict()
        # Rows of _outside that victim() passed over because they were pinned, taken out while it is
        # given the same frozenset (a store's batch): a batch's rows the leader dropped gather at the
        # newest end, and every miss of the batch would walk past them again.
        self._out_parked: dict[int, int] = {}
        self._out_parked_for: Optional[frozenset] = None
        self._prefetched: "OrderedDict[int, int]" = OrderedDict()   # held, prefetched, not looked up yet
        self._batch: Optional[tuple] = None   # (t0, ids, ids as a list, shadows, step starts) of the batch served
        self._last_id: Optional[int] = None   # the lookup before it
        self._events: Optional[tuple] = None  # (t0, ids, hits, evicted) of its leader's shadow
        self._applied = 0                     # its lookups whose leader events are taken up
        self._step_end = 0                    # where its current step ends
        self._grace = self.prefetch_grace if self.prefetch_grace is not None else 4 * max(self.capacity, 1)

    def reset(self, capacity: int) -> None:
        super().reset(capacity)
        # Six capacities (at least 1024 lookups): about the time a policy's contents take to turn
        # over, so the comparison forgets a past the contents no longer show; with the clipping it
        # is still long enough that close rivals do not hand the lead back and forth.
        self.guard.half_life = float(self.guard_half_life or max(1024, 6 * int(capacity)))
        self.guard.reset(capacity)
        if self.scan is not None:
            self.scan.reset(capacity, self.guard.half_life)
        self._reset_stream()

    # -- the model and the shadows, a batch ahead ---------------------------------
    def _predict(self, x: np.ndarray, ids: np.ndarray, t0: int) -> np.ndarray:
        """The model's predictions for the lookups `ids` with features `x` (1 while untrained)."""
        return self.model.predict(x) if self.model is not None else np.ones(ids.size, dtype=np.float32)

    def prepare(self, ids: np.ndarray, t0: int) -> None:
        """Shadows, features and predictions of the batch `ids` starting at time `t0` (batches in order)."""
        self.prepare_batches([(t0, ids)])

    def prepare_batches(self, batches: Sequence[tuple[int, np.ndarray]]) -> None:
        """:meth:`prepare` for consecutive batches ``(t0, ids)``, in one pass over all their lookups
        (the same shadows, features and, with the same model, predictions as one at a time)."""
        parts = [(int(t0), np.asarray(ids, dtype=np.int64)) for t0, ids in batches]
        if not parts:
            return
        expect = self._next_t
        for t0, ids in parts:
            if ids.ndim != 1:
                raise ValueError(f"the batch at time {t0} must be a 1-D array of row ids, got shape {ids.shape}")
            if t0 != expect:
                raise ValueError(f"prepare() expects the batch at time {expect}, got t0={t0}: prepare each "
                                 "batch once, in the order they are served")
            expect += ids.size
        t0 = parts[0][0]
        ids = parts[0][1] if len(parts) == 1 else np.concatenate([b for _, b in parts])
        with self._shadow_lock:
            try:
                self._prepare_locked(parts, ids, t0)
            finally:
                # Even if a step failed, the shadows or the features may have seen these lookups: the
                # stream goes on after them (drop_prepared() forgets what was not prepared whole).
                self._next_t = t0 + ids.size

    def _prepare_locked(self, parts: list[tuple[int, np.ndarray]], ids: np.ndarray, t0: int) -> None:
        """prepare_batches' work, under the shadows' lock: `ids` are the batches `parts` joined."""
        start = time.thread_time()
        shadows = self.guard.run(ids, t0, only=lambda name: name != "learned")
        mid = time.thread_time()
        # Per batch: a feature counts the row's lookups within its own batch.
        xs = [self.features.batch(b, bt0) for bt0, b in parts]
        x = xs[0] if len(xs) == 1 else np.vstack(xs)
        if self.experts:
            x = np.hstack([x, np.stack([shadows[e].hits for e in self.experts], axis=1).astype(np.float32)])
        p = self._predict(x, ids, t0)
        end = time.thread_time()
        self._order.set_predictions(p, t0)
        shadows["learned"] = self.guard.shadows["learned"].run(ids, t0)
        self.guard_seconds += (mid - start) + (time.thread_time() - end)
        self.model_seconds += end - mid
        self.predicted += ids.size
        lo = 0
        for bt0, b in parts:
            hi = lo + b.size
            cut = {name: ShadowBatch(bt0, sb.hits[lo:hi], sb.evicted[lo:hi]) for name, sb in shadows.items()}
            self._prepared[bt0] = (b, x[lo:hi], p[lo:hi], cut)
            lo = hi

    def drop_prepared(self) -> int:
        """Forget the batches prepared and not served yet (a caller that prepared several and then
        failed part way). The shadows and the features have seen them and keep what they saw, so the
        stream goes on after them: returns the time at which the next batch must start."""
        with self._shadow_lock:
            self._prepared.clear()
            return self._next_t

    def observe(self, ids: np.ndarray, t0: int) -> None:
        if t0 not in self._prepared:
            self.prepare(ids, t0)
        seen, x, p, shadows = self._prepared.pop(t0)
        if seen.size != np.asarray(ids).size:
            raise ValueError(f"the batch at time {t0} was prepared with {seen.size} lookups, served with "
                             f"{np.asarray(ids).size}")
        self.set_predictions(p, t0)
        if self.scan is not None:
            self.scan.batch(seen, t0)
        self._follow(seen, t0, shadows)
        self._hist_ids.append(seen)
        self._hist_x.append(x)
        self._hist_len += seen.size
        while self._hist_len - self._hist_ids[0].size >= self.window:
            self._hist_len -= self._hist_ids.pop(0).size
            self._hist_x.pop(0)
        self._since_train += seen.size
        if self.retrain_every is not None and self.model is not None and self._since_train >= self.retrain_every:
            self.train()

    def train(self) -> dict:
        """Fit the model on the recorded lookups (labels: Belady's next-access outcome over them)."""
        if self.capacity < 1:
            raise RuntimeError("train() needs a capacity: call reset(capacity) and serve some lookups first")
        if self._hist_len == 0:
            raise RuntimeError("train() needs recorded lookups: serve (observe) some batches first")
        start = time.thread_time()
        ids = np.concatenate(self._hist_ids)
        x = np.concatenate(self._hist_x)
        labels = opt_next_hit(ids, self.capacity)
        # The last lookups' next-access outcome lies beyond the record: leave them out.
        keep = max(1, int(ids.size * 0.9))
        if self.retrain_epochs and self.model is not None:
            # Go on from the model in use: its inputs' standardization stays and a few epochs fit it to
            # the recent past (from scratch, every 8,192 lookups, training took 9x as long).
            model = copy.deepcopy(self.model)
            loss = model.fit(x[:keep], labels[:keep], epochs=self.retrain_epochs, seed=self.seed + self.trainings,
                             warm_start=True)
        else:
            model = TinyMLP(x.shape[1], self.hidden, seed=self.seed + self.trainings)
            loss = model.fit(x[:keep], labels[:keep], epochs=self.epochs, seed=self.seed + self.trainings,
                             min_steps=self.train_steps)
        if self.model is None and self.guard_on:
            # Until now the model's order was LRU's (no predictions): its hits over the window say
            # nothing of the model, so it takes the lead back only by beating the best classical one.
            self.guard.hand_lead_to_best_rival()
        self.model = model
        self.trainings += 1
        self._since_train = 0
        spent = time.thread_time() - start
        self.train_seconds += spent
        return {"examples": keep, "positive": float(labels[:keep].mean()), "loss": loss, "seconds": spent}

    # -- following the leader ---------------------------------------------------------
    def _follow(self, ids: np.ndarray, t0: int, shadows: dict[str, ShadowBatch]) -> None:
        """Start serving a batch: its first step's leader (from the steps before it) and its events."""
        self._apply_all()
        if not ids.size:
            return  # nothing to serve: the step going on waits for the next lookups
        # Where the ids stop rising: a user's batch looked up deduplicated and sorted starts there.
        starts = np.empty(ids.size, dtype=bool)
        starts[0] = self._last_id is None or ids[0] <= self._last_id
        np.less_equal(ids[1:], ids[:-1], out=starts[1:])
        self._last_id = int(ids[-1])
        self._batch = (t0, ids, ids.tolist(), shadows, starts)
        self._step(0)

    def _step_end_from(self, at: int, recorded: int) -> tuple[int, bool]:
        """Where the step with `recorded` lookups so far, going on at lookup `at` of the batch, ends:
        (the lookup it ends before, whether it ends there; False: it goes on into the next batch).

        A step is at least `guard_step` lookups long and ends where the ids stop rising (so that
        sorted batches are compared whole: each policy's hits come at a batch's head), or at
        `guard_step_max` lookups."""
        starts = self._batch[4]
        n = starts.size
        first = at + max(self.guard_step - recorded, 0)
        last = at + self.guard_step_max - recorded
        stop = min(last, n)
        if first < stop:
            k = first + int(np.argmax(starts[first:stop]))
            if starts[k]:
                return k, True
        return (last, True) if last <= n else (n, False)

    def _step(self, at: int) -> None:
        """A step begins or goes on at lookup `at` of the batch; a step that begins chooses its leader.
        The lookups up to the step's end in this batch are recorded as served by the leader."""
        t0, ids, id_list, shadows, _ = self._batch
        recorded = self.guard.open_lookups
        end, ends = self._step_end_from(at, recorded)
        if recorded and ends and end == at:  # the open step ended with the last batch
            self.guard.close()
            recorded = 0
            end, ends = self._step_end_from(at, 0)
        leader = self.leader
        if not recorded:
            leader = self.guard.choose() if self.guard_on else "learned"
        if leader != self.leader or self._events is None or self._events[0] != t0:
            if leader != self.leader:
                # The rows held that the new leader did not hold before this lookup.
                rows = [r for r in self._key if r not in self._prefetched]
                with self._shadow_lock:  # the batches the shadows served after this one, if any yet
                    later = [(v[0], v[3][leader]) for k, v in sorted(self._prepared.items()) if k > t0]
                    held = self.guard.shadows[leader].held_before(rows, ids, shadows[leader], at, later)
                # Most recently looked up first: the victims are taken from the end (see victim()).
                out = sorted(((self._key[r][1], r) for r, h in zip(rows, held, strict=True) if not h),
                             reverse=True)
                self._outside = OrderedDict((r, i - len(out)) for i, (_, r) in enumerate(out))
                self._out_parked.clear()  # held rows were all considered: none is left out
                self._out_parked_for = None
                self.leader = leader
            b = shadows[leader]
            self._events = (t0, id_list, b.hits.tolist(), b.evicted.tolist())
        self._applied = at
        self._step_end = end
        self.guard.add(shadows, self.leader, at, end)
        if ends:
            self.guard.close()

    def _apply(self, t: int) -> None:
        """Take up the leader's evictions and entries up to lookup `t` (it serves each lookup first),
        choosing the leader again where a step begins."""
        ev = self._events
        if ev is None:
            return
        t0, ids = ev[0], ev[1]
        if t - t0 < self._applied:
            return  # taken up already (a victim() and then an insert() of the same lookup)
        end = min(t - t0 + 1, len(ids))
        while True:
            upto = min(end, self._step_end)
            _, _, hits, evicted = self._events
            key, outside, pf, parked = self._key, self._outside, self._prefetched, self._out_parked
            for k in range(self._applied, upto):
                v = evicted[k]
                if v >= 0 and v in key and v not in pf:
                    outside.setdefault(v, t0 + k)
                if not hits[k]:
                    outside.pop(ids[k], None)
                    if parked:
                        parked.pop(ids[k], None)
            if upto > self._applied:
                self._applied = upto
            if end <= self._step_end:
                return
            self._step(self._step_end)

    def _apply_all(self) -> None:
        if self._events is not None:
            self._apply(self._events[0] + len(self._events[1]))

    def hit(self, row: int, t: int) -> None:
        self._apply(t)
        self._prefetched.pop(row, None)
        if self.scan is not None:
            self.scan.hit(row, t)
        self._set(row, self.priority(t))

    def insert(self, row: int, t: int, prefetched: bool = False) -> None:
        self._apply(t)
        super().insert(row, t, prefetched)
        if prefetched:
            self._prefetched[row] = t
        elif self.scan is not None:
            self.scan.entered(row, t, self._leader_hit)

    def _leader_hit(self, t: int) -> bool:
        """Whether the leader's shadow hit at lookup `t` of the batch being served."""
        ev = self._events
        return ev is not None and 0 <= t - ev[0] < len(ev[2]) and bool(ev[2][t - ev[0]])

    def victim(self, t: int, pinned: Container[int] = _NO_PIN) -> int:
        self._apply(t)
        if self.scan is not None:
            row = self.scan.victim(pinned, lambda: self._usual_victim(t, pinned))
            if row is not None:
                return row
        return self._usual_victim(t, pinned)

    def _unpark_outside(self) -> None:
        """Put the parked rows back into _outside, in the order the leader dropped them."""
        parked, outside = self._out_parked, self._outside
        if parked:
            # They were the newest when parked: only rows dropped since can be newer.
            first = min(parked.values())
            tail = list(parked.items())
            while outside:
                row, when = outside.popitem()
                if when < first:
                    outside[row] = when
                    break
                tail.append((row, when))
            tail.sort(key=lambda rw: rw[1])
            outside.update(tail)
            parked.clear()
        self._out_parked_for = None

    def _usual_victim(self, t: int, pinned: Container[int]) -> int:
        # Newest first: the row the leader dropped last is the one it values least now; rows held since
        # a change of leader go after it, the least recently looked up first.
        outside = self._outside
        if self._out_parked_for is not pinned:
            self._unpark_outside()
        if isinstance(pinned, frozenset):
            # Pinned rows at the newest end are set aside while the same frozenset comes (see __init__).
            parked = self._out_parked
            while outside:
                row = next(reversed(outside))
                if row not in pinned:
                    return row
                parked[row] = outside.pop(row)
                self._out_parked_for = pinned
        else:
            for row in reversed(outside):
                if row not in pinned:
                    return row
        for row, since in self._prefetched.items():
            if t - since <= self._grace:
                break
            if row not in pinned:
                return row
        return super().victim(t, pinned)

    def victims(self, t: int, k: int, skip: Container[int] = _NO_PIN) -> list[int]:
        # victim()'s order in one pass: the rows the leader dropped (newest first), prefetched rows
        # past their grace, then the model's order.
        self._apply(t)
        self._unpark_outside()
        out = self.scan.victims(k, skip) if self.scan is not None else []
        if out:
            skip = set(out) | (set(skip) if skip is not _NO_PIN else set())
        out += islice((row for row in reversed(self._outside) if row not in skip), k - len(out))
        for row, since in self._prefetched.items():
            if len(out) >= k or t - since <= self._grace:
                break
            if row not in skip:
                out.append(row)
        if len(out) < k:
            chosen = set(out) | (set(skip) if skip is not _NO_PIN else set())
            out += super().victims(t, k - len(out), chosen)
        return out

    def remove(self, row: int) -> None:
        super().remove(row)
        self._outside.pop(row, None)
        self._out_parked.pop(row, None)
        self._prefetched.pop(row, None)
        if self.scan is not None:
            self.scan.removed(row)
