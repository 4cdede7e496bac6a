"""``python -m pymcoll``: the command-line entry points (``info``, ``bench``)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
