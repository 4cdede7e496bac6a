"""Sphinx configuration of pymcoll's documentation site.

Build: ``python -P -m sphinx -W --keep-going -b html docs <outdir>`` (the ``docs`` extra
installs Sphinx and myst-parser). Pages are Markdown (MyST); the API pages are autodoc of
the installed package. Nothing is fetched from the network.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sphinx import addnodes
from sphinx.transforms import SphinxTransform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout's pymcoll/ has no compiled core and no algorithms/ inside it: autodoc must import
# the installed package, so the checkout's root (on sys.path under `python -m` without -P) goes.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]

project = "pymcoll"
author = "the pymcoll authors"
copyright = "the pymcoll authors"
release = version = "0.1.0"

# napoleon reads the docstrings' "Args:" / "Returns:" / "Raises:" sections (written for help() first).
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
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
