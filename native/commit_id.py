"""Write pymcoll's build-info module with the source tree's git commit.

Usage: python commit_id.py TEMPLATE OUTPUT SOURCE_ROOT

The template's ``@VCS_TAG@`` becomes the short commit id, or ``unknown``
outside a git checkout (an sdist). The build reruns this only when the
checkout's HEAD log changes (a commit, checkout or reset), not on every
build: an editable install rebuilds on every import, and a step that always
ran made ranks that import at once write the build's log concurrently.
"""

import os
import subprocess
import sys


def commit(root: str) -> str:
    """Short id of HEAD in ``root``, or ``unknown`` when git cannot tell."""
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def main(argv: list[str]) -> None:
    template, output, root = argv
    with open(template, encoding="utf-8") as f:
        text = f.read().replace("@VCS_TAG@", commit(root))
    # Ranks that import an editable install at once may each run this step:
    # a reader must never see a half-written module, so it appears whole.
    partial = f"{output}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(partial, output)


if __name__ == "__main__":
    main(sys.argv[1:])
