"""The C declarations of a public header, in the form cffi's cdef reads.

Comments, C++ guards and preprocessor lines are dropped, so that each
binding comes from its header itself and cannot drift from the C API.
"""

import re


def header_declarations(path: str) -> str:
    """Return the C declarations of `path` that cffi's cdef understands."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return "\n".join(lines)
