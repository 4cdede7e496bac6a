"""This replica's member of an FTAR group: :class:`Member` and what its calls return.

A :class:`Member` talks TCP to the group's coordinator and to its ring
neighbours; it loads no MPI. :meth:`Member.begin_step` forms the step's quorum
(:class:`StepInfo`), :meth:`Member.allreduce` reduces out of place
(:class:`AllreduceResult`), :meth:`Member.commit` votes, and
:meth:`Member.publish_state` / :meth:`Member.fetch_state` move state snapshots
to a replica that catches up. The model behind them is described in
:mod:`pymcoll.ftar`.
"""

from __future__ import annotations

import enum
import operator
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Optional, Union

from .._ftar import ffi, lib
from .address import parse_address, resolve_token, route_address

__all__ = ["Status", "StepInfo", "AllreduceResult", "Member", "FtarError", "FAULT_ENV"]

FAULT_ENV = "PYMCOLL_FTAR_FAULT"

_REPLICA_ID = re.compile(r"[A-Za-z0-9._-]{1,63}")
_MAX_STEP = (1 << 63) - 1


class Status(str, enum.Enum):
    """Outcome of an FTAR operation (the value is the name, so it compares equal to "OK" etc.)."""

    OK = "OK"
    ABORTED = "ABORTED"                      # a member failed: retry in the next epoch, or skip
    TIMEOUT = "TIMEOUT"                      # the operation's deadline passed
    FENCED = "FENCED"                        # evicted by the coordinator: rejoin and catch up
    TOO_FEW = "TOO_FEW"                      # no quorum of min_replicas in time
    COORDINATOR_LOST = "COORDINATOR_LOST"    # no decision: the step is not applied

    def __str__(self) -> str:
        return self.value


_STATUS_BY_CODE: dict[int, Status] = {
    lib.PMC_FTAR_ST_OK: Status.OK,
    lib.PMC_FTAR_ST_ABORTED: Status.ABORTED,
    lib.PMC_FTAR_ST_TIMEOUT: Status.TIMEOUT,
    lib.PMC_FTAR_ST_FENCED: Status.FENCED,
    lib.PMC_FTAR_ST_TOO_FEW: Status.TOO_FEW,
    lib.PMC_FTAR_ST_COORDINATOR_LOST: Status.COORDINATOR_LOST,
}

_OPS = {"sum": lib.PMC_FTAR_SUM, "max": lib.PMC_FTAR_MAX, "min": lib.PMC_FTAR_MIN}

_NUMPY_DTYPES = {"float32": lib.PMC_FTAR_FLOAT32, "float64": lib.PMC_FTAR_FLOAT64,
                 "float16": lib.PMC_FTAR_FLOAT16, "int32": lib.PMC_FTAR_INT32, "int64": lib.PMC_FTAR_INT64}
_TORCH_DTYPES = dict(_NUMPY_DTYPES, bfloat16=lib.PMC_FTAR_BFLOAT16)


