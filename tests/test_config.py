"""Option parsing and the build/runtime MPI check (no MPI launch needed)."""

from __future__ import annotations

import pytest

from pymcoll import _native, config


def test_sizes_parse_with_suffixes() -> None:
    assert config.parse_bytes("4M", "X") == 4 << 20
    assert config.parse_bytes("64k", "X") == 64 << 10
    assert config.parse_bytes("1GiB", "X") == 1 << 30
    assert config.parse_bytes("4096", "X") == 4096


@pytest.mark.parametrize("bad", ["", "lots", "-4M", "0"])
def test_bad_size_names_the_variable(bad: str) -> None:
    with pytest.raises(ValueError, match="PYMCOLL_SHM_SIZE"):
        config.parse_bytes(bad, "PYMCOLL_SHM_SIZE")


def test_empty_environment_value_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMCOLL_NODE_SIZE", "")
    assert config.value("PYMCOLL_NODE_SIZE") is None
    monkeypatch.setenv("PYMCOLL_NODE_SIZE", "3")
    assert config.value("PYMCOLL_NODE_SIZE") == 3
    assert config.value("PYMCOLL_NODE_SIZE", 5) == 5  # keyword wins


@pytest.mark.parametrize("name,bad", [("PYMCOLL_TIMEOUT", "soon"), ("PYMCOLL_TIMEOUT", "-1"),
                                      ("PYMCOLL_NODE_SIZE", "0"), ("PYMCOLL_SHM", "maybe"),
                                      ("PYMCOLL_WAIT", "spin"), ("PYMCOLL_STREAM_MIN", "always"),
                                      ("PYMCOLL_CELL_MOVSB_MIN", "large"), ("PYMCOLL_HUGE_PAGES", "always")])
def test_bad_environment_values_raise_naming_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, bad: str) -> None:
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=name):
        config.value(name)


def test_huge_pages_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.value("PYMCOLL_HUGE_PAGES") == "auto"
    monkeypatch.setenv("PYMCOLL_HUGE_PAGES", " Off ")
    assert config.value("PYMCOLL_HUGE_PAGES") == "off"
    monkeypatch.setenv("PYMCOLL_HUGE_PAGES", "never")
    with pytest.raises(ValueError, match="PYMCOLL_HUGE_PAGES='never': expected 'auto'"):
        config.value("PYMCOLL_HUGE_PAGES")


def test_wait_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.value("PYMCOLL_WAIT") == "auto"
    monkeypatch.setenv("PYMCOLL_WAIT", " Sleep ")
    assert config.value("PYMCOLL_WAIT") == "sleep"
    assert config.value("PYMCOLL_WAIT", "auto") == "auto"  # the keyword wins


@pytest.mark.parametrize("name,size", [("PYMCOLL_STREAM_MIN", "4M"), ("PYMCOLL_CELL_MOVSB_MIN", "1536")])
def test_copy_thresholds_take_auto_a_size_or_off(monkeypatch: pytest.MonkeyPatch, name: str, size: str) -> None:
    assert config.value(name) == "auto"
    monkeypatch.setenv(name, "Auto")
    assert config.value(name) == "auto"
    monkeypatch.setenv(name, size)
    assert config.value(name) == config.parse_bytes(size, name)
    monkeypatch.setenv(name, " OFF ")
    assert config.value(name) == "off"


def test_mpi_family_detection() -> None:
    assert _native._family("MPICH 5.0.2") == "MPICH"
    assert _native._family("MPICH Version:      4.0") == "MPICH"
    assert _native._family("Open MPI v5.0.8, package: Open MPI") == "Open MPI"
    assert _native._family("Open MPI 4.1.4") != _native._family("MPICH 4.0")
    assert _native._family(_native.BUILD_MPI) == _native._family(_native.RUNTIME_MPI)


def test_rebuild_hint_names_both_routes() -> None:
    assert ".[mpich]" in _native.REBUILD_HINT and "--no-build-isolation" in _native.REBUILD_HINT
