"""FTAR's Python side is the package pymcoll.ftar; the modules it replaced
still import. pymcoll.ftar_state, pymcoll.ftar_training and
pymcoll.cli.ftar_coordinator.write_addr_file warn DeprecationWarning and give
the very objects of their new homes; pymcoll.ftar keeps every name it had as
a module, and nothing in the package warns."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# (former module, its replacement, the names it re-exports)
MODULES = [
    ("pymcoll.ftar_state", "pymcoll.ftar.state",
     ["encode_state", "decode_state", "model_state", "load_model_state", "state_hash", "MAGIC", "VERSION"]),
    ("pymcoll.ftar_training", "pymcoll.ftar.training", ["FaultTolerantTrainer", "StepReport"]),
]

# What `pymcoll.ftar` exported when it was one module.
FORMER_FTAR_ALL = ["Status", "StepInfo", "AllreduceResult", "Member", "FtarError", "resolve_token", "parse_address",
                   "TOKEN_ENV", "TOKEN_FILE_ENV", "FAULT_ENV"]


@pytest.mark.parametrize("old,new,names", MODULES, ids=[m[0] for m in MODULES])
def test_former_module_warns_and_reexports(old: str, new: str, names: list[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = importlib.import_module(new)
    monkeypatch.delitem(sys.modules, old, raising=False)  # a module warns when it runs: run it here
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {new}") as record:
        exec(compile(f"import {old}", __file__, "exec"), {})  # an import statement in this file
    assert record[0].filename == __file__  # stacklevel=2 points at the importing line
    shim = sys.modules[old]
    assert sorted(shim.__all__) == sorted(names)
    for name in names:
        assert getattr(shim, name) is getattr(target, name), f"{old}.{name} is not {new}.{name}"


def test_moved_cli_helper_warns_and_is_the_same_object() -> None:
    import pymcoll.cli.ftar_coordinator as cli
    from pymcoll.ftar.coordinator import write_addr_file

    with pytest.warns(DeprecationWarning, match="moved to pymcoll.ftar.coordinator.write_addr_file"):
        old = cli.write_addr_file
    assert old is write_addr_file
    with pytest.warns(DeprecationWarning):
        from pymcoll.cli.ftar_coordinator import write_addr_file as imported
    assert imported is write_addr_file
    with pytest.raises(AttributeError, match="no_such_name"):
        cli.no_such_name


def test_package_keeps_the_former_module_names() -> None:
    import pymcoll.ftar as ftar
    from pymcoll.ftar import address, member, state, training

    assert set(FORMER_FTAR_ALL) <= set(ftar.__all__)
    assert all(hasattr(ftar, name) for name in ftar.__all__)
    assert ftar.Member is member.Member and ftar.Status is member.Status and ftar.FAULT_ENV == member.FAULT_ENV
    assert ftar.resolve_token is address.resolve_token and ftar.TOKEN_ENV == "PYMCOLL_FTAR_TOKEN"
    assert ftar.state_hash is state.state_hash and ftar.FaultTolerantTrainer is training.FaultTolerantTrainer


def test_the_new_modules_raise_no_deprecation_warning(tmp_path) -> None:
    modules = ["pymcoll.ftar", "pymcoll.ftar.member", "pymcoll.ftar.address", "pymcoll.ftar.coordinator",
               "pymcoll.ftar.local_cluster", "pymcoll.ftar.state", "pymcoll.ftar.training",
               "pymcoll.cli.ftar_coordinator", "pymcoll.cli"]
    code = "import importlib\nfor m in %r: importlib.import_module(m)" % (modules,)
    proc = subprocess.run([sys.executable, "-P", "-W", "error::DeprecationWarning", "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
