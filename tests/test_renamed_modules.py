"""The modules and classes renamed so that "codec" names the C codec only
still work under their former names: importing a former module warns
DeprecationWarning and gives the very objects of the new one, and so does a
former class name read from the new module. The new names import without a
warning."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys

import pytest

# (former module, its replacement, {former name: new name} of what it re-exports)
MODULES = [
    ("pymcoll.algorithms.compression.codec", "pymcoll.algorithms.compression.error_bounded",
     {n: n for n in ("STAGES", "CodecError", "CompressedInfo", "compress", "decompress", "inspect")}),
    ("pymcoll.algorithms.compression.exchange_codec", "pymcoll.algorithms.compression.exchange_compressor",
     {"ErrorBoundedCodec": "ExchangeCompressor", "CodecStats": "CompressorStats",
      "ExchangeCompressor": "ExchangeCompressor", "CompressorStats": "CompressorStats",
      "RAW": "RAW", "COMPRESSED": "COMPRESSED", "COPY_Bps": "COPY_Bps"}),
    ("pymcoll.algorithms.dlrm.codec", "pymcoll.algorithms.dlrm.block_codec",
     {"Codec": "BlockCodec", "BlockCodec": "BlockCodec", "BlockInfo": "BlockInfo",
      "FORWARD": "FORWARD", "BACKWARD": "BACKWARD"}),
]

# (new module, former class name, new class name): aliases read from the new module
CLASS_ALIASES = [
    ("pymcoll.algorithms.dlrm.block_codec", "Codec", "BlockCodec"),
    ("pymcoll.algorithms.compression.exchange_compressor", "ErrorBoundedCodec", "ExchangeCompressor"),
    ("pymcoll.algorithms.compression.exchange_compressor", "CodecStats", "CompressorStats"),
]

NEEDS_TORCH = ("exchange", "dlrm")


def _skip_without_torch(module: str) -> None:
    if any(part in module for part in NEEDS_TORCH):
        pytest.importorskip("torch")


@pytest.mark.parametrize("old, new, names", MODULES, ids=[m[0].rsplit(".", 2)[-2] + "." + m[0].rsplit(".", 1)[-1]
                                                         for m in MODULES])
def test_former_module_warns_and_reexports(old: str, new: str, names: dict[str, str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _skip_without_torch(new)
    target = importlib.import_module(new)
    # A module warns when it runs: drop any earlier import of the former one so that it runs here.
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{re.escape(old)} is deprecated.*{new.rsplit('.', 1)[-1]}"):
        shim = importlib.import_module(old)
    for former, current in names.items():
        assert getattr(shim, former) is getattr(target, current), f"{old}.{former} is not {new}.{current}"
    assert sorted(shim.__all__) == sorted(names)


@pytest.mark.parametrize("module, former, current", CLASS_ALIASES, ids=[a[1] for a in CLASS_ALIASES])
def test_former_class_name_warns_and_is_the_new_class(module: str, former: str, current: str) -> None:
    _skip_without_torch(module)
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{former} is deprecated; use {current}"):
        alias = getattr(mod, former)
    assert alias is getattr(mod, current)
    assert former not in getattr(mod, "__all__", ())
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        getattr(mod, "NoSuchName")


NEW_MODULES = ["pymcoll.algorithms.compression", "pymcoll.algorithms.compression.error_bounded",
               "pymcoll.algorithms.compression.baselines", "pymcoll.algorithms.compression.exchange_compressor",
               "pymcoll.algorithms.dlrm.block_codec", "pymcoll.algorithms.dlrm.exchange",
               "pymcoll.algorithms.dlrm.embedding"]


def test_new_names_import_without_warning() -> None:
    # A fresh interpreter: importing them again here would make second copies of their classes.
    modules = [m for m in NEW_MODULES if importlib.util.find_spec("torch") or not any(p in m for p in NEEDS_TORCH)]
    program = ("import importlib, warnings\n"
               "warnings.filterwarnings('error', message=r'pymcoll\\.algorithms', category=DeprecationWarning)\n"
               f"for m in {modules!r}:\n"
               "    importlib.import_module(m)\n")
    proc = subprocess.run([sys.executable, "-P", "-c", program], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
