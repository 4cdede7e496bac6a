"""pymcoll.Comm: a drop-in wrapper of an mpi4py communicator."""

from __future__ import annotations

import atexit
import inspect
import sys
import warnings
import weakref
from typing import Any, Callable, Optional

import numpy as np
from mpi4py import MPI

from . import arguments, config, elements, tracing
from ._native import ffi, lib
from .errors import CommBrokenError, Error, PeerFailedError, SegmentError, TimeoutError
from .layout import Layout
from .requests import Prequest, Request

_live: "weakref.WeakSet[Comm]" = weakref.WeakSet()

# Bound once: the small-message fast paths below run in a few hundred ns,
# so attribute lookups on every call would show in the latency.
_ndarray = np.ndarray
_modules = sys.modules
_from_buffer = ffi.from_buffer
_IN_PLACE = MPI.IN_PLACE
_Datatype = MPI.Datatype
_SPECS = frozenset((list, tuple))  # `type(x) in` a frozenset hashes; in a tuple it compares (15 ns more)
_pmc_barrier = lib.pmc_barrier
_pmc_bcast = lib.pmc_bcast
_pmc_allgather = lib.pmc_allgather
_pmc_allreduce = lib.pmc_allreduce
_pmc_reduce = lib.pmc_reduce
_pmc_gather = lib.pmc_gather
_pmc_scatter = lib.pmc_scatter
_pmc_alltoall = lib.pmc_alltoall
_pmc_reduce_scatter_block = lib.pmc_reduce_scatter_block
_pmc_scan = lib.pmc_scan
_pmc_exscan = lib.pmc_exscan
_pmc_run = lib.pmc_run
_NULL = ffi.NULL
_cast = ffi.cast


def _void(p: Any) -> Any:
    """`p` (an address, or a buffer's cffi pointer) as ``void *``. The last-call caches hold this
    form: cffi passes a ``void *`` faster than the ``char[]`` of ``from_buffer`` (about 17 ns per
    argument). A cache keeps the ``from_buffer`` pointer too: its buffer export is what stops numpy
    from moving or resizing the array."""
    return _cast("void *", p)


_OP_CODES = {op.handle: code for op, code, _ in elements.OPS}
# The fast paths remember their last call's arrays (and keep them alive, so
# their data pointers and sizes cannot change): a loop that calls the same
# collective on the same arrays skips the buffer checks after the first call.
_NONE = object()
_EMPTY = (_NONE,) * 10
_elem_of_dtype = elements.code_of_numpy  # cached per dtype there
_code_of_datatype = elements.code_of_datatype


def _host_array(obj: Any) -> Any:
    """A numpy view (the same memory) of a CPU torch tensor that the fast paths can take, else `obj`.

    torch's own bindings make the general path's checks of a tensor cost tens of microseconds a call;
    the view costs one. Left to the general path: tensors off the CPU, requiring grad, of bfloat16
    (numpy has none), not contiguous, or that numpy cannot view. The view is made anew every call and the last-call
    caches keep the view, not the tensor: a tensor can be given new memory in place (``resize_``,
    ``set_``), an array cannot."""
    if type(obj) is _ndarray:
        return obj
    torch = _modules.get("torch")
    if torch is None or type(obj) is not torch.Tensor:
        return obj
    if not obj.is_cpu or obj.requires_grad or obj.dtype is torch.bfloat16 or not obj.is_contiguous():
        return obj  # the general path takes it (and names a tensor's own mistakes)
    try:
        return obj.numpy()
    except (RuntimeError, TypeError):  # conjugate or negative views, and other kinds numpy cannot see
        return obj


def _typed_array(spec: Any) -> Any:
    """The array of ``[array, datatype]`` when the datatype is a predefined MPI type of the array's own
    elements (mpi4py's usual spelling of the bare array: the same message), else `spec`, which the
    general path then reads by mpi4py's rules."""
    if len(spec) != 2:
        return spec
    arr, datatype = spec
    if type(arr) is not _ndarray:
        arr = _host_array(arr)
        if type(arr) is not _ndarray:
            return spec
    if not isinstance(datatype, _Datatype):
        return spec
    code = _code_of_datatype(datatype)
    return arr if code is not None and code == _elem_of_dtype(arr.dtype) else spec


def _snap(value: Any) -> Any:
    """A value of a buffer spec as it is now: counts and displacements copied
    (the caller may change its lists in place), other objects by identity
    (the recall cache keeps them alive, so the identity cannot be reused)."""
    t = type(value)
    # Tagged by type: a tuple and a list of the same numbers mean different
    # things in a v-spec ((counts, displs) against counts).
    if t is list:
        return list, tuple(value)
    if t is tuple:
        return tuple, tuple([_snap(v) for v in value])
    if t is _ndarray:
        return _ndarray, tuple(value.tolist())
    if t is int or value is None:
        return value
    return id(value)


#: Matches no call: Scatterv's and Gatherv's quick path is closed.
_NO_QUICK = (object(), object(), None, None, None, None, None)


def _guard(spec: Any) -> Any:
    """What a later call's buffer spec must match to reuse this call's prepared
    arguments (checked by _unchanged): the same numpy array (a numpy array
    cannot move or resize while the prepared call holds its buffer) with the
    same dtype, equal counts and displacements, the same datatype object.
    None when the spec cannot be reused."""
    t = type(spec)
    if t is _ndarray:
        return spec, spec.dtype
    if (t is list or t is tuple) and spec:
        buf = spec[0]
        if type(buf) is not _ndarray:
            return None
        if t is list and len(spec) == 4 and type(spec[1]) is list and type(spec[2]) is list:
            # [buf, counts, displs, datatype]: the common v-form spec, compared field by field.
            return buf, buf.dtype, [buf, spec[1][:], spec[2][:], spec[3]], spec[3], None
        return buf, buf.dtype, _snap(tuple(spec[1:]))
    if spec is None or spec is _IN_PLACE:
        return (spec,)
    return None


def _unchanged(spec: Any, g: tuple) -> bool:
    """Whether spec still matches the guard _guard made of an earlier spec
    (a new list with equal contents matches: specs are often written inline)."""
    n = len(g)
    if n == 2:
        return spec is g[0] and spec.dtype is g[1]
    if n == 5:
        # One list comparison once the items it would compare elementwise
        # (the array, the counts) are known to be the same object or lists;
        # the datatype must be the same object (a freed handle can be reused).
        return (type(spec) is list and len(spec) == 4 and spec[0] is g[0] and type(spec[1]) is list
                and type(spec[2]) is list and spec == g[2] and spec[3] is g[3] and g[0].dtype is g[1])
    if n == 1:
        return spec is g[0]
    t = type(spec)
    return ((t is list or t is tuple) and len(spec) > 0 and spec[0] is g[0] and g[0].dtype is g[1]
            and _snap(tuple(spec[1:])) == g[2])


def _nd(buf: Any, writable: bool) -> Any:
    """cffi pointer of a C-contiguous numpy array of plain data (None otherwise:
    the general path then handles the buffer and explains any error)."""
    if type(buf) is not _ndarray or buf.dtype.hasobject or (writable and not buf.flags.writeable):
        return None
    try:
        return _from_buffer(buf)
    except Exception:  # noqa: BLE001 - not contiguous: the general path says so
        return None


