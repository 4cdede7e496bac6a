"""The layer rule: pymcoll.algorithms (algorithms/) is built on pymcoll, and
pymcoll never imports it. Every .py file under pymcoll/ is parsed (not
imported) and each import is resolved to the module it names, relative
imports included; ``import``, ``from ... import``, and importlib /
``__import__`` calls with a literal name all count."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pymcoll"
FORBIDDEN = ("pymcoll.algorithms", "algorithms")  # the installed name and the source directory's


def module_name(path: Path) -> str:
    """The dotted name of a file under the repository root (a package's __init__ is the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: Optional[str], level: int, package: str) -> str:
    """The absolute name of ``from <level dots><module> import ...`` inside `package`."""
    if level == 0:
        return module or ""
    base = package.split(".")
    if level - 1 > len(base) - 1:
        raise ValueError(f"relative import beyond the top-level package in {package}")
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(source: str, name: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, the module `name`. For
    ``from X import a``, both X and X.a are given (a may be a submodule)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, package)
            yield node.lineno, base
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__"):
                target = node.args[0].value
                anchor = next((k.value for k in node.keywords if k.arg == "package"), None)
                if target.startswith(".") and isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
                    dots = len(target) - len(target.lstrip("."))
                    target = _resolve(target[dots:] or None, dots, anchor.value)
                yield node.lineno, target


def is_forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def upward_imports(path: Path) -> list[str]:
    """'file:line imports module' for each import of pymcoll.algorithms in the file."""
    name = module_name(path)
    found = imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")
    return [f"{path.relative_to(ROOT)}:{line} imports {mod}" for line, mod in found if is_forbidden(mod)]


def test_pymcoll_never_imports_algorithms() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20, f"only {len(files)} .py files under {PACKAGE}: is this the source tree?"
    bad = [hit for path in files for hit in upward_imports(path)]
    assert not bad, "pymcoll must not import pymcoll.algorithms (algorithms/ is built on it):\n" + "\n".join(bad)


@pytest.mark.parametrize("source, name, is_package", [
    ("import pymcoll.algorithms.dlrm\n", "pymcoll.comm", False),
    ("import algorithms.compression as c\n", "pymcoll.comm", False),
    ("from pymcoll import algorithms\n", "pymcoll.comm", False),
    ("from pymcoll.algorithms.compression import compress\n", "pymcoll.comm", False),
    ("from .algorithms import dlrm\n", "pymcoll.comm", False),
    ("from . import algorithms\n", "pymcoll", True),
    ("from .. import algorithms\n", "pymcoll.cli.bench", False),
    ("from ..algorithms.dlrm import exchange\n", "pymcoll.cli", True),
    ("def f():\n    from ...algorithms import balance\n", "pymcoll.cli.sub.mod", False),
    ("import importlib\nm = importlib.import_module('pymcoll.algorithms.balance')\n", "pymcoll.comm", False),
    ("from importlib import import_module\nm = import_module('.algorithms', package='pymcoll')\n",
     "pymcoll.comm", False),
    ("m = __import__('algorithms.dlrm')\n", "pymcoll.comm", False),
])
def test_every_form_of_the_upward_import_is_caught(source: str, name: str, is_package: bool) -> None:
    assert any(is_forbidden(mod) for _, mod in imported_modules(source, name, is_package)), source


@pytest.mark.parametrize("source, name, is_package", [
    ("import pymcoll.comm\nfrom . import buffers\n", "pymcoll.comm", False),
    ("from .. import errors\nfrom ..trace import analyze\n", "pymcoll.cli.bench", False),
    ("from .algorithmic import x\nimport algorithmsx\n", "pymcoll.comm", False),
    ("from pymcoll import comm as algorithms\n", "pymcoll.torch", False),
])
def test_other_imports_pass(source: str, name: str, is_package: bool) -> None:
    assert not any(is_forbidden(mod) for _, mod in imported_modules(source, name, is_package)), source
