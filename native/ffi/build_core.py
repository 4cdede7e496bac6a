"""cffi builder for ``pymcoll._core`` (run by ``cffi-gen-src exec-python``).

The declarations come from the public header itself, with preprocessor lines
dropped, so the binding cannot drift from the C API.
"""

import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "include", "pymcoll.h")


def header_declarations(path: str) -> str:
    """Return the C declarations of `path` that cffi's cdef understands."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return "\n".join(lines)


ffibuilder = FFI()
ffibuilder.cdef(header_declarations(HEADER))
ffibuilder.set_source("pymcoll._core", '#include "pymcoll.h"\n')