@atexit.register
def _free_all() -> None:
    # Runs before mpi4py finalizes MPI (registered later, so it runs first).
    for c in list(_live):
        c._release()


def forget_remembered_calls() -> None:
    """Drop every communicator's remembered last calls and the arrays they
    keep alive (pymcoll.alloc does this before it reports the heap full)."""
    for c in list(_live):
        c._forget_calls()


def _raise_status(rc: int, handle: Any, what: str) -> None:
    msg = ffi.string(lib.pmc_comm_errmsg(handle)).decode(errors="replace") if handle != ffi.NULL else ""
    _raise_text(rc, msg or f"{what}: {ffi.string(lib.pmc_strerror(rc)).decode()}")


def _raise_text(rc: int, text: str) -> None:
    if rc == lib.PMC_ERR_TIMEOUT:
        raise TimeoutError(text)
    if rc in (lib.PMC_ERR_PEER_DEAD, lib.PMC_ERR_PEER_ABORTED):
        raise PeerFailedError(text)
    if rc == lib.PMC_ERR_BROKEN:
        raise CommBrokenError(text)
    if rc in (lib.PMC_ERR_ARG, lib.PMC_ERR_MISMATCH):
        raise ValueError(text)
    if rc == lib.PMC_ERR_NOMEM:
        raise MemoryError(text)
    if rc == lib.PMC_ERR_SHM:
        raise SegmentError(text)
    raise Error(text)


def _auto_size(value: Any) -> int:
    """The core's form of an 'auto' / 'off' / size option: 0, UINT64_MAX or the size."""
    return 2**64 - 1 if value == "off" else 0 if value == "auto" else int(value)


