"""Former home of :mod:`pymcoll.ftar.training` (deprecated): importing it warns and gives the same objects."""

from __future__ import annotations

import warnings

from .ftar.training import FaultTolerantTrainer, StepReport

__all__ = ["FaultTolerantTrainer", "StepReport"]

warnings.warn("pymcoll.ftar_training is deprecated: import pymcoll.ftar.training (or these names from "
              "pymcoll.ftar)", DeprecationWarning, stacklevel=2)
