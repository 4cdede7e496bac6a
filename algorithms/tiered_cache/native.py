"""The tiered cache's C engine (``pymcoll._cachesim``): shadow caches, the model's features and its predictions.

The learned policy pays, per lookup, for its features, its model and the
guard's six shadow caches (the model's order and five classical policies).
In numpy and Python those cost microseconds a lookup; in C a fraction of
one. Each C part is held to a Python reference kept as the specification:

* :class:`NativeShadow`: a replacement policy replayed on row ids; it makes
  exactly the decisions of its class in :mod:`.policies` (the tests replay
  both and compare every hit and eviction). A policy says whether it has a
  C engine, and with which parameters, through ``native_config()`` (None:
  it has none; the guard then replays it in Python).
* :class:`NativeFeatures`: the per-lookup features of :mod:`.features`,
  computed lookup by lookup (equal to the numpy batch computation up to
  rounding; the tests compare both with a sequential definition).
* :func:`mlp_predict`: :class:`~.model.TinyMLP`'s forward pass (equal to
  numpy's up to the order of float32 sums).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pymcoll._cachesim import ffi, lib

#: The largest table whose rows a shadow indexes by an array (8 bytes a row per index, 1-5 indexes a
#: policy); larger tables, or ids without a known bound, go through hash tables (about twice the cost).
DENSE_ROWS_LIMIT = 1 << 20

#: The kinds of C shadow, by the name ``native_config()`` gives.
KINDS = {"lru": lib.PMC_SHADOW_LRU, "lfu": lib.PMC_SHADOW_LFU, "arc": lib.PMC_SHADOW_ARC,
         "lecar": lib.PMC_SHADOW_LECAR, "tinylfu": lib.PMC_SHADOW_TINYLFU, "priority": lib.PMC_SHADOW_PRIORITY}


def seed_words(seed: int) -> Optional[list[int]]:
    """The absolute value of `seed` in 32-bit words, least significant first, as random.Random splits it.

    None when the seed is not an integer or needs more words than the C
    generator takes (the policy then has no C engine).
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        return None
    n = abs(seed)
    words = [(n >> (32 * i)) & 0xFFFFFFFF for i in range(max(1, (n.bit_length() + 31) // 32))]
    return words if len(words) <= lib.PMC_SHADOW_SEED_WORDS else None


class NativeFeatures:
    """Per-lookup features in C (see :class:`~.features.AccessFeatures`, which uses it by default).

    `rows`: the table's rows (ids are below it); `scales`: the decayed
    counts' time scales, in lookups; `sentinel`: the value of a gap that
    does not exist.
    """

    def __init__(self, rows: int, scales: tuple[float, ...], sentinel: float) -> None:
        scales = tuple(float(s) for s in scales)
        out = ffi.new("pmc_features **")
        msg = ffi.new("char[]", lib.PMC_CACHESIM_MESSAGE_BYTES)
        _check(lib.pmc_features_new(int(rows), ffi.new("double[]", scales or [0.0]), len(scales), float(sentinel),
                                    out, msg, len(msg)), msg, "features")
        self.n_features = lib.PMC_FEATURES_BASE + len(scales)
        self._msg = msg
        self._handle = ffi.gc(out[0], lib.pmc_features_free)

    def batch(self, ids: np.ndarray, t0: int) -> np.ndarray:
        """Features (len(ids) x n_features, float32) of the lookups `ids` at times t0, t0+1, ...; the state
        advances past them (a batch with a row out of range raises ValueError and changes nothing)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = np.empty((ids.size, self.n_features), dtype=np.float32)
        rc = lib.pmc_features_batch(self._handle, ffi.cast("const int64_t *", ffi.from_buffer(ids)), ids.size,
                                    int(t0), ffi.cast("float *", ffi.from_buffer(out)), self._msg, len(self._msg))
        _check(rc, self._msg, "ids")
        return out


def mlp_predict(x: np.ndarray, weights: list[np.ndarray], biases: list[np.ndarray], mean: np.ndarray,
                scale: np.ndarray, params: Optional[np.ndarray] = None) -> np.ndarray:
    """P(label 1) of each row of `x` under the perceptron with these layers (ReLU between, logistic last).

    `params`: the layers packed as :func:`pack_mlp` packs them, when the
    caller keeps them packed (else packed here).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    sizes = [int(weights[0].shape[0])] + [int(w.shape[1]) for w in weights]
    if x.ndim != 2 or x.shape[1] != sizes[0]:
        raise ValueError(f"inputs must have shape (n, {sizes[0]}), got {x.shape}")
    if params is None:
        params = pack_mlp(weights, biases)
    mean = np.ascontiguousarray(mean, dtype=np.float32)
    scale = np.ascontiguousarray(scale, dtype=np.float32)
    out = np.empty(x.shape[0], dtype=np.float32)
    msg = ffi.new("char[]", lib.PMC_CACHESIM_MESSAGE_BYTES)
    rc = lib.pmc_mlp_predict(ffi.cast("const float *", ffi.from_buffer(x)), x.shape[0], len(weights),
                             ffi.new("uint32_t[]", sizes), ffi.cast("const float *", ffi.from_buffer(params)),
                             ffi.cast("const float *", ffi.from_buffer(mean)),
                             ffi.cast("const float *", ffi.from_buffer(scale)),
                             ffi.cast("float *", ffi.from_buffer(out)), msg, len(msg))
    _check(rc, msg, "model")
    return out


def pack_mlp(weights: list[np.ndarray], biases: list[np.ndarray]) -> np.ndarray:
    """The layers in one float32 array: per layer its weights (in x out, row-major), then its biases."""
    return np.concatenate([a for w, b in zip(weights, biases, strict=True)
                           for a in (np.ascontiguousarray(w, np.float32).ravel(), np.asarray(b, np.float32))])


class NativeShadow:
    """One policy's C shadow at a fixed capacity (see the module docstring).

    `config`: a policy's ``native_config()`` (``kind`` and its parameters);
    `capacity`: the fast tier's rows; `rows`: when given, every id is below
    it (others raise ValueError) and, up to :data:`DENSE_ROWS_LIMIT`, rows
    are indexed by arrays rather than hashed.
    """

    def __init__(self, config: dict, capacity: int, rows: Optional[int] = None) -> None:
        kind = config.get("kind")
        if kind not in KINDS:
            raise ValueError(f"config['kind'] must be one of {sorted(KINDS)}, got {kind!r}")
        c = ffi.new("pmc_shadow_config *")
        c.kind = KINDS[kind]
        c.capacity = int(capacity)
        if rows is not None:
            if int(rows) < 1:
                raise ValueError(f"rows must be at least 1 (the table's rows) or None, got {rows}")
            c.rows = int(rows) if int(rows) <= DENSE_ROWS_LIMIT else 0
        self.rows = int(rows) if rows is not None else None
        # The C engine checks the bound itself when it indexes by arrays; beyond that only here.
        self._unchecked_bound = self.rows if self.rows is not None and self.rows > DENSE_ROWS_LIMIT else None
        if kind == "lecar":
            words = config["seed_words"]
            c.learning_rate = float(config["learning_rate"])
            c.discount = float(config["discount"])
            c.seed_len = len(words)
            for i, w in enumerate(words[:lib.PMC_SHADOW_SEED_WORDS]):
                c.seed_words[i] = int(w)
        elif kind == "tinylfu":
            c.window_rows = int(config["window_rows"])
            c.sample = int(config["sample"])
        out = ffi.new("pmc_shadow **")
        msg = ffi.new("char[]", lib.PMC_CACHESIM_MESSAGE_BYTES)
        _check(lib.pmc_shadow_new(c, out, msg, len(msg)), msg, "shadow")
        self.kind = kind
        self.capacity = int(capacity)
        self._msg = msg
        self._handle = ffi.gc(out[0], lib.pmc_shadow_free)
        self._broken = False

    def run(self, ids: np.ndarray, t0: int, offsets: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """Serve the lookups `ids` at times t0, t0+1, ...; per lookup, a hit or not and the row evicted (-1: none).

        `offsets` (float64, one per lookup) is needed by the "priority" kind
        only: a row looked up at t ranks t + offset. A batch with a negative
        row raises ValueError and leaves the shadow as it was.
        """
        if self._broken:
            raise RuntimeError("this cache shadow ran out of memory mid-batch and its state is lost: "
                               "make a new one (Shadow.reset does)")
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        n = ids.size
        bound = self._unchecked_bound
        if bound is not None and n and int(ids.max()) >= bound:
            k = int(np.argmax(ids >= bound))
            raise ValueError(f"cache shadow (ids): ids[{k}] = {int(ids[k])}: rows must be in [0, {bound})")
        hits = np.zeros(n, dtype=np.uint8)
        evicted = np.empty(n, dtype=np.int64)
        off = ffi.NULL
        if self.kind == "priority":
            if offsets is None:
                raise ValueError("offsets is required by the priority shadow (one float per lookup)")
            offsets = np.ascontiguousarray(offsets, dtype=np.float64)
            if offsets.size != n:
                raise ValueError(f"offsets has {offsets.size} values for {n} lookups: give one per lookup")
            off = ffi.cast("const double *", ffi.from_buffer(offsets))
        rc = lib.pmc_shadow_run(self._handle, ffi.cast("const int64_t *", ffi.from_buffer(ids)), n, int(t0), off,
                                ffi.cast("uint8_t *", ffi.from_buffer(hits)),
                                ffi.cast("int64_t *", ffi.from_buffer(evicted)), self._msg, len(self._msg))
        self._broken = rc == lib.PMC_CACHESIM_ENOMEM
        _check(rc, self._msg, "ids")
        return hits.view(bool), evicted

    def holds(self, row: int) -> bool:
        """Whether the shadow holds `row` now."""
        row = int(row)
        if self.rows is not None and row >= self.rows:
            return False
        return bool(lib.pmc_shadow_holds(self._handle, row))

    def __len__(self) -> int:
        return int(lib.pmc_shadow_len(self._handle))


def _check(rc: int, msg, what: str) -> None:
    if rc == lib.PMC_CACHESIM_OK:
        return
    text = ffi.string(msg).decode(errors="replace")
    if rc == lib.PMC_CACHESIM_ENOMEM:
        raise MemoryError(f"cache shadow: {text}")
    raise ValueError(f"cache shadow ({what}): {text}")
