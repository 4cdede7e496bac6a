"""Where the preload library is found: beside the package, or beside the core in an editable install."""

from __future__ import annotations

import pytest

from pymcoll import preload


def test_library_is_found():
    path = preload.library_path()
    assert path.is_file() and path.name == preload.LIBRARY_NAME and path.is_absolute()


def test_missing_library_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(preload, "LIBRARY_NAME", "libpymcoll_pmpi_absent.so")
    with pytest.raises(FileNotFoundError, match=r"libpymcoll_pmpi_absent\.so is missing.*python -m pip install \."):
        preload.library_path()
