"""Sphinx configuration of pymcoll's documentation site.

Build: ``python -P -m sphinx -W --keep-going -b html docs <outdir>`` (the ``docs`` extra
installs Sphinx and myst-parser). Pages are Markdown (MyST); the API pages are autodoc of
the installed package. Nothing is fetched from the network.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import docutils.frontend
import docutils.parsers.rst
import docutils.utils
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout's pymcoll/ has no compiled core and no algorithms/ inside it: autodoc must import
# the installed package, so the checkout's root (on sys.path under `python -m` without -P) goes.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]

project = "pymcoll"
author = "the pymcoll authors"
copyright = "the pymcoll authors"
release = version = "0.1.0"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# GitHub's heading slugs, so that README.md#anchor links work on the site and on GitHub alike.
myst_heading_anchors = 4

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
autodoc_inherit_docstrings = False  # torch's base-class docstrings are torch's, not ours

html_theme = "alabaster"
html_title = "pymcoll"
html_static_path: list[str] = []

_log = logging.getLogger(__name__)
_verbatim: list[str] = []


def _rest_problems(text: str, env: Any) -> bool:
    """Whether `text` gives docutils warnings when parsed as reStructuredText."""
    try:
        settings = docutils.frontend.get_default_settings(docutils.parsers.rst.Parser)
    except AttributeError:  # docutils < 0.19
        settings = docutils.frontend.OptionParser(components=(docutils.parsers.rst.Parser,)).get_default_values()
    settings.report_level = 5  # nothing printed; the messages are counted below
    settings.halt_level = 5
    settings.env = env  # Sphinx's roles (:class:, :func:, ...) look at the build environment
    document = docutils.utils.new_document("<docstring>", settings)
    messages: list[Any] = []
    document.reporter.attach_observer(lambda msg: messages.append(msg))
    docutils.parsers.rst.Parser().parse(text, document)
    return any(m["level"] >= 2 for m in messages)


def _docstring_as_written(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Shows a docstring that is not valid reStructuredText verbatim instead of failing the -W build.

    Docstrings are written for ``help()`` first; most are also valid reST and render as such.
    The others are listed at the end of the build, so that their authors can fix them.
    """
    if not lines or not _rest_problems("\n".join(lines), app.env):
        return
    _verbatim.append(name)
    body = ["    " + line if line.strip() else "" for line in lines]
    lines[:] = ["::", ""] + body + [""]


def _report_verbatim(app: Any, exception: Any) -> None:
    if exception is None and _verbatim:
        _log.info("docstrings shown verbatim (not valid reStructuredText): %s", ", ".join(sorted(set(_verbatim))))


class RepositoryFileLinks(SphinxTransform):
    """Links from a page to a Markdown file of the repository outside docs/ (the README, the
    benchmark pages under perf/) become downloads of that file: on GitHub they are links between
    pages, on the site the file itself, since it is no page of the site."""

    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        here = os.path.dirname(self.env.doc2path(self.env.docname))
        for node in list(self.document.findall(addnodes.pending_xref)):
            target = node.get("reftarget", "")
            if node.get("refdomain") != "doc" or node.get("reftype") != "myst" or target in self.env.found_docs:
                continue
            path = target + ".md"
            if not (os.path.isabs(path) and os.path.isfile(path)):
                continue
            download = addnodes.download_reference(refdomain=None, reftype="myst", refdoc=self.env.docname,
                                                   reftarget=os.path.relpath(path, here),
                                                   refexplicit=node.get("refexplicit", True))
            download["classes"] = ["xref", "download", "myst"]
            download += node.children
            node.replace_self(download)


def setup(app: Any) -> None:
    app.add_transform(RepositoryFileLinks)
    app.connect("autodoc-process-docstring", _docstring_as_written)
    app.connect("build-finished", _report_verbatim)
