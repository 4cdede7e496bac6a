"""mpi4py's buffer-argument forms on a pymcoll.Comm, compared element by
element with the same calls on plain MPI.COMM_WORLD (mpi4py).

Checks: v-specs with integer counts and integer displacements (strides),
every element outside the blocks left as it was; a tuple in the count's place
is the (count, displacement) pair, a list the counts; None as MPI.IN_PLACE or
as an argument MPI ignores, in blocking, non-blocking and persistent form;
Reduce_scatter's counts taken from the receive buffers; typecode strings, the
2-4 item rule and displacements in block specs; device memory (CUDA array
interface, DLPack on a device) run in the wrapped communicator; DLPack
producers written here with ctypes (the deleter runs once, after the last
use); argument errors raise mpi4py's exception class and leave the
communicator working.

Each check is a sequence of units. A unit makes the mpi4py call first (it has
no deadline), then the pymcoll call (the pymcoll.Comm has one, so a rank left
waiting by a peer's error gives up), and every rank's verdict is gathered
over a duplicate of COMM_WORLD kept for verdicts, so one rank's failure
cannot leave the others waiting. After a failed unit the pymcoll.Comm is
made afresh and the check stops on every rank (with --keep-going it runs
its remaining units, to list every failure). Rank 0 prints "ok <check>"
for each check that passes and "FAIL <check>: <unit>: rank <i>: <what>" for
each failure; the program exits nonzero if any check failed.

Usage: python -m mpi_programs.mpi4py_forms [--only NAME,...] [--skip NAME,...] [--keep-going]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

import pymcoll

from .common import gapped, main

INT = MPI.INT
TIMEOUT = 10.0  # pymcoll's deadline: a rank left waiting by a peer's failed call gives up
GAP = 2  # elements left free between the blocks of a strided v-spec
COUNTS = (0, 1, 2)  # per-rank counts of the strided v-specs
FORMS = ("", "I", "_init")  # blocking, non-blocking, persistent


def ar(k: int, start: int = 0) -> np.ndarray:
    """int32 start, start+1, ..., start+k-1."""
    return np.arange(start, start + k, dtype=np.int32)


def filled(k: int, value: int = -1) -> np.ndarray:
    """k int32 elements, all `value` (-1 marks an element nothing may write)."""
    return np.full(k, value, np.int32)


# -- running one collective in one form -------------------------------------------
def run_form(comm: Any, name: str, form: str, *args: Any, reset: Callable[[], None] = lambda: None,
             **kwargs: Any) -> None:
    """Run collective `name` as form "" (blocking), "I" (Wait on the request) or
    "_init" (two Start/Wait rounds); `reset` refills the buffers before each run."""
    if form == "":
        reset()
        getattr(comm, name)(*args, **kwargs)
    elif form == "I":
        reset()
        getattr(comm, "I" + name[0].lower() + name[1:])(*args, **kwargs).Wait()
    else:
        req = getattr(comm, name + "_init")(*args, **kwargs)
        for _ in range(2):  # a persistent request must work again after completing
            reset()
            req.Start()
            req.Wait()
        req.Free()


def form_name(name: str, form: str) -> str:
    """The method name of collective `name` in a form: Iallgather, Allgather_init, ..."""
    return "I" + name[0].lower() + name[1:] if form == "I" else name + form


def compare(got: np.ndarray, ref: np.ndarray, want: Optional[np.ndarray]) -> Optional[str]:
    """None when pymcoll's result equals mpi4py's (and mpi4py's equals the expected one)."""
    if want is not None and not np.array_equal(ref, want):
        return f"mpi4py gave {ref.tolist()} but the test expects {want.tolist()} (the test is wrong)"
    if got.dtype != ref.dtype or not np.array_equal(got, ref):
        return f"pymcoll gave {got.tolist()}, mpi4py {ref.tolist()}"
    return None


def caught(call: Callable[[Any], Any], comm: Any) -> Optional[BaseException]:
    """The exception call(comm) raises (without tracebacks), or None."""
    try:
        call(comm)
    except Exception as e:  # noqa: BLE001 - compared with mpi4py's by the caller
        # A kept traceback holds the failed call's frames and, through them,
        # the caller's frame that keeps the exception: a reference cycle, and
        # pymcoll's parsed buffers collected from a cycle crash the process
        # (check error-kept-in-cycle). Without tracebacks the frames go now.
        chained: Optional[BaseException] = e
        while chained is not None:
            chained.__traceback__ = None
            chained = chained.__context__
        return e
    return None


def describe(e: BaseException) -> str:
    """An exception's class and message, for failure reports."""
    if isinstance(e, MPI.Exception):
        return f"MPI.Exception (error class {e.Get_error_class()}): {e.Get_error_string().splitlines()[0]}"
    return f"{type(e).__name__}: {e}"


def error_mismatch(got: Optional[BaseException], ref: Optional[BaseException]) -> Optional[str]:
    """None when pymcoll raised what mpi4py raised (the class; for MPI.Exception the error class)."""
    if ref is None:
        return "mpi4py raised nothing (the test is wrong)"
    if got is None:
        return f"pymcoll raised nothing; mpi4py raised {describe(ref)}"
    if isinstance(ref, MPI.Exception):
        if not isinstance(got, MPI.Exception) or got.Get_error_class() != ref.Get_error_class():
            return f"pymcoll raised {describe(got)}; mpi4py {describe(ref)}"
    elif type(got) is not type(ref):
        return f"pymcoll raised {describe(got)}; mpi4py {describe(ref)}"
    return None


# -- a communicator that shows which calls pymcoll hands to MPI ---------------------
class SpyComm(MPI.Intracomm):
    """COMM_WORLD under another Python object that records the collectives run
    in it: a pymcoll.Comm wrapping it runs device-memory calls here."""

    seen: list[str] = []


def _recording(name: str) -> Callable[..., Any]:
    """A method that records `name` and runs mpi4py's."""
    def method(self: SpyComm, *args: Any, **kwargs: Any) -> Any:
        SpyComm.seen.append(name)
        return getattr(MPI.Intracomm, name)(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in ("Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall",
              "Alltoallv", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan"):
    for _n in (_name, "I" + _name[0].lower() + _name[1:], _name + "_init"):
        setattr(SpyComm, _n, _recording(_n))


# -- device memory, faked in host memory ---------------------------------------------
class FakeDevice:
    """Host memory behind __cuda_array_interface__ only (no buffer protocol):
    mpi4py takes it for device memory and hands the pointer to MPI, which
    (MPICH built without CUDA) reads it as host memory."""

    def __init__(self, arr: np.ndarray, readonly: bool = False) -> None:
        self.arr = arr  # owns the memory
        self.__cuda_array_interface__ = {"version": 3, "data": (arr.ctypes.data, readonly),
                                         "typestr": arr.dtype.str, "shape": arr.shape, "strides": None}


# -- DLPack producers made with ctypes -------------------------------------------------
class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_CODES = {"i": 0, "u": 1, "f": 2}  # numpy kind -> DLPack type code
_NAME, _NAME_VERSIONED = b"dltensor", b"dltensor_versioned"  # module constants: capsules keep the pointer
# A prototype of our own: setting argtypes on ctypes.pythonapi.PyCapsule_New
# would change it for every other user in the process (pymcoll is one).
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_live: dict[int, tuple] = {}  # managed tensor address -> (producer, staging, shape, managed)
_spent: dict[int, tuple] = {}  # the same after the deleter: kept, so no address is ever reused


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(address: int) -> None:
    """The tensors' deleter: copy the staging memory back, poison it, count the call."""
    rec = _live.pop(address, None)
    if rec is None:  # a second call
        spent = _spent.get(address)
        if spent is not None:
            spent[0].deletes += 1
        return
    producer, staging = rec[0], rec[1]
    if producer.staged:
        producer.backing[...] = staging
        staging.view(np.uint8)[...] = 0xA5
    producer.deletes += 1
    _spent[address] = rec


_DELETER = ctypes.cast(_deleter, ctypes.c_void_p).value


class HostTensor:
    """A 1-D DLPack producer over the numpy array `backing`.

    staged: each capsule gets its own copy of the data, valid only until the
    tensor's deleter runs; the deleter copies it back into `backing` (so a
    receive lands there) and poisons it. A consumer that reads or writes the
    memory after the deleter, or never calls it, shows in `backing`. Not
    staged: the tensor is `backing` itself.

    The capsules have no destructor: a ctypes callback cannot run safely while
    an exception is pending, and a capsule may die during one. pymcoll takes
    the capsule and calls the deleter itself; the mpi4py references use numpy
    arrays.
    """

    def __init__(self, backing: np.ndarray, device: int = 1, readonly: bool = False, staged: bool = True) -> None:
        self.backing = backing
        self.device = device
        self.readonly = readonly
        self.staged = staged
        self.exports = 0  # capsules handed out
        self.deletes = 0  # deleter calls

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device, 0

    def _capsule(self, versioned: bool) -> Any:
        self.exports += 1
        staging = self.backing.copy() if self.staged else self.backing
        shape = (ctypes.c_int64 * 1)(staging.size)
        managed = _ManagedVersioned() if versioned else _Managed()
        t = managed.dl_tensor
        t.data = staging.ctypes.data
        t.device.device_type, t.device.device_id = self.device, 0
        t.ndim = 1
        t.dtype.code, t.dtype.bits, t.dtype.lanes = _CODES[staging.dtype.kind], 8 * staging.dtype.itemsize, 1
        t.shape = shape  # strides stay NULL: compact
        managed.deleter = _DELETER
        if versioned:
            managed.version.major, managed.version.minor = 1, 0
            managed.flags = _READ_ONLY if self.readonly else 0
        address = ctypes.addressof(managed)
        _live[address] = (self, staging, shape, managed)
        return _capsule_new(address, _NAME_VERSIONED if versioned else _NAME, None)


class LegacyProducer(HostTensor):
    """A producer from before DLPack 1.0: __dlpack__ takes no max_version."""

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._capsule(versioned=False)


class VersionedProducer(HostTensor):
    """A DLPack 1.0 producer: a versioned capsule (read-only flag as given) when asked for one."""

    def __dlpack__(self, stream: Any = None, max_version: Optional[tuple[int, int]] = None,
                   dl_device: Any = None, copy: Optional[bool] = None) -> Any:
        return self._capsule(versioned=max_version is not None and max_version[0] >= 1)


# -- checks and units --------------------------------------------------------------------
class Stop(Exception):
    """Every rank agreed that a unit failed: the rest of the check is skipped."""


class Checker:
    """Runs units on every rank and agrees on their verdicts."""

    def __init__(self, world: MPI.Intracomm, keep_going: bool = False) -> None:
        self.world = world
        self.n, self.r = world.size, world.rank
        self.verdicts = world.Dup()  # verdicts only: nothing under test ever runs on it
        self.comm = self._fresh()
        self.keep_going = keep_going  # run a check's later units after a failed one
        self.check = ""
        self.failures: list[str] = []

    def _fresh(self) -> pymcoll.Comm:
        return pymcoll.Comm(SpyComm(self.world), timeout=TIMEOUT)

    def unit(self, label: str, body: Callable[[], Optional[str]]) -> None:
        """Run body (None: passed, else what failed) on every rank; raise Stop
        on every rank if it failed on any."""
        try:
            problem = body()
        except Exception as e:  # noqa: BLE001 - a verdict like any other
            problem = f"unexpected {describe(e)}"
        every = self.verdicts.allgather(problem)
        bad = [f"{self.check}: {label}: rank {i}: {p}" for i, p in enumerate(every) if p is not None]
        if not bad:
            return
        self.failures += bad
        if self.r == 0:
            print("\n".join("FAIL " + b for b in bad), flush=True)
        # A rank may have given up waiting for the others, which breaks the communicator.
        self.comm.Free()
        self.world.Barrier()
        self.comm = self._fresh()
        if not self.keep_going:
            raise Stop

    def same_result(self, label: str, call: Callable[[Any], np.ndarray], want: Optional[np.ndarray]) -> None:
        """A unit: call(comm) returns the buffer to check, on plain COMM_WORLD
        (mpi4py, first: it has no deadline) and on the pymcoll.Comm; both must
        equal `want` (if given)."""
        def body() -> Optional[str]:
            ref = call(self.world)
            got = call(self.comm)
            return compare(got, ref, want)

        self.unit(label, body)

    def same_error(self, label: str, call: Callable[[Any], Any], after: Callable[[Any], Optional[str]],
                   left_to_mpi: Optional[int] = None) -> None:
        """A unit: call(comm), a mistake every rank makes, raises on the
        pymcoll.Comm what it raises on plain COMM_WORLD; after(comm), a correct
        call, then works on the pymcoll.Comm. left_to_mpi: a mistake mpi4py
        hands to MPI (the MPI error class MPICH reports): not made on plain
        COMM_WORLD, where Open MPI moves data and breaks the communicator."""
        def mpi_error(comm: Any) -> None:
            raise MPI.Exception(left_to_mpi)

        def body() -> Optional[str]:
            ref = caught(call if left_to_mpi is None else mpi_error, self.world)
            got = caught(call, self.comm)
            return error_mismatch(got, ref) or after(self.comm)

        self.unit(label, body)

    def run(self, name: str, check: Callable[[Checker], None]) -> None:
        """Run one check; rank 0 prints "ok <name>" if every unit passed."""
        self.check = name
        before = len(self.failures)
        try:
            check(self)
        except Stop:
            return
        if self.r == 0 and len(self.failures) == before:
            print(f"ok {name}", flush=True)


# -- 1. v-specs with integer counts and strides: nothing outside the blocks moves -----
V_FORMS = ("[b, (c, s), INT]", "[b, c, s, INT]", "[b, c, INT]", "[b, (c, None), INT]", "[b, (None, s), INT]")


def v_form(form: str, c: int, n: int, side: str) -> tuple[int, Callable[[np.ndarray], list], list[int], str]:
    """(buffer length, spec builder, block starts, label) of a v-spec form with count c for every rank."""
    s = c + GAP
    if form == "[b, (c, s), INT]":
        return n * s + 1, lambda b: [b, (c, s), INT], [i * s for i in range(n)], f"[b, ({c}, {s}), INT]"
    if form == "[b, c, s, INT]":
        return n * s + 1, lambda b: [b, c, s, INT], [i * s for i in range(n)], f"[b, {c}, {s}, INT]"
    if form == "[b, c, INT]":
        return n * c + 2, lambda b: [b, c, INT], [i * c for i in range(n)], f"[b, {c}, INT]"
    if form == "[b, (c, None), INT]":
        return n * c + 2, lambda b: [b, (c, None), INT], [i * c for i in range(n)], f"[b, ({c}, None), INT]"
    # Counts inferred (length / n = c): a receive buffer has no room for gaps
    # then (stride c), a send buffer may overlap its blocks (stride 1).
    st = 1 if side == "send" and c > 1 else c
    return n * c, lambda b: [b, (None, st), INT], [i * st for i in range(n)], f"[b of {n * c}, (None, {st}), INT]"


def check_allgatherv_strides(ck: Checker) -> None:
    """Allgatherv into each v-spec form, counts 0-2: the blocks land where the form puts them, nothing else moves."""
    n, r = ck.n, ck.r
    for c in COUNTS:
        for form in V_FORMS:
            size, spec, starts, label = v_form(form, c, n, "recv")
            want = filled(size)
            for i, d in enumerate(starts):
                want[d:d + c] = ar(c, 100 * i)

            def call(comm: Any) -> np.ndarray:
                rb = filled(size)
                comm.Allgatherv(ar(c, 100 * r), spec(rb))
                return rb

            ck.same_result(f"Allgatherv(sendbuf, {label})", call, want)


def check_alltoallv_strides(ck: Checker) -> None:
    """Alltoallv with the same v-spec form on both sides, counts 0-2."""
    n, r = ck.n, ck.r
    for c in COUNTS:
        for form in V_FORMS:
            ssize, sspec, sstarts, slabel = v_form(form, c, n, "send")
            rsize, rspec, rstarts, rlabel = v_form(form, c, n, "recv")
            # Rank i's send buffer is ar(ssize, 1000 i): block j starts at sstarts[j].
            want = filled(rsize)
            for i, d in enumerate(rstarts):
                want[d:d + c] = ar(ssize, 1000 * i)[sstarts[r]:sstarts[r] + c]

            def call(comm: Any) -> np.ndarray:
                rb = filled(rsize)
                comm.Alltoallv(sspec(ar(ssize, 1000 * r)), rspec(rb))
                return rb

            ck.same_result(f"Alltoallv({slabel}, {rlabel})", call, want)


def gatherv_strides(ck: Checker, root: int) -> None:
    """Gatherv into each v-spec form at `root` (the other ranks pass one too, which MPI ignores)."""
    n, r = ck.n, ck.r
    for c in COUNTS:
        for form in V_FORMS:
            size, spec, starts, label = v_form(form, c, n, "recv")
            want = filled(size)  # off the root the spec is ignored: nothing written
            if r == root:
                for i, d in enumerate(starts):
                    want[d:d + c] = ar(c, 100 * i)

            def call(comm: Any) -> np.ndarray:
                rb = filled(size)
                comm.Gatherv(ar(c, 100 * r), spec(rb), root=root)
                return rb

            ck.same_result(f"Gatherv(sendbuf, {label}, root={root})", call, want)


def check_gatherv_strides_root0(ck: Checker) -> None:
    """Gatherv to rank 0."""
    gatherv_strides(ck, 0)


def check_gatherv_strides_rootlast(ck: Checker) -> None:
    """Gatherv to the last rank."""
    gatherv_strides(ck, ck.n - 1)


def check_scatterv_strides(ck: Checker) -> None:
    """Scatterv from each v-spec form (send side: (None, s) may overlap), counts 0-2."""
    n, r = ck.n, ck.r
    root = n - 1
    for c in COUNTS:
        for form in V_FORMS:
            size, spec, starts, label = v_form(form, c, n, "send")
            data = ar(size, 1000)
            want = filled(c + GAP)  # the receive spec takes c elements; the GAP after them stay -1
            want[:c] = data[starts[r]:starts[r] + c]

            def call(comm: Any) -> np.ndarray:
                rb = filled(c + GAP)
                comm.Scatterv(spec(data.copy()), [rb, c, INT], root=root)
                return rb

            ck.same_result(f"Scatterv({label}, [rb, {c}, INT], root={root})", call, want)


# -- 2. a tuple in the count's place is (count, displacement); a list is the counts -----
def allgatherv_into(comm: Any, sendbuf: np.ndarray, size: int, spec: Callable[[np.ndarray], list]) -> np.ndarray:
    """Allgatherv into spec(rb) for a fresh rb of `size` elements, all -1; returns rb."""
    rb = filled(size)
    comm.Allgatherv(sendbuf, spec(rb))
    return rb


def check_tuple_vs_list(ck: Checker) -> None:
    """[b, (1, 2), INT] is count 1 with stride 2 at any size; at 2 ranks [b, [1, 2], INT] is counts [1, 2]."""
    n, r = ck.n, ck.r
    want = filled(2 * n)
    want[0::2] = 100 * ar(n)
    ck.same_result("Allgatherv(sendbuf, [rb, (1, 2), INT]) is count 1, stride 2",
                   lambda comm: allgatherv_into(comm, ar(1, 100 * r), 2 * n, lambda b: [b, (1, 2), INT]), want)
    data = ar(2 * n, 1000)

    def scatter_pair(comm: Any) -> np.ndarray:
        rb = filled(1)
        comm.Scatterv([data.copy(), (1, 2), INT], rb, root=0)
        return rb

    ck.same_result("Scatterv([sb, (1, 2), INT], rb) is count 1, stride 2", scatter_pair, data[2 * r:2 * r + 1])
    if n != 2:
        return  # a list of two counts needs two ranks
    ck.same_result("Allgatherv(sendbuf, [rb, [1, 2], INT]) is counts [1, 2]",
                   lambda comm: allgatherv_into(comm, ar(r + 1, 100 * r), 5, lambda b: [b, [1, 2], INT]),
                   np.array([0, 100, 101, -1, -1], np.int32))

    def scatter_list(comm: Any) -> np.ndarray:
        rb = filled(r + 1 + GAP)
        comm.Scatterv([data.copy(), [1, 2], INT], [rb, r + 1, INT], root=0)
        return rb

    want = filled(r + 1 + GAP)
    want[:r + 1] = data[r:2 * r + 1]
    ck.same_result("Scatterv([sb, [1, 2], INT], rb) is counts [1, 2]", scatter_list, want)


def check_tuple_list_reuse(ck: Checker) -> None:
    """The same arrays passed with (1, 2) and then with [1, 2]: the second call
    follows its own spec, not the first call's."""
    n, r = ck.n, ck.r
    if n == 2:
        def gatherv_twice(comm: Any) -> np.ndarray:
            rb, sb = filled(5), ar(1, 100 * r)
            comm.Gatherv(sb, [rb, (1, 2), INT], root=0)
            rb.fill(-1)
            comm.Gatherv(sb if r == 0 else ar(2, 200), [rb, [1, 2], INT], root=0)
            return rb

        want = np.array([0, 200, 201, -1, -1] if r == 0 else [-1] * 5, np.int32)
        ck.same_result("Gatherv(sb, [rb, (1, 2), INT]) then Gatherv(sb, [rb, [1, 2], INT]), same sb and rb",
                       gatherv_twice, want)
        return

    def allgatherv_twice(comm: Any) -> None:
        # The first call is right at any size; the second has 2 counts for n != 2 ranks.
        rb, sb = filled(2 * n), ar(1, 100 * r)
        comm.Allgatherv(sb, [rb, (1, 2), INT])
        comm.Allgatherv(sb, [rb, [1, 2], INT])

    ck.same_error("Allgatherv(sb, [rb, (1, 2), INT]) then Allgatherv(sb, [rb, [1, 2], INT]), same sb and rb",
                  allgatherv_twice, lambda comm: allgatherv_works(ck, comm))


# -- 3. None as MPI.IN_PLACE, and where MPI ignores the argument ----------------------
def check_none_forms(ck: Checker) -> None:
    """None where mpi4py reads MPI.IN_PLACE or MPI ignores the argument; a few in every form."""
    n, r = ck.n, ck.r
    root = n - 1
    at_root = r == root
    counts = [i + 1 for i in range(n)]
    displs, total = gapped(counts)
    for form in FORMS:
        def allgather(comm: Any) -> np.ndarray:
            rb = filled(2 * n)

            def reset() -> None:
                rb.fill(-1)
                rb[2 * r:2 * r + 2] = ar(2, 100 * r)  # this rank's block, in place

            run_form(comm, "Allgather", form, None, rb, reset=reset)
            return rb

        ck.same_result(f"{form_name('Allgather', form)}(None, rb)", allgather,
                       np.concatenate([ar(2, 100 * i) for i in range(n)]))

        def allreduce(comm: Any) -> np.ndarray:
            rb = filled(3)

            def reset() -> None:
                rb[...] = ar(3, r)  # this rank's input, in place

            run_form(comm, "Allreduce", form, None, rb, MPI.SUM, reset=reset)
            return rb

        ck.same_result(f"{form_name('Allreduce', form)}(None, rb, SUM)", allreduce,
                       n * ar(3) + n * (n - 1) // 2)

        def gatherv(comm: Any) -> np.ndarray:
            rb, sb = filled(total), ar(r + 1, 100 * r)

            def reset() -> None:
                rb.fill(-1)
                if at_root:
                    rb[displs[r]:displs[r] + r + 1] = sb  # the root's block, in place

            args = (None, [rb, counts, displs, INT]) if at_root else (sb, None)
            run_form(comm, "Gatherv", form, *args, root=root, reset=reset)
            return rb

        want = filled(total)
        if at_root:
            for i in range(n):
                want[displs[i]:displs[i] + i + 1] = ar(i + 1, 100 * i)
        ck.same_result(f"{form_name('Gatherv', form)}: None sendbuf at the root, None recvbuf elsewhere",
                       gatherv, want)

        def scatter(comm: Any) -> np.ndarray:
            rb, sb = filled(2), ar(2 * n, 1000)
            args = (sb, None) if at_root else (None, rb)
            run_form(comm, "Scatter", form, *args, root=root, reset=lambda: rb.fill(-1))
            return sb if at_root else rb  # the root keeps its block where it is

        ck.same_result(f"{form_name('Scatter', form)}: None recvbuf at the root, None sendbuf elsewhere",
                       scatter, ar(2 * n, 1000) if at_root else ar(2, 1000 + 2 * r))

        def reduce(comm: Any) -> np.ndarray:
            rb = filled(3)
            run_form(comm, "Reduce", form, ar(3, r), rb if at_root else None, MPI.SUM, root=root,
                     reset=lambda: rb.fill(-1))
            return rb

        ck.same_result(f"{form_name('Reduce', form)}(sendbuf, None off the root)", reduce,
                       n * ar(3) + n * (n - 1) // 2 if at_root else filled(3))

    def alltoall(comm: Any) -> np.ndarray:
        rb = np.concatenate([ar(2, 1000 * r + 10 * j) for j in range(n)])
        comm.Alltoall(None, rb)
        return rb

    ck.same_result("Alltoall(None, rb)", alltoall, np.concatenate([ar(2, 1000 * i + 10 * r) for i in range(n)]))

    def gather(comm: Any) -> np.ndarray:
        rb, sb = filled(2 * n), ar(2, 100 * r)
        if at_root:
            rb[2 * r:2 * r + 2] = sb
            comm.Gather(None, rb, root=root)
        else:
            comm.Gather(sb, None, root=root)
        return rb

    ck.same_result("Gather: None sendbuf at the root, None recvbuf elsewhere", gather,
                   np.concatenate([ar(2, 100 * i) for i in range(n)]) if at_root else filled(2 * n))

    def scatterv(comm: Any) -> np.ndarray:
        rb, sb = filled(r + 1), ar(total, 1000)
        if at_root:
            comm.Scatterv([sb, counts, displs, INT], None, root=root)
            return sb
        comm.Scatterv(None, rb, root=root)
        return rb

    ck.same_result("Scatterv: None recvbuf at the root, None sendbuf elsewhere", scatterv,
                   ar(total, 1000) if at_root else ar(r + 1, 1000 + displs[r]))

    def reduce_in_place(comm: Any) -> np.ndarray:
        rb = ar(3, r)
        if at_root:
            comm.Reduce(None, rb, MPI.SUM, root=root)
        else:
            comm.Reduce(ar(3, r), None, MPI.SUM, root=root)
        return rb

    ck.same_result("Reduce: None sendbuf at the root, None recvbuf elsewhere", reduce_in_place,
                   n * ar(3) + n * (n - 1) // 2 if at_root else ar(3, r))

    # In place, the input comes from recvbuf and the result is its first block;
    # what MPI leaves after that block is unspecified, so only the block is compared.
    def rsb(comm: Any) -> np.ndarray:
        rb = ar(2 * n, 10 * r)
        comm.Reduce_scatter_block(None, rb, MPI.SUM)
        return rb[:2]

    ck.same_result("Reduce_scatter_block(None, rb)", rsb, n * ar(2, 2 * r) + 10 * n * (n - 1) // 2)
    off = sum(counts[:r])

    def rs(comm: Any) -> np.ndarray:
        rb = ar(sum(counts), 10 * r)
        comm.Reduce_scatter(None, rb, counts, MPI.SUM)
        return rb[:r + 1]

    ck.same_result("Reduce_scatter(None, rb, recvcounts)", rs, n * ar(r + 1, off) + 10 * n * (n - 1) // 2)

    def scan(comm: Any) -> np.ndarray:
        rb = ar(2, r + 1)
        comm.Scan(None, rb, MPI.SUM)
        return rb

    ck.same_result("Scan(None, rb)", scan, (r + 1) * ar(2) + (r + 1) * (r + 2) // 2)

    def exscan(comm: Any) -> np.ndarray:
        rb = ar(2, r + 1)
        comm.Exscan(None, rb, MPI.SUM)
        return rb if r > 0 else rb[:0]  # rank 0's recvbuf is undefined after Exscan

    ck.same_result("Exscan(None, rb)", exscan, r * ar(2) + r * (r + 1) // 2 if r > 0 else ar(0))


# -- 4. Reduce_scatter without recvcounts: each rank's count is its recvbuf's length -----
def check_reduce_scatter_counts(ck: Checker) -> None:
    """Rank i receives i + 1 elements, recvcounts left out; without them IN_PLACE is a TypeError."""
    n, r = ck.n, ck.r
    total = n * (n + 1) // 2  # rank i receives i + 1 elements
    off = r * (r + 1) // 2
    sb = ar(total) * (r + 1)
    for form, args, kwargs, want, shown in (
            ("", (), {}, ar(r + 1, off) * total, ""),  # recvcounts and op left out: SUM
            ("I", (None, MPI.MAX), {}, ar(r + 1, off) * n, ", None, MAX"),
            ("_init", (), {"recvcounts": None, "op": MPI.SUM}, ar(r + 1, off) * total,
             ", recvcounts=None, op=SUM")):
        def call(comm: Any) -> np.ndarray:
            rb = filled(r + 1)
            run_form(comm, "Reduce_scatter", form, sb, rb, *args, reset=lambda: rb.fill(-1), **kwargs)
            return rb

        ck.same_result(f"{form_name('Reduce_scatter', form)}(sendbuf, rb of {r + 1}{shown})", call, want)

    def works(comm: Any) -> Optional[str]:
        rb = filled(r + 1)
        comm.Reduce_scatter(sb, rb, [i + 1 for i in range(n)], MPI.SUM)
        return None if np.array_equal(rb, ar(r + 1, off) * total) else f"a correct Reduce_scatter then gave {rb}"

    ck.same_error("Reduce_scatter(IN_PLACE, rb) without recvcounts",
                  lambda comm: comm.Reduce_scatter(MPI.IN_PLACE, ar(total)), works)
    ck.same_error("Reduce_scatter(None, rb) without recvcounts",
                  lambda comm: comm.Reduce_scatter(None, ar(total)), works)
    ck.same_error("Reduce_scatter(sendbuf, rb, recvcounts=1)",
                  lambda comm: comm.Reduce_scatter(sb, filled(r + 1), 1), works)


# -- 5. typecode strings, 2-4 items, displacements in block specs -----------------------
def check_typecodes_and_items(ck: Checker) -> None:
    """Typecode strings as datatypes, displacements in block specs, the 2-4 item rule."""
    n, r = ck.n, ck.r
    root = n - 1

    def bcast(spec: Callable[[np.ndarray], list]) -> Callable[[Any], np.ndarray]:
        def call(comm: Any) -> np.ndarray:
            b = ar(8, 10) if r == root else filled(8)
            comm.Bcast(spec(b), root=root)
            return b

        return call

    ck.same_result("Bcast([b, 'i'])", bcast(lambda b: [b, "i"]), ar(8, 10))
    moved = ar(8, 10) if r == root else filled(8)
    moved[3:5] = [13, 14]  # only elements 3 and 4 move
    ck.same_result("Bcast([b, (2, 3), INT]) moves elements 3 and 4", bcast(lambda b: [b, (2, 3), INT]), moved)
    ck.same_result("Bcast([b, 2, 3, INT]) moves elements 3 and 4", bcast(lambda b: [b, 2, 3, INT]), moved)
    ck.same_result("Bcast([b, (2, 3)]) moves elements 3 and 4", bcast(lambda b: [b, (2, 3)]), moved)

    def allreduce_d(comm: Any) -> np.ndarray:
        rb = np.full(3, -1.0)
        comm.Allreduce([np.arange(3.0) + r, 2, "d"], [rb, 2, "d"], MPI.SUM)
        return rb

    ck.same_result("Allreduce([sb, 2, 'd'], [rb, 2, 'd'])", allreduce_d,
                   np.array([n * (n - 1) / 2, n + n * (n - 1) / 2, -1.0]))

    def allgather_i(comm: Any) -> np.ndarray:
        rb = filled(2 * n)
        comm.Allgather([ar(2, 100 * r), "i"], [rb, "i"])
        return rb

    ck.same_result("Allgather([sb, 'i'], [rb, 'i'])", allgather_i,
                   np.concatenate([ar(2, 100 * i) for i in range(n)]))

    def allgather_displ(comm: Any) -> np.ndarray:
        rb = filled(n + 3)
        comm.Allgather(ar(1, 100 * r), [rb, (1, 2), INT])
        return rb

    want = filled(n + 3)
    want[2:2 + n] = 100 * ar(n)
    ck.same_result("Allgather(sb, [rb, (1, 2), INT]) fills from element 2", allgather_displ, want)

    def works(comm: Any) -> Optional[str]:
        rb = np.zeros(2)
        comm.Allreduce([np.ones(2), "d"], [rb, "d"], MPI.SUM)
        return None if np.array_equal(rb, np.full(2, float(n))) else f"a correct Allreduce then gave {rb}"

    ck.same_error("Allgather([sb], rb): 1 item", lambda comm: comm.Allgather([ar(2)], filled(2 * n)), works)
    ck.same_error("Allreduce([sb, 2, 0, 'd', 0], rb): 5 items",
                  lambda comm: comm.Allreduce([np.ones(2), 2, 0, "d", 0], np.zeros(2), MPI.SUM), works)
    ck.same_error("Allreduce([sb, 'zz'], [rb, 'zz']): unknown typecode",
                  lambda comm: comm.Allreduce([np.ones(2), "zz"], [np.zeros(2), "zz"], MPI.SUM), works)


def check_typed_specs(ck: Checker) -> None:
    """[array, its own datatype] as the bare array (the fast paths take it), twice on the same
    arrays; a datatype that is not the array's own follows its spec, also right after the same
    arrays went the fast way; the general path's kept arguments give way to a changed count, a
    changed op."""
    n, r = ck.n, ck.r
    root = n - 1
    F = MPI.FLOAT

    def bcast(comm: Any) -> np.ndarray:
        b = ar(4, 10) if r == root else filled(4)
        for _ in range(2):
            comm.Bcast([b, INT], root=root)
        return b

    ck.same_result("Bcast([b, INT]) twice", bcast, ar(4, 10))

    def fast_path_taken() -> Optional[str]:
        b = ar(4, 10) if r == root else filled(4)
        ck.comm.Bcast([b, INT], root=root)
        return None if ck.comm._last_bcast[0] is b else "Bcast([b, INT]) did not take the array's fast path"

    ck.unit("Bcast([b, INT]) takes the array's fast path", fast_path_taken)

    def allgather(comm: Any) -> np.ndarray:
        rb = filled(2 * n)
        for _ in range(2):
            comm.Allgather((ar(2, 100 * r), INT), [rb, INT])
        return rb

    ck.same_result("Allgather((sb, INT), [rb, INT]) twice", allgather,
                   np.concatenate([ar(2, 100 * i) for i in range(n)]))

    def floats() -> np.ndarray:
        return np.array([1.5, 2.25, -0.75], np.float32) * (r + 1)

    def allreduce(comm: Any) -> np.ndarray:
        rb = np.zeros(3, np.float32)
        for _ in range(2):
            comm.Allreduce([floats(), F], [rb, F], MPI.SUM)
        return rb

    ck.same_result("Allreduce([sb, FLOAT], [rb, FLOAT]) twice", allreduce, None)

    def allreduce_retyped(comm: Any) -> np.ndarray:
        # The same int32 arrays first as INT (fast path), then read as FLOAT: the second call sums floats.
        sb, rb = floats().view(np.int32), filled(3)
        comm.Allreduce([sb, INT], [rb, INT], MPI.SUM)
        comm.Allreduce([sb, F], [rb, F], MPI.SUM)
        return rb

    ck.same_result("Allreduce([sb, INT], [rb, INT]) then the same arrays as FLOAT", allreduce_retyped, None)

    def reduce_scan(comm: Any) -> np.ndarray:
        rb, sc = np.zeros(3, np.float32), np.zeros(3, np.float32)
        comm.Reduce([floats(), F], [rb, F] if r == root else None, MPI.MAX, root=root)
        comm.Scan([floats(), F], [sc, F], MPI.SUM)
        return np.concatenate([rb, sc])

    ck.same_result("Reduce and Scan of [sb, FLOAT]", reduce_scan, None)

    def rooted(comm: Any) -> np.ndarray:
        g = filled(2 * n)
        comm.Gather([ar(2, 10 * r), INT], [g, INT] if r == root else None, root=root)
        s = filled(2)
        comm.Scatter([ar(2 * n, 7), INT] if r == root else None, [s, INT], root=root)
        a = filled(n)
        comm.Alltoall([ar(n, 10 * r), INT], [a, INT])
        return np.concatenate([g, s, a])

    ck.same_result("Gather, Scatter and Alltoall of [b, INT]", rooted, None)

    def bytes_as_int(comm: Any) -> np.ndarray:
        # A float32 array moved as INT: the bytes travel as they are (the general path reads the spec).
        b = np.arange(4, dtype=np.float32) + 0.5 if r == root else np.zeros(4, np.float32)
        comm.Bcast([b, INT], root=root)
        return b.view(np.int32)

    ck.same_result("Bcast([float32 b, INT])", bytes_as_int, (np.arange(4, dtype=np.float32) + 0.5).view(np.int32))

    # Specs the fast paths leave to the general path reuse its prepared arguments only while
    # nothing in them changed: a count changed in the same list, or a new count, is read anew.
    def counts_changed(comm: Any) -> np.ndarray:
        b = ar(6, 10) if r == root else filled(6)
        spec = [b, 2, INT]
        comm.Bcast(spec, root=root)
        spec[1] = 3
        comm.Bcast(spec, root=root)
        out = b.copy()
        comm.Bcast([b, 5, INT], root=root)
        return np.concatenate([out, b])

    first3 = ar(6, 10) if r == root else np.array([10, 11, 12, -1, -1, -1], np.int32)
    five = ar(6, 10) if r == root else np.array([10, 11, 12, 13, 14, -1], np.int32)
    ck.same_result("Bcast([b, 2, INT]), the count set to 3 in the same list, then [b, 5, INT]", counts_changed,
                   np.concatenate([first3, five]))

    def reduce_counts(comm: Any) -> np.ndarray:
        sb, rb = ar(4, r), filled(4)
        for count in (1, 1, 3, 3, 2):
            comm.Allreduce([sb, count, INT], [rb, count, INT], MPI.SUM)
        comm.Allreduce([sb, "i"], [rb, "i"], MPI.MAX)
        out = rb.copy()
        comm.Allreduce([sb, "i"], [rb, "i"], MPI.SUM)  # the same specs, another op
        return np.concatenate([out, rb])

    ck.same_result("Allreduce with counts 1, 1, 3, 3, 2, then typecode specs with MAX and SUM", reduce_counts,
                   np.concatenate([ar(4, n - 1), n * ar(4) + n * (n - 1) // 2]))


# -- 6. device memory runs in the wrapped communicator ----------------------------------
def check_device_buffers(ck: Checker) -> None:
    """Device memory: the call runs in the wrapped communicator, with the arguments as given."""
    n, r = ck.n, ck.r
    root = n - 1

    def handed_on(label: str, call: Callable[[Any], np.ndarray], want: np.ndarray, method: Optional[str]) -> None:
        """A unit: call(comm) gives mpi4py's result on the pymcoll.Comm too, and
        ran there as `method` of the wrapped communicator (None: not there)."""
        def body() -> Optional[str]:
            ref = call(ck.world)
            SpyComm.seen.clear()
            got = call(ck.comm)
            expected = [method] if method else []
            if SpyComm.seen != expected:
                return f"the wrapped communicator ran {SpyComm.seen}, expected {expected}"
            return compare(got, ref, want)

        ck.unit(label, body)

    def allreduce(comm: Any, wrap: Callable[[np.ndarray], Any]) -> np.ndarray:
        rb = np.zeros(3)
        comm.Allreduce(wrap(np.arange(3.0) + r), wrap(rb), MPI.SUM)
        return rb

    sums = np.arange(3.0) * n + n * (n - 1) / 2
    # Host memory stays in pymcoll's core: the wrapped communicator sees nothing.
    handed_on("Allreduce(numpy, numpy) runs in pymcoll's core", lambda comm: allreduce(comm, lambda a: a), sums, None)
    handed_on("Allreduce(device, device)", lambda comm: allreduce(comm, FakeDevice), sums, "Allreduce")

    def iallreduce(comm: Any) -> np.ndarray:
        rb = np.zeros(3)
        comm.Iallreduce(FakeDevice(np.arange(3.0) + r), FakeDevice(rb), MPI.SUM).Wait()
        return rb

    handed_on("Iallreduce(device, device)", iallreduce, sums, "Iallreduce")

    def bcast(comm: Any) -> np.ndarray:
        b = np.arange(4.0) + 7 if r == root else np.full(4, -1.0)
        comm.Bcast(FakeDevice(b), root=root)
        return b

    handed_on("Bcast(device)", bcast, np.arange(4.0) + 7, "Bcast")

    def allgather(comm: Any) -> np.ndarray:
        rb = np.full(2 * n, -1.0)
        comm.Allgather(FakeDevice(np.full(2, r + 0.5)), FakeDevice(rb))
        return rb

    handed_on("Allgather(device, device)", allgather, np.repeat(np.arange(n) + 0.5, 2), "Allgather")

    def gatherv(comm: Any) -> np.ndarray:
        rb = np.full(3 * n, -1.0)
        comm.Gatherv(FakeDevice(np.full(1, r + 0.5)), [FakeDevice(rb), 1, 3, MPI.DOUBLE] if r == 0 else None, root=0)
        return rb

    want = np.full(3 * n, -1.0)
    if r == 0:
        want[0::3] = np.arange(n) + 0.5
    handed_on("Gatherv(device, [device, 1, 3, DOUBLE])", gatherv, want, "Gatherv")

    def read_only() -> Optional[str]:
        def call(comm: Any) -> None:
            comm.Allreduce(FakeDevice(np.ones(3)), FakeDevice(np.zeros(3), readonly=True), MPI.SUM)

        ref = caught(call, ck.world)
        SpyComm.seen.clear()
        got = caught(call, ck.comm)
        if SpyComm.seen != ["Allreduce"]:
            return f"the wrapped communicator ran {SpyComm.seen}: pymcoll refused the call itself"
        if error_mismatch(got, ref) is not None or str(got) != str(ref):
            return f"pymcoll raised {describe(got) if got else 'nothing'}; mpi4py {describe(ref) if ref else 'nothing'}"
        return None

    ck.unit("Allreduce(device, read-only device) is passed on to MPI", read_only)

    def dlpack_device() -> Optional[str]:
        def data() -> np.ndarray:
            return ar(4, 30) if r == root else filled(4)

        mine = VersionedProducer(data(), device=2, staged=False)
        ck.world.Bcast(mine, root=root)

        def refuse(obj: Any, arg: str) -> None:
            raise AssertionError(f"{arg}: pymcoll consumed a DLPack tensor on device 2 itself")

        import pymcoll.dlpack as consumer  # pymcoll's own DLPack consumer, refused for this call

        theirs = VersionedProducer(data(), device=2, staged=False)
        SpyComm.seen.clear()
        view, consumer.View = consumer.View, refuse  # type: ignore[assignment]
        try:
            ck.comm.Bcast(theirs, root=root)
        finally:
            consumer.View = view  # type: ignore[misc]
        if SpyComm.seen != ["Bcast"]:
            return f"the wrapped communicator ran {SpyComm.seen}, expected ['Bcast']"
        if theirs.exports != mine.exports:
            return f"__dlpack__ ran {theirs.exports} times through pymcoll, {mine.exports} through mpi4py alone"
        return compare(theirs.backing, mine.backing, ar(4, 30))

    ck.unit("Bcast(DLPack producer on device 2) is left to mpi4py", dlpack_device)


# -- 7. DLPack producers: the memory is used while the capsule is held, the deleter runs once --
def settled(producers: list[HostTensor], got: np.ndarray, ref: np.ndarray) -> Optional[str]:
    """Each producer exported once and saw its deleter once; got equals mpi4py's ref."""
    gc.collect()
    for p in producers:
        if (p.exports, p.deletes) != (1, 1):
            return f"{type(p).__name__}: {p.exports} capsules, {p.deletes} deleter calls (want 1 and 1)"
    return compare(got, ref, None)


def check_dlpack_producers(ck: Checker) -> None:
    """pymcoll consumes ctypes DLPack producers: right data, one capsule, one deleter call."""
    n, r = ck.n, ck.r
    root = n - 1

    def bcast(cls: type[HostTensor]) -> Callable[[], Optional[str]]:
        def body() -> Optional[str]:
            ref = ar(4, 10) if r == root else filled(4)
            ck.world.Bcast(ref, root=root)  # mpi4py, on the same data in a numpy array
            p = cls(ar(4, 10) if r == root else filled(4))
            ck.comm.Bcast(p, root=root)
            return settled([p], p.backing, ref)

        return body

    ck.unit("Bcast(LegacyProducer)", bcast(LegacyProducer))
    ck.unit("Bcast(VersionedProducer)", bcast(VersionedProducer))

    def allreduce() -> Optional[str]:
        ref = filled(3)
        ck.world.Allreduce(ar(3, r), ref, MPI.SUM)
        p, q = LegacyProducer(ar(3, r)), LegacyProducer(filled(3))
        ck.comm.Allreduce(p, q, MPI.SUM)
        return settled([p, q], q.backing, ref)

    ck.unit("Allreduce(LegacyProducer, LegacyProducer)", allreduce)

    def allgather() -> Optional[str]:
        ref = filled(2 * n)
        ck.world.Allgather(ar(2, 100 * r), ref)
        p, q = LegacyProducer(ar(2, 100 * r)), LegacyProducer(filled(2 * n))
        ck.comm.Allgather(p, q)
        return settled([p, q], q.backing, ref)

    ck.unit("Allgather(LegacyProducer, LegacyProducer)", allgather)

    def iallreduce() -> Optional[str]:
        ref = filled(3)
        ck.world.Allreduce(ar(3, r), ref, MPI.SUM)
        p, q = LegacyProducer(ar(3, r)), LegacyProducer(filled(3))
        req = ck.comm.Iallreduce(p, q, MPI.SUM)
        gc.collect()
        early = q.deletes  # the receive memory must stay ours until the request completes
        req.Wait()
        del req
        if early:
            return "the receive tensor's deleter ran before Wait"
        return settled([p, q], q.backing, ref)

    ck.unit("Iallreduce(LegacyProducer, LegacyProducer)", iallreduce)

    def read_only() -> Optional[str]:
        def call(comm: Any, producer: HostTensor) -> None:
            comm.Allreduce(ar(3, r), producer, MPI.SUM)

        ref = caught(lambda comm: call(comm, VersionedProducer(filled(3), readonly=True)), ck.world)
        q = VersionedProducer(filled(3), readonly=True)
        problem = error_mismatch(caught(lambda comm: call(comm, q), ck.comm), ref)
        gc.collect()
        if problem:
            return problem
        if (q.exports, q.deletes) != (1, 1):
            return f"read-only receive tensor: {q.exports} capsules, {q.deletes} deleter calls (want 1 and 1)"
        return None

    ck.unit("Allreduce(sendbuf, read-only VersionedProducer) raises BufferError", read_only)


# -- 8. argument errors every rank makes: mpi4py's class, and the communicator still works --
def allgatherv_works(ck: Checker, comm: Any) -> Optional[str]:
    """None if a correct Allgatherv (counts i + 1) works on comm."""
    n, r = ck.n, ck.r
    counts = [i + 1 for i in range(n)]
    rb = filled(sum(counts))
    comm.Allgatherv(ar(r + 1, 100 * r), [rb, counts, None, INT])
    want = np.concatenate([ar(i + 1, 100 * i) for i in range(n)])
    return None if np.array_equal(rb, want) else f"a correct Allgatherv then gave {rb.tolist()}"


def check_argument_errors(ck: Checker) -> None:
    """Mistakes every rank makes raise mpi4py's class before any data moves; the communicator still works."""
    n, r = ck.n, ck.r
    root = n - 1

    def bcast_works(comm: Any) -> Optional[str]:
        b = ar(3, 5) if r == root else filled(3)
        comm.Bcast([b, INT], root=root)
        return None if np.array_equal(b, ar(3, 5)) else f"a correct Bcast then gave {b.tolist()}"

    for label, spec in (("[b]: 1 item", lambda b: [b]),
                        ("[b, 1, 0, INT, 0]: 5 items", lambda b: [b, 1, 0, INT, 0]),
                        ("[b, -1, INT]: negative count", lambda b: [b, -1, INT]),
                        ("[b, 1.5, INT]: float count", lambda b: [b, 1.5, INT]),
                        ("[b, 'zz']: unknown typecode", lambda b: [b, "zz"]),
                        ("None", lambda b: None)):
        ck.same_error(f"Bcast({label})", lambda comm: comm.Bcast(spec(filled(3)), root=root), bcast_works)

    def v_works(comm: Any) -> Optional[str]:
        return allgatherv_works(ck, comm)

    big = filled(4 * n + 4)
    for label, spec, mpi in (
            ("[rb, [-1] * n, None, INT]: negative counts", [big, [-1] * n, None, INT], MPI.ERR_COUNT),
            ("[rb, [1] * (n + 1), None, INT]: n + 1 counts", [big, [1] * (n + 1), None, INT], None),
            ("[rb, 1.5, None, INT]: float count", [big, 1.5, None, INT], None)):
        ck.same_error(f"Allgatherv(sendbuf, {label})", lambda comm: comm.Allgatherv(ar(1), spec), v_works, mpi)
    ck.same_error("Alltoallv with negative counts on both sides",
                  lambda comm: comm.Alltoallv([ar(n), [-1] * n, None, INT], [filled(n), [-1] * n, None, INT]),
                  v_works, MPI.ERR_COUNT)


# -- known pymcoll bugs (run on their own: see tests/test_mpi4py_forms.py) ----------------
def check_error_kept_in_cycle(ck: Checker) -> None:
    """An argument error raised after pymcoll parsed numpy buffers, kept in a
    reference cycle (the exception in a local of a frame its traceback holds,
    as `except ... as e: err = e` makes), is collected without a crash."""
    n = ck.n

    def keep(comm: Any) -> None:
        try:
            comm.Allgather(np.zeros(3), np.zeros(2 * n))  # sizes disagree: raised after both are parsed
        except ValueError as e:
            err = e  # noqa: F841 - the cycle: exception -> traceback -> this frame -> exception

    def body() -> Optional[str]:
        keep(ck.comm)
        gc.collect()  # pymcoll's bug: SIGSEGV here
        return None

    ck.unit("Allgather(3 elements, 2 n elements) raising ValueError, then gc.collect()", body)


CHECKS: dict[str, Callable[[Checker], None]] = {
    "allgatherv-strides": check_allgatherv_strides,
    "alltoallv-strides": check_alltoallv_strides,
    "gatherv-strides-root0": check_gatherv_strides_root0,
    "gatherv-strides-rootlast": check_gatherv_strides_rootlast,
    "scatterv-strides": check_scatterv_strides,
    "tuple-vs-list": check_tuple_vs_list,
    "tuple-list-reuse": check_tuple_list_reuse,
    "none-forms": check_none_forms,
    "reduce-scatter-counts": check_reduce_scatter_counts,
    "typecodes-and-items": check_typecodes_and_items,
    "typed-specs": check_typed_specs,
    "device-buffers": check_device_buffers,
    "dlpack-producers": check_dlpack_producers,
    "argument-errors": check_argument_errors,
    "error-kept-in-cycle": check_error_kept_in_cycle,
}


def body() -> None:
    """Run the selected checks; raise if any failed (common.main aborts the job)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated checks to run (default: all)")
    ap.add_argument("--skip", default="", help="comma-separated checks to leave out")
    ap.add_argument("--keep-going", action="store_true", help="run a check's later units after a failed one")
    args = ap.parse_args()
    only = [c for c in args.only.split(",") if c] or list(CHECKS)
    skip = {c for c in args.skip.split(",") if c}
    unknown = (set(only) | skip) - set(CHECKS)
    if unknown:
        raise SystemExit(f"unknown checks: {sorted(unknown)}; known: {list(CHECKS)}")
    ck = Checker(MPI.COMM_WORLD, keep_going=args.keep_going)
    for name in only:
        if name not in skip:
            ck.run(name, CHECKS[name])
    ck.comm.Free()
    ck.verdicts.Free()
    if ck.failures:
        raise AssertionError(f"{len(ck.failures)} failed units:\n" + "\n".join(ck.failures))
    if ck.r == 0:
        print(f"mpi4py forms: all checks passed at {ck.n} ranks", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main(body)
