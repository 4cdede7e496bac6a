"""Shadow caches in C (``pymcoll._cachesim``): a policy replayed on row ids at tens of nanoseconds a lookup.

The guard (:mod:`.guard`) runs the model's order and five classical policies
on every lookup; as Python replays they cost microseconds a lookup, in C a
small fraction of one. Each C policy makes exactly the decisions of its Python
reference in :mod:`.policies` (the tests replay both and compare every hit
and eviction), so the Python classes stay the specification and the C ones
the engine.

A policy says whether it has a C engine, and with which parameters, through
``native_config()`` (None: it has none; the guard then replays it in Python).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pymcoll._cachesim import ffi, lib

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


class NativeShadow:
    """One policy's C shadow at a fixed capacity (see the module docstring).

    `config`: a policy's ``native_config()`` (``kind`` and its parameters);
    `capacity`: the fast tier's rows.
    """

    def __init__(self, config: dict, capacity: int) -> None:
        kind = config.get("kind")
        if kind not in KINDS:
            raise ValueError(f"config['kind'] must be one of {sorted(KINDS)}, got {kind!r}")
        c = ffi.new("pmc_shadow_config *")
        c.kind = KINDS[kind]
        c.capacity = int(capacity)
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
        return bool(lib.pmc_shadow_holds(self._handle, int(row)))

    def __len__(self) -> int:
        return int(lib.pmc_shadow_len(self._handle))


def _check(rc: int, msg, what: str) -> None:
    if rc == lib.PMC_CACHESIM_OK:
        return
    text = ffi.string(msg).decode(errors="replace")
    if rc == lib.PMC_CACHESIM_ENOMEM:
        raise MemoryError(f"cache shadow: {text}")
    raise ValueError(f"cache shadow ({what}): {text}")
