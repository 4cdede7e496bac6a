"""Former home of :mod:`pymcoll.ftar.state` (deprecated): importing it warns and gives the same objects."""

from __future__ import annotations

import warnings

from .ftar.state import MAGIC, VERSION, decode_state, encode_state, load_model_state, model_state, state_hash

__all__ = ["encode_state", "decode_state", "model_state", "load_model_state", "state_hash", "MAGIC", "VERSION"]

warnings.warn("pymcoll.ftar_state is deprecated: import pymcoll.ftar.state (or these names from pymcoll.ftar)",
              DeprecationWarning, stacklevel=2)
