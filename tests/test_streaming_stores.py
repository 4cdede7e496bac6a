"""The size from which a rank's own-block and shared-heap copies use streaming stores."""

from __future__ import annotations

import glob
import os

import pytest

from pymcoll import config


def _llc_from_sysfs() -> int:
    """The largest cache level of CPU 0 as sysfs gives it, in bytes; 0 if absent."""
    best = (0, 0)
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "level")) as fh:
                level = int(fh.read())
            with open(os.path.join(index, "size")) as fh:
                text = fh.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        size = int(text.rstrip("KMG")) * scale
        best = max(best, (level, size))
    return best[1]


def test_default_follows_the_last_level_cache_and_the_ranks() -> None:
    from pymcoll import stream_min

    llc = _llc_from_sysfs()
    for ranks in (1, 2, 3, 4, 8, 64):
        assert stream_min(ranks) == max(1 << 20, llc // (2 * ranks)), ranks
    # More ranks share the cache: the threshold never rises with them, and never drops below 1 MiB
    # (which hosts with caches of hundreds of MiB reach only with thousands of ranks).
    values = [stream_min(n) for n in range(1, 33)]
    assert values == sorted(values, reverse=True) and min(values) == max(1 << 20, llc // 64)
    assert stream_min(4096) == max(1 << 20, llc // 8192)


def test_bad_local_ranks_name_themselves() -> None:
    from pymcoll import stream_min

    with pytest.raises(ValueError, match="local_ranks=0"):
        stream_min(0)
    with pytest.raises(ValueError, match="local_ranks='2'"):
        stream_min("2")  # type: ignore[arg-type]


def test_what_a_new_communicator_would_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from pymcoll.tuning import stream_min, stream_min_now

    monkeypatch.delenv("PYMCOLL_STREAM_MIN", raising=False)
    assert config.value("PYMCOLL_STREAM_MIN") == "auto"
    assert stream_min_now(2) == stream_min(2)
    monkeypatch.setenv("PYMCOLL_STREAM_MIN", "4M")
    assert stream_min_now(2) == stream_min_now(8) == 4 << 20
    monkeypatch.setenv("PYMCOLL_STREAM_MIN", "off")
    assert stream_min_now(2) is None
    monkeypatch.setenv("PYMCOLL_STREAM_MIN", "soon")
    with pytest.raises(ValueError, match="PYMCOLL_STREAM_MIN='soon'.*'auto'"):
        stream_min_now(2)
