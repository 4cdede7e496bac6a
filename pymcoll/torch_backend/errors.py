"""Failures inside a torch.distributed operation, in the form torch's own backends raise them.

gloo and NCCL report a timeout or a lost peer as ``torch.distributed.DistBackendError`` (a
``RuntimeError``) whose message says "Timed out" or "closed"; code written for them catches
those. The classes here are both that and pymcoll's own error, so ``except RuntimeError``,
``except dist.DistBackendError`` and ``except pymcoll.TimeoutError`` all see the failure.
"""

from __future__ import annotations

import torch.distributed as dist

import pymcoll.errors as errors


class BackendTimeoutError(errors.TimeoutError, dist.DistBackendError):
    """A pymcoll deadline passed inside a torch.distributed operation of the "pymcoll" backend."""


class BackendPeerFailedError(errors.PeerFailedError, BackendTimeoutError):
    """A peer process of the group died, or gave up, while this rank waited for it."""


class BackendCommBrokenError(errors.CommBrokenError, dist.DistBackendError):
    """The group's communicator failed earlier; its operations cannot run any more."""


# pymcoll's error, the torch form of it, and what torch's backends say for it; subclasses first.
_FORMS = ((errors.PeerFailedError, BackendPeerFailedError, "Connection closed"),
          (errors.TimeoutError, BackendTimeoutError, "Timed out"),
          (errors.CommBrokenError, BackendCommBrokenError, "Connection closed"))


def as_torch_error(op: str, exc: BaseException) -> BaseException:
    """`exc` as torch's backends raise it, when it is a pymcoll failure of `op` (else `exc` itself):
    the message says what torch's backends say ("Timed out", "Connection closed") and keeps
    pymcoll's, and the original is the new exception's cause."""
    if isinstance(exc, (BackendTimeoutError, BackendCommBrokenError)):
        return exc
    for mine, cls, words in _FORMS:
        if isinstance(exc, mine):
            new = cls(f"pymcoll backend, {op}: {words} ({exc})")
            new.__cause__ = exc
            return new
    return exc
