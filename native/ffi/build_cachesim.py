"""cffi builder for ``pymcoll._cachesim`` (run by ``cffi-gen-src exec-python``): no MPI."""

import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from header_cdef import header_declarations  # noqa: E402 - found next to this file

ffibuilder = FFI()
ffibuilder.cdef(header_declarations(os.path.join(HERE, "..", "include", "pymcoll_cachesim.h")))
ffibuilder.set_source("pymcoll._cachesim", '#include "pymcoll_cachesim.h"\n')