class FtarError(RuntimeError):
    """A failed FTAR call: a bad argument, a local failure, or (``status`` set) an operation that could not run."""

    def __init__(self, message: str, status: Optional[Status] = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StepInfo:
    """What :meth:`Member.begin_step` learned about the step's quorum.

    ``step`` is the group's step (a joining replica adopts it); ``index`` is
    this member's place in the ring of ``n_members``; ``healing`` says this
    member catches up (it must contribute zeros and fetch the state);
    ``n_healing`` counts the members catching up; ``serve_state`` asks this
    member to publish its state (the state after ``step - 1``) for them.
    """

    status: Status
    epoch: int
    step: int
    n_members: int
    index: int
    healing: bool
    n_healing: int
    serve_state: bool

    @property
    def ok(self) -> bool:
        """True when the quorum formed (status OK)."""
        return self.status is Status.OK


@dataclass
class AllreduceResult:
    """Outcome of :meth:`Member.allreduce`.

    ``result`` is the output array or tensor (``out`` when given); its
    contents are the sum (max, min) only when ``ok``. ``n_contrib`` counts the
    replicas whose input is in it (healing members do not count).
    """

    status: Status
    n_contrib: int
    epoch: int
    result: Any

    @property
    def ok(self) -> bool:
        """True when the reduction completed on every member (status OK)."""
        return self.status is Status.OK


def _check_step(value: int, name: str, low: int = 0) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    if not isinstance(value, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    if not low <= value <= _MAX_STEP:
        raise ValueError(f"{name}={value} must be in {low}..2**63-1")
    return int(value)


def _check_int(value: Any, name: str, low: int, high: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} must be in {low}..{high}{hint}")
    return value


def log_descriptor(log: Union[bool, int]) -> int:
    """The file descriptor of a ``log`` argument (a member's or coordinator's): True is stderr, False none (-1)."""
    if isinstance(log, bool):
        return 2 if log else -1
    if isinstance(log, int) and log >= 0:
        return log
    raise ValueError(f"log={log!r} must be True (stderr), False or a file descriptor >= 0")


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".", 1)[0] == "torch"


class Member:
    """This replica's member of the FTAR group.

    Parameters:
        coordinator: the coordinator's "HOST:PORT".
        replica_id: unique per replica: 1 to 63 characters of ``[A-Za-z0-9._-]``. A restarted replica
            keeps its id.
        token: the job token (str: its UTF-8 bytes). Default: `token_file`, else ``PYMCOLL_FTAR_TOKEN``,
            else the file named by ``PYMCOLL_FTAR_TOKEN_FILE``.
        token_file: a file holding the token (surrounding whitespace ignored).
        bind_host: where this member listens for its ring neighbours and state transfers.
            Default: this host's address on the route to the coordinator (127.0.0.1 for a
            coordinator on loopback), which every member can reach where the coordinator can.
        streams: TCP connections to each neighbour (1..16).
        chunk_bytes: pipelining unit of the ring (a multiple of 8, 1 KiB to 1 GiB).
        integrity: MAC on the data frames too (control frames always carry one).
        timeout: deadline of each operation in seconds.
        committed_step: the last step whose update the caller's state holds (-1: the initial state).
        fault: a ``PYMCOLL_FTAR_FAULT`` spec, for tests only (default: that environment variable).
        log: True writes one line per event to stderr; an int names the file descriptor.

    Calls are made by one thread, except :meth:`fetch_state`, which may run in
    a background thread while the others go on. Use as a context manager or
    call :meth:`close`.
    """

    def __init__(self, coordinator: str, replica_id: str, token: Union[str, bytes, None] = None, *,
                 token_file: Optional[str] = None, bind_host: Optional[str] = None, streams: int = 1,
                 chunk_bytes: int = 256 * 1024, integrity: bool = False, timeout: float = 30.0,
                 committed_step: int = -1, fault: Optional[str] = None, log: Union[bool, int] = False) -> None:
        self._ptr: Any = None
        self._cv = threading.Condition()
        self._inflight = 0
        self._closing = False
        self.last_status: Optional[Status] = None

        self.coordinator = parse_address(coordinator, "coordinator")
        if not isinstance(replica_id, str) or not _REPLICA_ID.fullmatch(replica_id):
            raise ValueError(f"replica_id={replica_id!r} must be 1 to 63 characters of [A-Za-z0-9._-], "
                             f"e.g. 'replica-0'")
        self.replica_id = replica_id
        token_bytes = resolve_token(token, token_file)
        if bind_host is None:
            bind_host = route_address(self.coordinator)
        if not isinstance(bind_host, str) or not bind_host.strip() or len(bind_host) >= lib.PMC_FTAR_ADDR_BYTES - 6 \
                or any(c.isspace() or c == "\0" for c in bind_host):
            raise ValueError(f"bind_host={bind_host!r} must be a host name or address, e.g. '127.0.0.1'")
        streams = _check_int(streams, "streams", 1, 16)
        chunk_bytes = _check_int(chunk_bytes, "chunk_bytes", 1024, 1 << 30)
        if chunk_bytes % 8:
            raise ValueError(f"chunk_bytes={chunk_bytes} must be a multiple of 8, e.g. {chunk_bytes - chunk_bytes % 8}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 4.0e6:
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds below 4e6, e.g. 30.0")
        committed_step = _check_step(committed_step, "committed_step", -1)
        if fault is None:
            fault = os.environ.get(FAULT_ENV, "") or None
        if fault is not None and (not isinstance(fault, str) or "\0" in fault):
            raise ValueError(f"fault={fault!r} must be a {FAULT_ENV} spec string or None")
        log_fd = log_descriptor(log)

        # cffi objects the config points into: kept alive with the member.
        keep: list[Any] = []

        def cstr(text: str) -> Any:
            obj = ffi.new("char[]", text.encode("utf-8"))
            keep.append(obj)
            return obj

        cfg = ffi.new("pmc_ftar_member_config *")
        keep.append(cfg)
        cfg.coordinator = cstr(self.coordinator)
        cfg.replica_id = cstr(replica_id)
        tok = ffi.new("uint8_t[]", token_bytes)
        keep.append(tok)
        cfg.token = tok
        cfg.tokenlen = len(token_bytes)
        cfg.bind_host = cstr(bind_host.strip())
        cfg.streams = streams
        cfg.chunk_bytes = chunk_bytes
        cfg.integrity = int(bool(integrity))
        cfg.timeout_ms = max(1, int(round(timeout * 1000)))
        cfg.committed_step = committed_step
        cfg.fault = cstr(fault) if fault is not None else ffi.NULL
        cfg.log_fd = log_fd
        self._keep = keep
        self.timeout = float(timeout)

        out = ffi.new("pmc_ftar_member **")
        msg = ffi.new("char[]", lib.PMC_FTAR_MESSAGE_BYTES)
        rc = lib.pmc_ftar_member_create(cfg, out, msg, lib.PMC_FTAR_MESSAGE_BYTES)
        if rc != lib.PMC_FTAR_ST_OK or out[0] == ffi.NULL:
            text = ffi.string(msg).decode("utf-8", "replace") or "no reason given"
            status = _STATUS_BY_CODE.get(rc)
            raise FtarError(f"cannot create the FTAR member {replica_id!r} (coordinator {self.coordinator}): {text}",
                            status if status is not Status.OK else None)
        self._ptr = out[0]

    # --- life cycle -------------------------------------------------------

    def _enter(self, what: str) -> Any:
        with self._cv:
            if self._ptr is None or self._closing:
                raise FtarError(f"{what}: the FTAR member {getattr(self, 'replica_id', '?')!r} is closed; "
                                f"create a new Member to rejoin the group")
            self._inflight += 1
            return self._ptr

    def _leave(self) -> None:
        with self._cv:
            self._inflight -= 1
            self._cv.notify_all()

    def _status(self, rc: int, what: str, ptr: Any, fetch: bool = False) -> Status:
        status = _STATUS_BY_CODE.get(rc)
        if status is None:
            if rc == lib.PMC_FTAR_ST_ERROR:
                raise FtarError(f"{what}: {self._message(ptr, fetch) or 'failed'}")
            raise FtarError(f"{what}: unknown status code {rc} from the C member (a mismatched build?)")
        return status

    @staticmethod
    def _message(ptr: Any, fetch: bool = False) -> str:
        text = (lib.pmc_ftar_member_fetch_message if fetch else lib.pmc_ftar_member_message)(ptr)
        return ffi.string(text).decode("utf-8", "replace")

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._ptr is None

    def close(self) -> None:
        """Leave the group and release the member (idempotent).

        Waits for a call still running in another thread (a :meth:`fetch_state`
        ends by its deadline at the latest).
        """
        with self._cv:
            if self._ptr is None or self._closing:
                return
            self._closing = True
            while self._inflight:
                self._cv.wait()
            ptr, self._ptr = self._ptr, None
        try:
            lib.pmc_ftar_member_destroy(ptr)
        finally:
            with self._cv:
                self._closing = False

    def __enter__(self) -> "Member":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            self._ptr = None
            try:
                lib.pmc_ftar_member_destroy(ptr)
            except Exception:  # interpreter shutdown: nothing left to do
                pass

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else f"coordinator={self.coordinator}"
        return f"<pymcoll.ftar.Member {self.replica_id!r} {state}>"

    # --- operations -------------------------------------------------------

    @property
    def committed_step(self) -> int:
        """The last step whose update this member's state holds, as the coordinator is told (-1: none).

        It follows the commits of an up-to-date member; while the member
        catches up it stays behind until set (see the setter).
        """
        ptr = self._enter("committed_step")
        try:
            return int(lib.pmc_ftar_member_committed_step(ptr))
        finally:
            self._leave()

    @committed_step.setter
    def committed_step(self, step: int) -> None:
        """Say that the caller's state now holds the update of `step` (after catching up).

        While a member catches up, its commits leave the committed step
        behind, so the coordinator keeps it healing; once the caller has
        loaded the fetched state and replayed the updates committed since, it
        sets the last step it holds and the next quorum counts it as up to
        date.
        """
        step = _check_step(step, "committed_step", -1)
        ptr = self._enter("committed_step")
        try:
            lib.pmc_ftar_member_set_committed_step(ptr, step)
        finally:
            self._leave()

    def begin_step(self, step: int) -> StepInfo:
        """Wait for the quorum of `step` and return the step's :class:`StepInfo`.

        A joining replica passes the step it would run next; ``info.step`` is
        the group's step, which it adopts. Not OK (TOO_FEW,
        COORDINATOR_LOST, TIMEOUT, ...): no quorum; call again.
        """
        step = _check_step(step, "step")
        ptr = self._enter("begin_step")
        try:
            info = ffi.new("pmc_ftar_step_info *")
            rc = lib.pmc_ftar_member_begin_step(ptr, step, info)
            status = self._status(rc, f"begin_step(step={step})", ptr)
            return StepInfo(status=status, epoch=int(info.epoch), step=int(info.step),
                            n_members=int(info.n_members), index=int(info.index), healing=bool(info.healing),
                            n_healing=int(info.n_healing), serve_state=bool(info.serve_state))
        finally:
            self._leave()

    def allreduce(self, x: Any, out: Any = None, *, contribute: bool = True, op: str = "sum") -> AllreduceResult:
        """Reduce `x` over the contributing members into `out` (out-of-place).

        `x` is a C-contiguous numpy array (float32, float64, float16, int32,
        int64) or CPU torch tensor (those and bfloat16); 16-bit types
        accumulate in float32. `out` must have the same kind, shape and dtype,
        be contiguous and writable and not overlap `x` (so `x` survives an
        abort and can be reduced again); default: a new array or tensor.
        ``contribute=False`` takes part with zeros (a healing member); `op` is
        "sum", "max" or "min". Every member of the epoch makes the same call
        with the same count and dtype.
        """
        op_code = _OPS.get(op.lower()) if isinstance(op, str) else None
        if op_code is None:
            raise ValueError(f"op={op!r}: expected one of {', '.join(_OPS)}")
        if _is_torch(x):
            dtype, count, in_ptr, out = self._torch_args(x, out)
            out_ptr = ffi.cast("void *", out.data_ptr())
        else:
            dtype, count, in_ptr, out = self._numpy_args(x, out)
            out_ptr = ffi.from_buffer(out, require_writable=True)
        ptr = self._enter("allreduce")
        try:
            res = ffi.new("pmc_ftar_result *")
            rc = lib.pmc_ftar_member_allreduce(ptr, in_ptr, out_ptr, count, dtype, op_code, int(bool(contribute)), res)
            status = self._status(rc, f"allreduce of {count} elements", ptr)
            return AllreduceResult(status=status, n_contrib=int(res.n_contrib), epoch=int(res.epoch), result=out)
        finally:
            self._leave()

    @staticmethod
    def _check_overlap(in_addr: int, out_addr: int, nbytes: int) -> None:
        if nbytes and in_addr < out_addr + nbytes and out_addr < in_addr + nbytes:
            raise ValueError("out overlaps x: the allreduce is out-of-place so that x survives an abort and can be "
                             "reduced again; pass a separate out (or out=None for a new one)")

    def _numpy_args(self, x: Any, out: Any) -> tuple[int, int, Any, Any]:
        import numpy as np

        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy array or a torch tensor, not {type(x).__name__}")
        if x.dtype.byteorder not in ("=", "|") or x.dtype.name not in _NUMPY_DTYPES:
            raise TypeError(f"x has dtype {x.dtype.str} ({x.dtype.name}); FTAR reduces native "
                            f"{', '.join(_NUMPY_DTYPES)} (bfloat16 as a torch tensor): convert with x.astype()")
        if not x.flags.c_contiguous:
            raise ValueError("x is not contiguous: pass np.ascontiguousarray(x)")
        if out is None:
            out = np.empty_like(x, order="C")
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a numpy array like x, not {type(out).__name__}")
            if out.shape != x.shape or out.dtype != x.dtype:
                raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; it must match x: "
                                 f"shape {x.shape}, dtype {x.dtype}")
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("out must be a contiguous, writable array (e.g. np.empty_like(x))")
            self._check_overlap(x.__array_interface__["data"][0], out.__array_interface__["data"][0], x.nbytes)
        return _NUMPY_DTYPES[x.dtype.name], int(x.size), ffi.from_buffer(x), out

    def _torch_args(self, x: Any, out: Any) -> tuple[int, int, Any, Any]:
        import torch

        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a numpy array or a torch tensor, not {type(x).__name__}")
        name = str(x.dtype).removeprefix("torch.")
        if name not in _TORCH_DTYPES:
            raise TypeError(f"x has dtype {x.dtype}; FTAR reduces {', '.join(_TORCH_DTYPES)}: convert with x.to()")
        if x.device.type != "cpu":
            raise ValueError(f"x is on {x.device}; FTAR reduces host memory: pass x.cpu() (or a pinned copy)")
        if x.layout != torch.strided:
            raise TypeError(f"x has layout {x.layout}; pass a dense (strided) tensor")
        if not x.is_contiguous():
            raise ValueError("x is not contiguous: pass x.contiguous()")
        nbytes = x.numel() * x.element_size()
        if out is None:
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
        else:
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"out must be a torch tensor like x, not {type(out).__name__}")
            if out.shape != x.shape or out.dtype != x.dtype:
                raise ValueError(f"out has shape {tuple(out.shape)} and dtype {out.dtype}; it must match x: "
                                 f"shape {tuple(x.shape)}, dtype {x.dtype}")
            if out.device.type != "cpu" or out.layout != torch.strided or not out.is_contiguous():
                raise ValueError("out must be a contiguous CPU tensor (e.g. torch.empty_like(x))")
            self._check_overlap(x.data_ptr(), out.data_ptr(), nbytes)
        return _TORCH_DTYPES[name], int(x.numel()), ffi.cast("void *", x.data_ptr()), out

    def commit(self, step: int, ok: bool = True) -> bool:
        """Vote on (current epoch, `step`); True only when the coordinator decided COMMIT.

        Pass ``ok=False`` when this member cannot apply the step. The status
        of the vote is kept in :attr:`last_status` (FENCED: this member was
        evicted and must catch up; COORDINATOR_LOST: no decision, do not
        apply).
        """
        step = _check_step(step, "step")
        ptr = self._enter("commit")
        try:
            rc = lib.pmc_ftar_member_commit(ptr, step, int(bool(ok)))
            self.last_status = self._status(rc, f"commit(step={step})", ptr)
            return self.last_status is Status.OK
        finally:
            self._leave()

    def publish_state(self, step: int, data: Any) -> None:
        """Offer `data` (bytes-like: the state after `step`) to members catching up.

        The member copies it once; transfers in progress keep the snapshot
        they started with. FtarError if the copy fails.
        """
        step = _check_step(step, "step", -1)
        try:
            view = memoryview(data)
        except TypeError:
            raise TypeError(f"data must be bytes-like (bytes, bytearray, memoryview), not {type(data).__name__}") \
                from None
        if not view.c_contiguous:
            raise ValueError("data must be a contiguous buffer: pass bytes(data)")
        buf = ffi.from_buffer(view) if view.nbytes else ffi.NULL
        ptr = self._enter("publish_state")
        try:
            rc = lib.pmc_ftar_member_publish_state(ptr, step, buf, view.nbytes)
            status = self._status(rc, f"publish_state(step={step})", ptr)
            if status is not Status.OK:
                raise FtarError(f"publish_state(step={step}): {status.value}: {self._message(ptr)}", status)
        finally:
            self._leave()

    def fetch_state(self, min_step: int) -> tuple[int, memoryview]:
        """Fetch the newest state of a step >= `min_step` from the donor the coordinator assigned.

        Returns (step, data): data is a read-only memoryview of the received
        bytes (no copy; the memory is released with the last reference to
        it). Another donor is tried if one fails. Raises FtarError (with
        ``status``: ABORTED when no donor is left, TIMEOUT at the deadline)
        when no state arrives. May run in a background thread.
        """
        min_step = _check_step(min_step, "min_step", -1)
        ptr = self._enter("fetch_state")
        try:
            step_p = ffi.new("int64_t *")
            buf_p = ffi.new("void **")
            len_p = ffi.new("size_t *")
            rc = lib.pmc_ftar_member_fetch_state(ptr, min_step, step_p, buf_p, len_p)
            owned = ffi.gc(buf_p[0], lib.pmc_ftar_free) if buf_p[0] != ffi.NULL else None
            status = self._status(rc, f"fetch_state(min_step={min_step})", ptr, fetch=True)
            if status is not Status.OK:
                raise FtarError(f"fetch_state(min_step={min_step}): {status.value}: {self._message(ptr, True)}",
                                status)
            n = int(len_p[0])
            data = memoryview(ffi.buffer(owned, n)).toreadonly() if owned is not None and n else memoryview(b"")
            return int(step_p[0]), data
        finally:
            self._leave()