class Comm:
    """A communicator whose collectives run through pymcoll's C core.

    Wraps an mpi4py communicator (not a subclass): the buffer-API methods it
    implements have mpi4py's names, arguments and semantics; every other
    public attribute of mpi4py's intracommunicator and topology classes is
    forwarded to the wrapped communicator, available as ``mpi``.

    Args:
        comm: the mpi4py intracommunicator to wrap (or another pymcoll.Comm).
        node_size: group consecutive ranks into virtual nodes of this size
            (default: ``PYMCOLL_NODE_SIZE``, else real nodes).
        lanes: cap on the lane count (default: ``PYMCOLL_LANES``).
        timeout: seconds a collective waits for a local rank before raising
            :class:`pymcoll.TimeoutError`; 0 waits forever
            (default: ``PYMCOLL_TIMEOUT``, else 300).
        wait: how a waiting rank uses its CPU: "auto" (spin, then yield, then
            sleep) or "sleep" (sleep at once, for a communication thread that
            shares its CPU with compute threads); default ``PYMCOLL_WAIT``.
            Ranks may differ.

    Creating one is collective over `comm`.
    """

    def __init__(self, comm: Any, node_size: Optional[int] = None, lanes: Optional[int] = None,
                 timeout: Optional[float] = None, wait: Optional[str] = None) -> None:
        self._handle = ffi.NULL
        if isinstance(comm, Comm):
            comm = comm.mpi
        if not isinstance(comm, MPI.Comm):
            raise TypeError(f"comm: expected an mpi4py communicator (e.g. MPI.COMM_WORLD), "
                            f"got {type(comm).__name__}")
        if comm == MPI.COMM_NULL:
            raise ValueError("comm: MPI.COMM_NULL cannot be wrapped; pass a valid communicator")
        if comm.Is_inter():
            raise ValueError("comm: intercommunicators are not supported; wrap an intracommunicator")
        for name, v in (("node_size", node_size), ("lanes", lanes)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name}: expected an integer >= 1 or None, got {v!r}")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout: expected seconds >= 0 (0 = no deadline) or None, got {timeout!r}")
        if wait is not None and wait not in config.WAIT_POLICIES:
            raise ValueError(f"wait: expected 'auto' or 'sleep' (or None for PYMCOLL_WAIT), got {wait!r}")
        self._mpi = comm
        self._options = {"node_size": node_size, "lanes": lanes, "timeout": timeout, "wait": wait}
        ns = config.value("PYMCOLL_NODE_SIZE", node_size)
        self._virtual_node_size = ns
        cfg = ffi.new("pmc_config *")
        cfg.timeout = float(config.value("PYMCOLL_TIMEOUT", timeout))
        cfg.node_size = ns or 0
        cfg.node_cyclic = int(config.value("PYMCOLL_NODE_LAYOUT") == "cyclic")
        self._virtual_node_layout = "cyclic" if cfg.node_cyclic and ns else "block"
        cfg.lanes = config.value("PYMCOLL_LANES", lanes) or 0
        cfg.shm_mode = lib.PMC_SHM_OFF if config.value("PYMCOLL_SHM") == "off" else lib.PMC_SHM_AUTO
        cfg.shm_bytes = config.value("PYMCOLL_SHM_SIZE")
        cfg.chunk_bytes = config.value("PYMCOLL_CHUNK_SIZE")
        cfg.heap_bytes = config.value("PYMCOLL_HEAP_SIZE")
        cfg.check = int(bool(config.value("PYMCOLL_CHECK")))
        cfg.progress_thread = int(bool(config.value("PYMCOLL_PROGRESS_THREAD")))
        cfg.wait_sleep = int(config.value("PYMCOLL_WAIT", wait) == "sleep")
        cfg.huge_off = int(config.value("PYMCOLL_HUGE_PAGES") == "off")
        cfg.stream_min = _auto_size(config.value("PYMCOLL_STREAM_MIN"))
        cfg.movsb_min = _auto_size(config.value("PYMCOLL_CELL_MOVSB_MIN"))
        cfg.inline_max = config.value("PYMCOLL_INLINE_MAX")
        cma_min = config.value("PYMCOLL_CMA_MIN")
        cfg.cma_min = 0 if cma_min == "auto" else cma_min  # 0: each collective's default
        cfg.flat_max = config.value("PYMCOLL_REDUCE_FLAT_MAX")
        cfg.lanes_small_max = config.value("PYMCOLL_LANES_SMALL_MAX")
        cfg.lanes_direct_min = config.value("PYMCOLL_LANES_DIRECT_MIN")
        cfg.lanes_bcast_tree_max = config.value("PYMCOLL_LANES_BCAST_TREE_MAX")
        cfg.copy = config.COPY_MODES.index(config.value("PYMCOLL_COPY"))
        cfg.fixed_paths = int(not config.value("PYMCOLL_PATH_TRIALS"))
        for i, coll in enumerate(config.COLLECTIVES):
            cfg.algorithm[i] = config.ALGORITHMS.index(config.value(config.algorithm_option(coll)))
        self._orphans: list = []  # freed-while-active requests: (handle, call)
        self._forget_calls()
        self._shm_dir = ffi.new("char[]", str(config.value("PYMCOLL_SHM_DIR")).encode())
        cfg.shm_dir = self._shm_dir
        tracing.ensure_setup()
        out = ffi.new("pmc_comm **")
        why = ffi.new("char[]", 1024)
        rc = lib.pmc_comm_create_why(comm.handle, cfg, out, why, 1024)
        if rc != lib.PMC_OK:
            reason = ffi.string(why).decode(errors="replace")
            _raise_text(rc, f"pymcoll.Comm creation: {reason or ffi.string(lib.pmc_strerror(rc)).decode()}")
        self._handle = out[0]
        _live.add(self)
        self._layout = self._read_layout()
        self._rank, self._size = self._layout.rank, self._layout.size
        note = ffi.string(lib.pmc_comm_note(self._handle)).decode(errors="replace")
        self.note = note
        if note and config.value("PYMCOLL_SHM") != "off" and self._layout.rank == 0:
            warnings.warn(f"pymcoll: {note}", RuntimeWarning, stacklevel=2)

    # -- plumbing ---------------------------------------------------------
    def _read_layout(self) -> Layout:
        lay = ffi.new("pmc_layout *")
        lib.pmc_comm_layout(self._handle, lay)
        node_of = ffi.new("int[]", lay.size)
        local_of = ffi.new("int[]", lay.size)
        lib.pmc_comm_rank_map(self._handle, node_of, local_of)
        return Layout(
            rank=lay.rank, size=lay.size, node=lay.node, nnodes=lay.nnodes,
            local_rank=lay.local_rank, local_size=lay.local_size, lanes=lay.lanes, lane=lay.lane,
            min_local=lay.min_local, max_local=lay.max_local,
            node_of=tuple(node_of), local_of=tuple(local_of),
            shm_active=bool(lay.shm_active), consecutive=bool(lay.consecutive),
            segment_bytes=lay.segment_bytes, data_bytes=lay.data_bytes, chunk_bytes=lay.chunk_bytes,
            cma_ok=bool(lay.cma_ok),
            virtual_node_size=self._virtual_node_size,
            virtual_node_layout=self._virtual_node_layout,
        )

    def _live_handle(self, what: str) -> Any:
        if self._handle == ffi.NULL:
            raise CommBrokenError(f"{what}: this pymcoll.Comm was freed; create a new one")
        return self._handle

    def _check(self, rc: int, what: str) -> None:
        if rc != lib.PMC_OK:
            self._live_handle(what)
            _raise_status(rc, self._handle, what)

    def _release(self) -> None:
        if self._handle != ffi.NULL:
            _live.discard(self)
            lib.pmc_comm_free(self._handle)
            self._handle = ffi.NULL
            for h, _ in self._orphans:
                lib.pmc_request_free(h)
            self._orphans = []
            self._forget_calls()

    def _forget_calls(self) -> None:
        self._last_bcast = self._last_allgather = self._last_allreduce = _EMPTY
        self._last_gather = self._last_scatter = self._last_alltoall = _EMPTY
        # What _quick made of the last Scatterv and Gatherv (attributes: read before every call).
        self._quick_scatterv: tuple = _NO_QUICK
        self._quick_gatherv: tuple = _NO_QUICK
        self._last_reduction: dict = {}
        self._recalled: dict = {}

    def _recall(self, name: str, sendbuf: Any, recvbuf: Any, extra: Any) -> bool:
        """Blocking run that reuses the last call's prepared arguments when the
        buffer specs are unchanged and `extra` (root, counts, op: plain values)
        is equal: a loop over the same arrays and counts skips parsing the
        v-form specs, which costs more than the collective. False when the
        call has to be prepared (then `_prepare_and_run`)."""
        last = self._recalled.get(name)
        if last is None or extra != last[0]:
            return False
        if not (_unchanged(sendbuf, last[1]) and _unchanged(recvbuf, last[2])):
            return False
        call = last[3]
        if call.before:
            for step in call.before:
                step()
        rc = _pmc_run(self._handle, call.args)
        if rc:
            self._check(rc, name)
        if call.after:
            call.finish()
        return True

    def _rooted_v(self, name: str, sendbuf: Any, recvbuf: Any, root: int,
                  prepare: Callable[..., arguments.PreparedCall], args: tuple) -> None:
        """Scatterv or Gatherv when the quick check found a change: recalled or prepared (sendbuf and
        recvbuf as the root needs them, None where MPI ignores them; args for `prepare`)."""
        if not self._recall(name, sendbuf, recvbuf, root):
            self._prepare_and_run(name, sendbuf, recvbuf, root, prepare, *args)
        vspec, plain = (recvbuf, sendbuf) if name == "Gatherv" else (sendbuf, recvbuf)
        q = self._quick(name, vspec, plain, root)
        if name == "Gatherv":
            self._quick_gatherv = q
        else:
            self._quick_scatterv = q

    def _quick(self, name: str, vspec: Any, plain: Any, root: Any) -> tuple:
        """What Scatterv and Gatherv check before rerunning the call kept for `name` with fewer
        Python steps than `_recall` (rooted calls in a loop, as a data loader makes them, are
        often as short as that Python): (vspec, plain, root, a copy of the root's
        ``[buf, counts, displs, datatype]`` list, plain's dtype, the prepared arguments, buf's
        dtype); _NO_QUICK when the call needs more. The check: the same objects, and the
        root's list equal to the copy (one list comparison: the buffer compares by identity,
        checked first, the counts and displacements by value), so a list changed in place
        no longer matches."""
        last = self._recalled.get(name)  # kept for exactly these specs (see _prepare_and_run)
        if last is None:
            return _NO_QUICK
        call = last[3]
        if call.before or call.after or call.delegate is not None:
            return _NO_QUICK
        if vspec is None:
            vdesc = None
        elif type(vspec) is list and len(vspec) == 4 and type(vspec[0]) is _ndarray and type(vspec[1]) is list \
                and type(vspec[2]) is list:
            vdesc = [vspec[0], vspec[1][:], vspec[2][:], vspec[3]]
        else:
            return _NO_QUICK
        if plain is None or plain is _IN_PLACE:
            pdesc = None
        elif type(plain) is _ndarray:
            pdesc = plain.dtype
        else:
            return _NO_QUICK
        return (vspec, plain, root, vdesc, pdesc, call.args, None if vdesc is None else vspec[0].dtype)

    def _general(self, name: str, sendbuf: Any, recvbuf: Any, extra: Any,
                 prepare: Callable[..., arguments.PreparedCall], *args: Any) -> None:
        """A call the fast paths did not take (a spec with a count, a displacement, a typecode or
        another datatype; a derived datatype): the last such call's prepared arguments again when
        its specs and `extra` (root, id of the op: the kept arguments hold the op) are unchanged,
        else prepared from the specs (a few microseconds of Python) and kept."""
        if not self._recall(name, sendbuf, recvbuf, extra):
            self._prepare_and_run(name, sendbuf, recvbuf, extra, prepare, *args)

    def _prepare_and_run(self, name: str, sendbuf: Any, recvbuf: Any, extra: Any,
                         prepare: Callable[..., arguments.PreparedCall], *args: Any) -> None:
        """Prepare a call from its specs, run it, and keep it for `_recall`
        (sendbuf, recvbuf and extra as given to `_recall`; args for prepare)."""
        call = prepare(self, *args)
        gs, gr = _guard(sendbuf), _guard(recvbuf)
        if call.delegate is None and gs is not None and gr is not None:
            # args keep the specs' objects alive, so identities stay theirs.
            self._recalled[name] = (extra, gs, gr, call, args)
        else:  # an entry for other specs must not outlive this call (_quick trusts it)
            self._recalled.pop(name, None)
        self._run(call)

    # -- running prepared calls ---------------------------------------------
    def _run(self, call: arguments.PreparedCall) -> None:
        """Blocking run of a prepared call."""
        if call.delegate is not None:
            name, args = call.delegate
            self._external(call, 0, getattr(self._mpi, name), args)
            return
        h = self._live_handle(self._name_of(call))
        for step in call.before:
            step()
        rc = lib.pmc_run(h, call.args)
        if rc:
            self._check(rc, self._name_of(call))
        call.finish()

    def _start(self, call: arguments.PreparedCall) -> Request:
        """Non-blocking start of a prepared call."""
        if call.delegate is not None:
            name, args = call.delegate
            start = getattr(self._mpi, "I" + name[0].lower() + name[1:])
            req = Request(self, ffi.NULL, call)
            req._mpi_request, req._external_seq = self._external(call, 1, start, args, end=False)
            return req
        req = self._create(call, persistent=False)
        rc = lib.pmc_request_start(req._handle)
        if rc:
            self._check(rc, self._name_of(call))
        return req

    def _persist(self, call: arguments.PreparedCall) -> Prequest:
        """A persistent request of a prepared call (not started)."""
        if call.delegate is not None:
            name, args = call.delegate
            return Prequest(self, ffi.NULL, call, getattr(self._mpi, name + "_init")(*args))
        return self._create(call, persistent=True)

    def _external(self, call: arguments.PreparedCall, mode: int, fn: Callable[..., Any], args: tuple,
                  end: bool = True) -> Any:
        """Run a delegated call in the wrapped communicator, numbered and traced
        like the core's calls (algorithm "mpi"); mode 0 blocking, 1
        non-blocking, 2 persistent start. With end=False the record stays
        open for the request's completion. Returns (fn's result, call number)."""
        h = self._live_handle(self._name_of(call))
        seq = lib.pmc_external_begin(h, call.args, mode)
        try:
            out = fn(*args)
        except MPI.Exception:
            lib.pmc_external_end(h, seq, lib.PMC_ERR_MPI)
            raise
        except BaseException:
            lib.pmc_external_end(h, seq, lib.PMC_ERR_ARG)
            raise
        if end:
            lib.pmc_external_end(h, seq, lib.PMC_OK)
        return out, seq

    def _external_done(self, seq: int, status: int) -> None:
        """A delegated request's completion, for its trace record."""
        if seq and self._handle != ffi.NULL:
            lib.pmc_external_end(self._handle, seq, status)

    def _create(self, call: arguments.PreparedCall, persistent: bool) -> Any:
        h = self._live_handle(self._name_of(call))
        self._reap()
        out = ffi.new("pmc_request **")
        rc = lib.pmc_request_create(h, call.args, int(persistent), out)
        if rc:
            self._check(rc, self._name_of(call))
        for step in call.before if not persistent else ():
            step()
        return (Prequest if persistent else Request)(self, out[0], call)

    def _adopt(self, handle: Any, call: arguments.PreparedCall) -> None:
        """Keep a request freed while active (and its buffers) until it completes."""
        self._orphans.append((handle, call))

    def _reap(self) -> None:
        if not self._orphans:
            return
        keep = []
        for h, call in self._orphans:
            if lib.pmc_request_active(h):
                keep.append((h, call))
            else:
                lib.pmc_request_free(h)
        self._orphans = keep

    def _raise_request_error(self, rc: int, msg: str, what: str) -> None:
        _raise_text(rc, msg or f"{what}: {ffi.string(lib.pmc_strerror(rc)).decode()}")

    @staticmethod
    def _name_of(call: arguments.PreparedCall) -> str:
        return ffi.string(lib.pmc_coll_name(call.args.coll)).decode()

    # -- properties -------------------------------------------------------
    @property
    def mpi(self) -> MPI.Comm:
        """The wrapped mpi4py communicator."""
        return self._mpi

    @property
    def layout(self) -> Layout:
        """Nodes, local rank and lanes of this communicator."""
        return self._layout

    @property
    def trace_id(self) -> str:
        """This communicator's name in trace dumps (the same on every member)."""
        return ffi.string(lib.pmc_comm_trace_id(self._live_handle("trace_id"))).decode()

    def lane_traffic(self) -> tuple[int, int]:
        """(messages, bytes) this rank has sent to other nodes on its lane so far.

        The lane algorithms count their point-to-point messages between nodes;
        a rank past the lanes (local rank >= ``layout.lanes``) sends none.
        """
        handle = self._live_handle("lane_traffic")
        msgs = ffi.new("uint64_t *")
        nbytes = ffi.new("uint64_t *")
        lib.pmc_comm_lane_traffic(handle, msgs, nbytes)
        return int(msgs[0]), int(nbytes[0])

    def huge_pages(self) -> dict[str, int]:
        """How this rank's buffers exposed for single copy went onto transparent huge pages so far.

        A peer copies from (or into) such a buffer through the kernel, which pins its pages one at a
        time; on 2 MiB pages that runs about as fast as memcpy, on 4 KiB pages at a fraction of it.
        From the second call that exposes the same whole aligned 2 MiB pages on they are collapsed
        into huge pages in place, at most 64 MiB a call (``PYMCOLL_HUGE_PAGES=off`` never does).
        ``collapses``: collapses done; ``bytes``: what they covered; ``failures``: collapses the
        kernel refused (no transparent huge pages, a kernel before 6.1, memory that is not
        private), after which that range is left as it is.
        """
        handle = self._live_handle("huge_pages")
        out = [ffi.new("uint64_t *") for _ in range(3)]
        lib.pmc_comm_huge_pages(handle, *out)
        return {"collapses": int(out[0][0]), "bytes": int(out[1][0]), "failures": int(out[2][0])}

    def path_trials(self) -> list[dict[str, Any]]:
        """The copy-path trials of this communicator so far, one dict per collective and size class
        that has had any: ``collective``, ``min_bytes`` (the class holds payloads per rank from it to
        twice it), ``calls`` (trial calls done in the latest round), ``retrials`` (rounds run again
        because a later check found the chosen path slower than the other path's trials: the
        host's speeds changed), ``chosen`` (``"cells"`` for copy in/copy out, ``"single copy"``, or
        None while undecided) and ``cells_s``/``single_copy_s`` (each path's time per call in the
        latest agreed trials, in seconds, as the ranks agreed on it; 0 until chosen).

        Empty where trials are off (``PYMCOLL_PATH_TRIALS=0``, a fixed ``PYMCOLL_CMA_MIN`` or
        ``PYMCOLL_COPY``, more than one node) or no blocking call or persistent Start of 16 KiB or
        more per rank ran (256 KiB for a Bcast where the node's ranks outnumber its CPUs).
        """
        handle = self._live_handle("path_trials")
        calls, retrials, chosen = ffi.new("int *"), ffi.new("int *"), ffi.new("int *")
        least = ffi.new("uint64_t *")
        cells, single = ffi.new("double *"), ffi.new("double *")
        out = []
        for code, name in enumerate(config.COLLECTIVES, start=1):
            for k in range(lib.PMC_TRIAL_SIZE_CLASSES):
                rc = lib.pmc_comm_path_trial(handle, code, k, least, calls, retrials, chosen, cells, single)
                if rc != lib.PMC_OK:
                    self._check(rc, "path_trials")
                if calls[0] == 0 and retrials[0] == 0:
                    continue
                out.append({"collective": name, "min_bytes": int(least[0]), "calls": int(calls[0]),
                            "retrials": int(retrials[0]),
                            "chosen": {-1: None, 0: "cells", 2: "single copy"}[chosen[0]],
                            "cells_s": float(cells[0]), "single_copy_s": float(single[0])})
        return out

    @property
    def rank(self) -> int:
        """Rank of this process."""
        return self._layout.rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self._layout.size

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py name
        """Rank of this process."""
        return self._layout.rank

    def Get_size(self) -> int:  # noqa: N802 - mpi4py name
        """Number of ranks."""
        return self._layout.size

    # -- collectives ------------------------------------------------------
    def Barrier(self) -> None:  # noqa: N802 - mpi4py name
        """Block until every rank has called Barrier."""
        rc = _pmc_barrier(self._handle)
        if rc:
            self._check(rc, "Barrier")

    def Bcast(self, buf: Any, root: int = 0) -> None:  # noqa: N802 - mpi4py name
        """Broadcast `buf` from `root` to every rank (mpi4py semantics)."""
        last = self._last_bcast
        # [array, its own datatype] takes the array's fast path and cache; the cached array is no spec.
        if buf is not last[0] and type(buf) in _SPECS:
            buf = _typed_array(buf)
        if buf is last[0] and root == last[1]:
            rc = _pmc_bcast(self._handle, last[2], last[3], root)
            if rc:
                self._check(rc, "Bcast")
            return
        # Fast path: a contiguous numpy array (or CPU tensor) and a valid root.
        buf = _host_array(buf)
        if type(buf) is _ndarray and type(root) is int and 0 <= root < self._size:
            try:
                p = _from_buffer(buf)
            except Exception:  # noqa: BLE001 - the general path below explains the error
                p = None
            if p is not None and (root == self._rank or buf.flags.writeable) and not buf.dtype.hasobject:
                rc = _pmc_bcast(self._handle, p, len(p), root)
                if rc:
                    self._check(rc, "Bcast")
                self._last_bcast = (buf, root, _void(p), len(p), p)
                return
        self._general("Bcast", buf, None, root, arguments.prepare_bcast, buf, root)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802 - mpi4py name
        """Gather every rank's `sendbuf` into every rank's `recvbuf`, in rank order.

        ``sendbuf=MPI.IN_PLACE`` takes this rank's block from its place in `recvbuf`.
        """
        last = self._last_allgather
        if sendbuf is not last[0] and type(sendbuf) in _SPECS:  # see _typed_array and Bcast
            sendbuf = _typed_array(sendbuf)
        if recvbuf is not last[1] and type(recvbuf) in _SPECS:
            recvbuf = _typed_array(recvbuf)
        if sendbuf is last[0] and recvbuf is last[1]:
            rc = _pmc_allgather(self._handle, last[2], last[3], last[4])
            if rc:
                self._check(rc, "Allgather")
            return
        # Fast path: contiguous numpy arrays (or CPU tensors) whose sizes agree.
        sendbuf, recvbuf = _host_array(sendbuf), _host_array(recvbuf)
        if type(recvbuf) is _ndarray and (sendbuf is _IN_PLACE or type(sendbuf) is _ndarray):
            try:
                rp = _from_buffer(recvbuf)
                sp = _NULL if sendbuf is _IN_PLACE else _from_buffer(sendbuf)
            except Exception:  # noqa: BLE001 - the general path below explains the error
                rp = None
            size = self._size
            if (rp is not None and recvbuf.flags.writeable and recvbuf.size % size == 0
                    and not recvbuf.dtype.hasobject and (sp is _NULL or not sendbuf.dtype.hasobject)):
                block = len(rp) // size
                if sp is _NULL or len(sp) == block:
                    rc = _pmc_allgather(self._handle, sp, rp, block)
                    if rc:
                        self._check(rc, "Allgather")
                    self._last_allgather = (sendbuf, recvbuf, _void(sp), _void(rp), block, sp, rp)
                    return
        self._general("Allgather", sendbuf, recvbuf, None, arguments.prepare_allgather, sendbuf, recvbuf)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> None:  # noqa: N802 - mpi4py name
        """Combine every rank's `sendbuf` with `op`; every rank gets the result in `recvbuf`.

        ``sendbuf=MPI.IN_PLACE`` takes this rank's input from `recvbuf`. The
        result is the same bits on every rank. A user-defined op runs in the
        wrapped MPI communicator.
        """
        last = self._last_allreduce
        if sendbuf is not last[0] and type(sendbuf) in _SPECS:  # see _typed_array and Bcast
            sendbuf = _typed_array(sendbuf)
        if recvbuf is not last[1] and type(recvbuf) in _SPECS:
            recvbuf = _typed_array(recvbuf)
        if sendbuf is last[0] and recvbuf is last[1] and op is last[2] and recvbuf.dtype is last[3]:
            rc = _pmc_allreduce(self._handle, last[4], last[5], last[6], last[7], last[8])
            if rc:
                self._reduction_error(rc, "Allreduce", last[7], last[8])
            return
        if type(recvbuf) is not _ndarray:  # numpy callers skip the tensor checks
            torch = _modules.get("torch")
            if (torch is not None and type(recvbuf) is torch.Tensor
                    and (sendbuf is _IN_PLACE or type(sendbuf) is torch.Tensor)
                    and self._tensor_allreduce(sendbuf, recvbuf, op)):
                return
        # Fast path: contiguous numpy arrays (or CPU tensors) of one predefined element type.
        sendbuf, recvbuf = _host_array(sendbuf), _host_array(recvbuf)
        if type(recvbuf) is _ndarray and (sendbuf is _IN_PLACE or type(sendbuf) is _ndarray):
            code = _elem_of_dtype(recvbuf.dtype)
            opc = _OP_CODES.get(getattr(op, "handle", None))
            if (code is not None and opc is not None and recvbuf.flags.writeable
                    and (sendbuf is _IN_PLACE or (sendbuf.dtype == recvbuf.dtype and sendbuf.size == recvbuf.size))):
                try:
                    rp = _from_buffer(recvbuf)
                    sp = _NULL if sendbuf is _IN_PLACE else _from_buffer(sendbuf)
                except Exception:  # noqa: BLE001 - the general path below explains the error
                    rp = None
                if rp is not None:
                    rc = _pmc_allreduce(self._handle, sp, rp, recvbuf.size, code, opc)
                    if rc:
                        self._reduction_error(rc, "Allreduce", code, opc)
                    self._last_allreduce = (sendbuf, recvbuf, op, recvbuf.dtype, _void(sp), _void(rp), recvbuf.size,
                                            code, opc, sp, rp)
                    return
        self._general("Allreduce", sendbuf, recvbuf, id(op), arguments.prepare_allreduce, sendbuf, recvbuf, op)

    def _tensor_allreduce(self, sendbuf: Any, recvbuf: Any, op: Any) -> bool:
        """Allreduce of contiguous CPU torch tensors straight from their data pointers (a gradient
        loop's call: a few microseconds where a numpy view costs a few more); False when the
        general path must take the call. Nothing is kept between calls: a tensor can be given
        new memory in place."""
        if not recvbuf.is_cpu or not recvbuf.is_contiguous():
            return False
        code = elements.code_of_torch_dtype(recvbuf.dtype)
        opc = _OP_CODES.get(getattr(op, "handle", None))
        if code is None or opc is None:
            return False
        n = recvbuf.numel()
        if sendbuf is _IN_PLACE:
            sp = _NULL
        else:
            if (not sendbuf.is_cpu or not sendbuf.is_contiguous() or sendbuf.dtype is not recvbuf.dtype
                    or sendbuf.numel() != n):
                return False
            sp = _void(sendbuf.data_ptr()) if n else _NULL
        rp = _void(recvbuf.data_ptr()) if n else _NULL
        rc = _pmc_allreduce(self._handle, sp, rp, n, code, opc)
        if rc:
            self._reduction_error(rc, "Allreduce", code, opc)
        return True

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, root: int = 0) -> None:  # noqa: N802
        """Combine every rank's `sendbuf` with `op` into `recvbuf` at `root` (mpi4py semantics).

        `recvbuf` matters only at the root (None elsewhere is fine); the root
        may pass ``sendbuf=MPI.IN_PLACE`` to take its input from `recvbuf`.
        """
        if type(root) is int and 0 <= root < self._size:
            at_root = root == self._rank
            if self._fast_reduction(_pmc_reduce, sendbuf, recvbuf if at_root else None, op, 1, root,
                                    receives=at_root):
                return
        self._general("Reduce", sendbuf, recvbuf, (id(op), root), arguments.prepare_reduce, sendbuf, recvbuf, op, root)

    def _fast_reduction(self, fn: Any, sendbuf: Any, recvbuf: Any, op: Any, in_blocks: int,
                        root: Optional[int] = None, receives: bool = True) -> bool:
        """Numpy arrays of one predefined type and a predefined op straight to
        the core; False when the general path must take the call."""
        last = self._last_reduction.get(fn, _EMPTY)
        if sendbuf is not last[0] and type(sendbuf) in _SPECS:  # see _typed_array and Bcast
            sendbuf = _typed_array(sendbuf)
        if recvbuf is not last[1] and type(recvbuf) in _SPECS:
            recvbuf = _typed_array(recvbuf)
        if (sendbuf is last[0] and recvbuf is last[1] and op is last[2] and root == last[3]
                and (sendbuf if recvbuf is None else recvbuf).dtype is last[4]):
            args = last[5]
            rc = fn(self._handle, *args)
            if rc:
                self._reduction_error(rc, self._name_of_fn(fn), args[3], args[4])
            return True
        opc = _OP_CODES.get(getattr(op, "handle", None))
        if opc is None or (receives and recvbuf is None):
            return False
        sendbuf, recvbuf = _host_array(sendbuf), _host_array(recvbuf)
        if sendbuf is _IN_PLACE:
            if type(recvbuf) is not _ndarray:
                return False
            ref, sp = recvbuf, _NULL
        else:
            ref, sp = sendbuf, _nd(sendbuf, False)
            if sp is None:
                return False
        code = _elem_of_dtype(ref.dtype)
        if code is None or ref.size % in_blocks:
            return False
        count = ref.size // in_blocks
        if not receives:
            rp = _NULL
        else:
            rp = _nd(recvbuf, True)
            if rp is None or recvbuf.dtype != ref.dtype or (sp is not _NULL and recvbuf.size != count):
                return False
        args = (sp, rp, count, code, opc) if root is None else (sp, rp, count, code, opc, root)
        rc = fn(self._handle, *args)
        if rc:
            self._reduction_error(rc, self._name_of_fn(fn), code, opc)
        self._last_reduction[fn] = (sendbuf, recvbuf, op, root, ref.dtype, (_void(sp), _void(rp)) + args[2:], args)
        return True

    @staticmethod
    def _name_of_fn(fn: Any) -> str:
        return {_pmc_reduce: "Reduce", _pmc_reduce_scatter_block: "Reduce_scatter_block", _pmc_scan: "Scan",
                _pmc_exscan: "Exscan"}.get(fn, "reduction")

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802 - mpi4py name
        """Collect every rank's `sendbuf` into `recvbuf` at `root`, in rank order.

        `recvbuf` matters only at the root; the root may pass
        ``sendbuf=MPI.IN_PLACE`` when its block already sits in `recvbuf`.
        """
        last = self._last_gather
        if sendbuf is not last[0] and type(sendbuf) in _SPECS:  # see _typed_array and Bcast
            sendbuf = _typed_array(sendbuf)
        if recvbuf is not last[1] and type(recvbuf) in _SPECS:
            recvbuf = _typed_array(recvbuf)
        if sendbuf is last[0] and recvbuf is last[1] and root == last[2]:
            rc = _pmc_gather(self._handle, last[3], last[4], last[5], root)
            if rc:
                self._check(rc, "Gather")
            return
        sendbuf, recvbuf = _host_array(sendbuf), _host_array(recvbuf)
        if type(root) is int and 0 <= root < self._size:
            at_root = root == self._rank
            sp = _NULL if sendbuf is _IN_PLACE and at_root else _nd(sendbuf, False)
            rp = _nd(recvbuf, True) if at_root else _NULL
            if sp is not None and rp is not None:
                block = len(rp) // self._size if at_root else len(sp)
                if not at_root or (len(rp) == block * self._size and (sp is _NULL or len(sp) == block)):
                    rc = _pmc_gather(self._handle, sp, rp, block, root)
                    if rc:
                        self._check(rc, "Gather")
                    self._last_gather = (sendbuf, recvbuf, root, _void(sp), _void(rp), block, sp, rp)
                    return
        self._general("Gather", sendbuf, recvbuf, root, arguments.prepare_gather, sendbuf, recvbuf, root)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802 - mpi4py name
        """Gather blocks of different sizes: at the root `recvbuf` is
        ``[buf, counts, displs, datatype]`` (or ``(buf, (counts, displs), datatype)``)."""
        # recvbuf matters at the root only (MPI ignores it elsewhere).
        q = self._quick_gatherv
        if root == self._rank:
            d = q[3]
            try:  # the quick check of _quick, written out: one more Python call is a tenth of the call
                still = (recvbuf is q[0] and sendbuf is q[1] and root == q[2] and d is not None
                         and recvbuf[0] is d[0] and recvbuf == d and d[0].dtype is q[6]
                         and (q[4] is None or sendbuf.dtype is q[4]))
            except (IndexError, TypeError, ValueError):  # an entry became an array (compared elementwise)
                still = False
        else:
            still = q[0] is None and sendbuf is q[1] and root == q[2] and (q[4] is None or sendbuf.dtype is q[4])
        if still:
            rc = _pmc_run(self._handle, q[5])
            return self._check(rc, "Gatherv") if rc else None
        rb = recvbuf if root == self._rank else None
        self._rooted_v("Gatherv", sendbuf, rb, root, arguments.prepare_gatherv, (sendbuf, recvbuf, root))

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802 - mpi4py name
        """Send block i of `sendbuf` at `root` to rank i's `recvbuf`.

        `sendbuf` matters only at the root, which may pass
        ``recvbuf=MPI.IN_PLACE`` to keep its block where it is.
        """
        last = self._last_scatter
        if sendbuf is not last[0] and type(sendbuf) in _SPECS:  # see _typed_array and Bcast
            sendbuf = _typed_array(sendbuf)
        if recvbuf is not last[1] and type(recvbuf) in _SPECS:
            recvbuf = _typed_array(recvbuf)
        if sendbuf is last[0] and recvbuf is last[1] and root == last[2]:
            rc = _pmc_scatter(self._handle, last[3], last[4], last[5], root)
            if rc:
                self._check(rc, "Scatter")
            return
        sendbuf, recvbuf = _host_array(sendbuf), _host_array(recvbuf)
        if type(root) is int and 0 <= root < self._size:
            at_root = root == self._rank
            rp = _NULL if recvbuf is _IN_PLACE and at_root else _nd(recvbuf, True)
            sp = _nd(sendbuf, False) if at_root else _NULL
            if sp is not None and rp is not None:
                block = len(sp) // self._size if at_root else len(rp)
                if not at_root or (len(sp) == block * self._size and (rp is _NULL or len(rp) == block)):
                    rc = _pmc_scatter(self._handle, sp, rp, block, root)
                    if rc:
                        self._check(rc, "Scatter")
                    self._last_scatter = (sendbuf, recvbuf, root, _void(sp), _void(rp), block, sp, rp)
                    return
        self._general("Scatter", sendbuf, recvbuf, root, arguments.prepare_scatter, sendbuf, recvbuf, root)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802 - mpi4py name
        """Scatter blocks of different sizes: at the root `sendbuf` is
        ``[buf, counts, displs, datatype]``."""
        # sendbuf matters at the root only (MPI ignores it elsewhere).
        q = self._quick_scatterv
        if root == self._rank:
            d = q[3]
            try:  # the quick check of _quick, written out: one more Python call is a tenth of the call
                still = (sendbuf is q[0] and recvbuf is q[1] and root == q[2] and d is not None
                         and sendbuf[0] is d[0] and sendbuf == d and d[0].dtype is q[6]
                         and (q[4] is None or recvbuf.dtype is q[4]))
            except (IndexError, TypeError, ValueError):  # an entry became an array (compared elementwise)
                still = False
        else:
            still = q[0] is None and recvbuf is q[1] and root == q[2] and (q[4] is None or recvbuf.dtype is q[4])
        if still:
            rc = _pmc_run(self._handle, q[5])
            return self._check(rc, "Scatterv") if rc else None
        sb = sendbuf if root == self._rank else None
        self._rooted_v("Scatterv", sb, recvbuf, root, arguments.prepare_scatterv, (sendbuf, recvbuf, root))

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802 - mpi4py name
        """Allgather of blocks of different sizes: `recvbuf` is ``[buf, counts, displs, datatype]``;
        ``sendbuf=MPI.IN_PLACE`` takes this rank's block from its place in `recvbuf`."""
        if not self._recall("Allgatherv", sendbuf, recvbuf, None):
            self._prepare_and_run("Allgatherv", sendbuf, recvbuf, None, arguments.prepare_allgatherv, sendbuf, recvbuf)

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802 - mpi4py name
        """Block j of every rank's `sendbuf` goes to rank j, landing in block i for sender i.

        ``sendbuf=MPI.IN_PLACE`` sends from, and receives into, `recvbuf`.
        """
        last = self._last_alltoall
        if sendbuf is not last[0] and type(sendbuf) in _SPECS:  # see _typed_array and Bcast
            sendbuf = _typed_array(sendbuf)
        if recvbuf is not last[1] and type(recvbuf) in _SPECS:
            recvbuf = _typed_array(recvbuf)
        if sendbuf is last[0] and recvbuf is last[1]:
            rc = _pmc_alltoall(self._handle, last[2], last[3], last[4])
            if rc:
                self._check(rc, "Alltoall")
            return
        sendbuf, recvbuf = _host_array(sendbuf), _host_array(recvbuf)
        rp = _nd(recvbuf, True)
        sp = _NULL if sendbuf is _IN_PLACE else _nd(sendbuf, False)
        if rp is not None and sp is not None and len(rp) % self._size == 0 and (sp is _NULL or len(sp) == len(rp)):
            rc = _pmc_alltoall(self._handle, sp, rp, len(rp) // self._size)
            if rc:
                self._check(rc, "Alltoall")
            self._last_alltoall = (sendbuf, recvbuf, _void(sp), _void(rp), len(rp) // self._size, sp, rp)
            return
        self._general("Alltoall", sendbuf, recvbuf, None, arguments.prepare_alltoall, sendbuf, recvbuf)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802 - mpi4py name
        """Alltoall with per-rank counts and displacements on both sides:
        ``[buf, counts, displs, datatype]`` for `sendbuf` and `recvbuf`."""
        if not self._recall("Alltoallv", sendbuf, recvbuf, None):
            self._prepare_and_run("Alltoallv", sendbuf, recvbuf, None, arguments.prepare_alltoallv, sendbuf, recvbuf)

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> None:  # noqa: N802
        """Reduce `sendbuf` (size x n elements) with `op`; rank i gets block i (n elements).

        ``sendbuf=MPI.IN_PLACE`` takes the input from `recvbuf` and leaves the
        result at its start.
        """
        if sendbuf is not _IN_PLACE and self._fast_reduction(_pmc_reduce_scatter_block, sendbuf, recvbuf, op,
                                                                self._size):
            return
        self._general("Reduce_scatter_block", sendbuf, recvbuf, id(op), arguments.prepare_reduce_scatter_block,
                      sendbuf, recvbuf, op)

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,  # noqa: N802
                       op: Any = MPI.SUM) -> None:
        """Reduce `sendbuf` with `op`; rank i gets recvcounts[i] elements of the result
        (recvcounts None: each rank's count is the length of its own `recvbuf`, as in mpi4py)."""
        if recvcounts is None:
            # The counts come from every rank's receive buffer: gathered on each call.
            self._run(arguments.prepare_reduce_scatter(self, sendbuf, recvbuf, recvcounts, op))
            return
        extra = (_snap(recvcounts), id(op))
        if not self._recall("Reduce_scatter", sendbuf, recvbuf, extra):
            self._prepare_and_run("Reduce_scatter", sendbuf, recvbuf, extra, arguments.prepare_reduce_scatter,
                                  sendbuf, recvbuf, recvcounts, op)

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> None:  # noqa: N802 - mpi4py name
        """Inclusive prefix reduction: rank i gets the combination of ranks 0..i."""
        if not self._fast_reduction(_pmc_scan, sendbuf, recvbuf, op, 1):
            self._general("Scan", sendbuf, recvbuf, id(op), arguments.prepare_scan, sendbuf, recvbuf, op)

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> None:  # noqa: N802 - mpi4py name
        """Exclusive prefix reduction: rank i > 0 gets the combination of ranks 0..i-1;
        rank 0's `recvbuf` is left as it was."""
        if recvbuf is None or not self._fast_reduction(_pmc_exscan, sendbuf, recvbuf, op, 1):
            self._general("Exscan", sendbuf, recvbuf, id(op), arguments.prepare_exscan, sendbuf, recvbuf, op)

    def _reduction_error(self, rc: int, what: str, elem: int, opc: int) -> None:
        if rc == lib.PMC_ERR_ARG and not lib.pmc_op_valid(elem, opc):
            raise MPI.Exception(MPI.ERR_OP)
        self._check(rc, what)

    # -- communicator management -----------------------------------------
    def _wrap(self, new: MPI.Comm) -> Any:
        if new == MPI.COMM_NULL:
            return new
        return Comm(new, **self._options)

    def Dup(self, info: Any = None) -> "Comm":  # noqa: N802 - mpi4py name
        """Duplicate: a new pymcoll.Comm over ``mpi.Dup()``."""
        return self._wrap(self._mpi.Dup() if info is None else self._mpi.Dup(info))

    def Split(self, color: int = 0, key: int = 0) -> Any:  # noqa: N802 - mpi4py name
        """``mpi.Split`` wrapped as a pymcoll.Comm (MPI.COMM_NULL for MPI.UNDEFINED)."""
        return self._wrap(self._mpi.Split(color, key))

    def Split_type(self, split_type: int, key: int = 0, info: Any = MPI.INFO_NULL) -> Any:  # noqa: N802
        """``mpi.Split_type`` wrapped as a pymcoll.Comm."""
        return self._wrap(self._mpi.Split_type(split_type, key, info))

    def Create(self, group: MPI.Group) -> Any:  # noqa: N802 - mpi4py name
        """``mpi.Create`` wrapped as a pymcoll.Comm (MPI.COMM_NULL outside the group)."""
        return self._wrap(self._mpi.Create(group))

    def Create_group(self, group: MPI.Group, tag: int = 0) -> Any:  # noqa: N802 - mpi4py name
        """``mpi.Create_group`` wrapped as a pymcoll.Comm."""
        return self._wrap(self._mpi.Create_group(group, tag))

    def Free(self) -> None:  # noqa: N802 - mpi4py name
        """Release the segment and helper communicators, and free the wrapped
        communicator (unless it is MPI.COMM_WORLD or MPI.COMM_SELF). Local;
        works after a timeout."""
        self._release()
        if self._mpi not in (MPI.COMM_WORLD, MPI.COMM_SELF, MPI.COMM_NULL) and not MPI.Is_finalized():
            self._mpi.Free()

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.Free()

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    def __repr__(self) -> str:
        state = "freed" if self._handle == ffi.NULL else self._layout.describe()
        return f"<pymcoll.Comm {state}>"


# -- mpi4py's other attributes, forwarded ------------------------------------
class _Forwarded:
    """An attribute Comm does not define, read from the wrapped mpi4py communicator.

    One descriptor per name instead of ``__getattr__``: a class with
    ``__getattr__`` makes every attribute read on its instances take the slow,
    unspecialised lookup, which costs each collective call about 60 ns.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        return getattr(obj._mpi, self.name)


def _forward_mpi4py_attributes() -> None:
    # Every public name of the classes a wrapped intracommunicator can be (topologies included);
    # reading one that the wrapped object's class lacks raises mpi4py's AttributeError.
    classes = (MPI.Intracomm, MPI.Topocomm, MPI.Cartcomm, MPI.Graphcomm, MPI.Distgraphcomm)
    for name in sorted({n for cls in classes for n in dir(cls) if not n.startswith("_")}):
        if not hasattr(Comm, name):
            setattr(Comm, name, _Forwarded(name))


# -- non-blocking and persistent forms, from the same prepared calls ---------
_PREPARED: list[tuple[str, Callable[..., arguments.PreparedCall]]] = [
    ("Barrier", arguments.prepare_barrier), ("Bcast", arguments.prepare_bcast),
    ("Gather", arguments.prepare_gather), ("Gatherv", arguments.prepare_gatherv),
    ("Scatter", arguments.prepare_scatter), ("Scatterv", arguments.prepare_scatterv),
    ("Allgather", arguments.prepare_allgather), ("Allgatherv", arguments.prepare_allgatherv),
    ("Alltoall", arguments.prepare_alltoall), ("Alltoallv", arguments.prepare_alltoallv),
    ("Reduce", arguments.prepare_reduce), ("Allreduce", arguments.prepare_allreduce),
    ("Reduce_scatter_block", arguments.prepare_reduce_scatter_block),
    ("Reduce_scatter", arguments.prepare_reduce_scatter),
    ("Scan", arguments.prepare_scan), ("Exscan", arguments.prepare_exscan),
]


def _add_forms(name: str, prepare: Callable[..., arguments.PreparedCall]) -> None:
    params = list(inspect.signature(prepare).parameters.values())[1:]
    iname = "I" + name[0].lower() + name[1:]

    def nonblocking(self: Comm, *args: Any, **kwargs: Any) -> Request:
        return self._start(prepare(self, *args, **kwargs))

    def persistent(self: Comm, *args: Any, info: Any = MPI.INFO_NULL, **kwargs: Any) -> Prequest:
        return self._persist(prepare(self, *args, **kwargs))

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    info_param = inspect.Parameter("info", inspect.Parameter.KEYWORD_ONLY, default=MPI.INFO_NULL)
    nonblocking.__name__ = nonblocking.__qualname__ = iname
    nonblocking.__signature__ = inspect.Signature([self_param] + params, return_annotation=Request)
    nonblocking.__doc__ = (f"Non-blocking {name}: same arguments, returns a :class:`pymcoll.Request`. "
                           f"Never waits for other ranks; the buffers belong to the collective until "
                           f"Wait/Test completes it.")
    persistent.__name__ = persistent.__qualname__ = f"{name}_init"
    persistent.__signature__ = inspect.Signature([self_param] + params + [info_param],
                                                 return_annotation=Prequest)
    persistent.__doc__ = (f"Persistent {name}: same arguments, returns a :class:`pymcoll.Prequest` "
                          f"to Start (one C call, no argument parsing) and complete as often as needed.")
    setattr(Comm, iname, nonblocking)
    setattr(Comm, f"{name}_init", persistent)


for _name, _prepare in _PREPARED:
    _add_forms(_name, _prepare)
_forward_mpi4py_attributes()  # after the forms above, so only names Comm lacks are forwarded
