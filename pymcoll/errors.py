"""Exceptions raised by pymcoll."""

from __future__ import annotations

import builtins


class Error(Exception):
    """Base class of every pymcoll error."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - mirrors the built-in on purpose
    """A collective did not complete: a local rank did not arrive before the deadline.

    The message names the collective, its sequence number on the communicator and
    the local ranks that did not arrive. The communicator is broken afterwards:
    further collectives raise :class:`CommBrokenError`; ``Free()`` still works.
    """


class PeerFailedError(TimeoutError):
    """A local peer process died, or gave up, while this rank waited for it."""


class CommBrokenError(Error):
    """The communicator cannot run collectives after an earlier failure."""


class SegmentError(Error):
    """The node segment could not be created or mapped."""
