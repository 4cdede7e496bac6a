"""The data-path crossovers the C core uses within a node when no option overrides them."""

from __future__ import annotations

from typing import Optional

from . import config


def single_copy_min(collective: str, local_ranks: int) -> int:
    """Smallest block in bytes that `collective` moves by single copy (CMA or
    the shared heap) instead of copy-in/copy-out, on a node of `local_ranks`
    ranks, when ``PYMCOLL_CMA_MIN`` is unset (``auto``); 0 where a collective
    never takes single copy (Barrier, Allreduce, Reduce; Scan and Exscan from
    4 local ranks, where the cells win at every size).

    Args:
        collective: an mpi4py method name such as ``"Bcast"`` or ``"Scatterv"``.
        local_ranks: ranks on the node (at least 1).
    """
    from ._native import lib

    if collective not in config.COLLECTIVES:
        raise ValueError(f"collective={collective!r}: expected one of {', '.join(config.COLLECTIVES)}")
    if not isinstance(local_ranks, int) or local_ranks < 1:
        raise ValueError(f"local_ranks={local_ranks!r}: expected an int >= 1")
    return int(lib.pmc_single_copy_min_default(config.COLLECTIVES.index(collective) + 1, local_ranks))


def single_copy_table(local_ranks: int) -> dict[str, int]:
    """:func:`single_copy_min` of every collective that has single copy, by name."""
    table = {c: single_copy_min(c, local_ranks) for c in config.COLLECTIVES}
    return {c: v for c, v in table.items() if v}


def stream_min(local_ranks: int) -> int:
    """Smallest copy in bytes of a rank's own block (single copy) or of a
    block through the shared heap that is written with streaming stores, on
    a node of `local_ranks` ranks, when ``PYMCOLL_STREAM_MIN`` is unset
    (``auto``): this machine's last-level cache over twice the ranks, at
    least 1 MiB.

    Args:
        local_ranks: ranks on the node (at least 1).
    """
    from ._native import lib

    if not isinstance(local_ranks, int) or local_ranks < 1:
        raise ValueError(f"local_ranks={local_ranks!r}: expected an int >= 1")
    return int(lib.pmc_stream_min_default(local_ranks))


def stream_min_now(local_ranks: int) -> Optional[int]:
    """The streaming threshold a communicator created now would use on a node
    of `local_ranks` ranks: ``PYMCOLL_STREAM_MIN`` when set, else
    :func:`stream_min`; None when streaming is off."""
    value = config.value("PYMCOLL_STREAM_MIN")
    if value == "off":
        return None
    return stream_min(local_ranks) if value == "auto" else int(value)


def single_copy_min_now(collective: str, local_ranks: int) -> int:
    """The crossover a communicator created now would use: ``PYMCOLL_CMA_MIN``
    when set, for every collective that has a single-copy path (those with a
    crossover at 2 ranks), else :func:`single_copy_min`; 0 where it never
    takes single copy."""
    value = config.value("PYMCOLL_CMA_MIN")
    if value == "auto":
        return single_copy_min(collective, local_ranks)
    return int(value) if single_copy_min(collective, 2) else 0
