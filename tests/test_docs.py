"""The documentation holds together: links resolve, named paths exist, the site builds.

Every relative link in the repository's Markdown files must reach a file or folder, and a
``#anchor`` must name a heading of its target by GitHub's slug rule (which the site's
``myst_heading_anchors`` follows). Every repository path named in backticks in the README,
``docs/`` and ``perf/`` pages must exist. With Sphinx and myst-parser installed (the ``docs``
extra), the site must build with warnings as errors.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A path in backticks is checked when its first part is one of these (from the repository root),
# or `results/` / `c/` inside perf/ (from perf/).
TOP_LEVEL = ("native", "pymcoll", "algorithms", "tests", "perf", "examples", "docs", ".ci")
PERF_LOCAL = ("results", "c", "studies")


def markdown_files() -> list[Path]:
    """The repository's Markdown files: tracked ones and new ones git does not ignore."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                             cwd=ROOT, capture_output=True, text=True, check=True, timeout=60).stdout
        names = sorted({line for line in out.splitlines() if line})
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist)
        names = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.md")
                       if not {".venv", "build", "node_modules"} & set(p.relative_to(ROOT).parts))
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def prose(text: str) -> str:
    """`text` without fenced code blocks (their lines blanked, so line numbers stay)."""
    lines, fence = [], None
    for line in text.split("\n"):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            lines.append("")
        elif fence is not None:
            if stripped.startswith(fence):
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def without_inline_code(text: str) -> str:
    return re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group(0)), text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text lowercased, punctuation other than '-' and
    '_' dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", text)  # emphasis markers
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """The heading anchors of a Markdown file (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")).split("\n"):
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


LINK = re.compile(r"(?<!\\)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every inline and reference-style link outside code."""
    body = without_inline_code(prose(text))
    found = []
    for pattern in (LINK, REFERENCE):
        for m in pattern.finditer(body):
            found.append((body.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


def link_problem(source: Path, target: str) -> str | None:
    """Why `target`, a link in `source`, does not resolve (None when it does)."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto: ...: not fetched
        return None
    path_part, _, anchor = target.partition("#")
    dest = source if not path_part else (source.parent / path_part).resolve()
    if not dest.exists():
        return f"{path_part}: no such file"
    if ROOT in source.parents and ROOT not in dest.parents and dest != ROOT:
        return f"{path_part}: outside the repository"
    if anchor:
        if dest.suffix != ".md" or not dest.is_file():
            return f"#{anchor}: the target is not a Markdown file"
        if anchor not in anchors(dest):
            return f"#{anchor}: no such heading in {shown(dest)}"
    return None


def expand(pattern: str) -> list[str]:
    """Brace alternatives expanded: `a.{json,png}` -> a.json, a.png."""
    pieces = re.split(r"(\{[^{}]*\})", pattern)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in pieces]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(text: str) -> list[tuple[int, str]]:
    """(line, text) of every backticked span outside code blocks with no space and a '/' in it."""
    body = prose(text)
    return [(body.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"(?<!`)`([^`\s]+)`(?!`)", body) if "/" in m.group(1)]


def path_problem(source: Path, span: str) -> str | None:
    """Why a backticked path in `source` names nothing in the repository (None when it does,
    or when it is not a repository path)."""
    if re.search(r"[<>=$]", span) or "://" in span:
        return None
    span = span.rstrip(".,:;")
    first = span.split("/", 1)[0]
    in_perf = ROOT / "perf" in source.parents
    if first in TOP_LEVEL:
        base = ROOT
    elif in_perf and first in PERF_LOCAL:
        base = ROOT / "perf"
    else:
        return None
    missing = []
    for candidate in expand(span):
        if any(ch in candidate for ch in "*?["):
            if not glob.glob(str(base / candidate)):
                missing.append(candidate)
        elif not (base / candidate).exists():
            missing.append(candidate)
    return f"{', '.join(missing)}: no such path" if missing else None


def checked_for_paths(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return rel == Path("README.md") or rel.parts[0] in ("docs", "perf")


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def link_failures(files: list[Path]) -> list[str]:
    failures = []
    for md in files:
        for line, target in links(md.read_text(encoding="utf-8")):
            why = link_problem(md, target)
            if why:
                failures.append(f"{shown(md)}:{line}: ({target}) {why}")
    return failures


def path_failures(files: list[Path]) -> list[str]:
    failures = []
    for md in files:
        if not checked_for_paths(md):
            continue
        for line, span in named_paths(md.read_text(encoding="utf-8")):
            why = path_problem(md, span)
            if why:
                failures.append(f"{shown(md)}:{line}: `{span}` {why}")
    return failures


def test_markdown_files_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in markdown_files()}
    assert {"README.md", "perf/README.md", "docs/index.md"} <= names


def test_every_relative_link_resolves() -> None:
    failures = link_failures(markdown_files())
    assert not failures, "broken links:\n" + "\n".join(failures)


def test_every_named_repository_path_exists() -> None:
    failures = path_failures(markdown_files())
    assert not failures, "paths named in backticks that do not exist:\n" + "\n".join(failures)


def test_the_checks_catch_what_they_should(tmp_path: Path) -> None:
    """A planted broken link, wrong anchor and missing path are reported; good ones are not."""
    planted = tmp_path / "planted.md"
    planted.write_text("# Title\n\n## A section\n\n[ok](planted.md#a-section) [self](#title)\n"
                       "[broken](no_such_page.md) [anchor](planted.md#no-such-heading)\n"
                       "`[in code](ignored.md)`\n\n```\n[in a block](ignored.md)\n```\n"
                       "[web](https://example.org/anything)\n", encoding="utf-8")
    failures = link_failures([planted])
    assert len(failures) == 2, failures
    assert "(no_such_page.md) no_such_page.md: no such file" in failures[0]
    assert "(planted.md#no-such-heading) #no-such-heading: no such heading" in failures[1]
    page = ROOT / "docs" / "index.md"
    assert link_problem(page, "collectives.md#options") is None
    assert "no such heading" in str(link_problem(page, "collectives.md#no-such-heading"))
    assert path_problem(page, "native/src/coll/allreduce.c") is None
    assert path_problem(page, "native/src/coll/no_such_algorithm.c") is not None
    assert path_problem(page, "perf/results/ftar_{bandwidth,stall}.json") is None
    assert path_problem(page, "perf/results/ftar_{bandwidth,nothing}.json") is not None
    assert path_problem(page, "perf/results/ftar_*.json") is None
    assert path_problem(page, "DIR/rank<N>.json") is None  # a placeholder, not a repository path
    assert slug("Buffer arguments: mpi4py's rules") == "buffer-arguments-mpi4pys-rules"
    assert slug("Collective trace overhead — `results/x.json`") == "collective-trace-overhead--resultsxjson"


SPHINX_MISSING = [m for m in ("sphinx", "myst_parser") if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(bool(SPHINX_MISSING), reason="the docs extra is not installed (pip install '.[docs]')")
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-P", "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert (tmp_path / "html" / "index.html").is_file()
