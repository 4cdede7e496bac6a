"""Requests of non-blocking and persistent collectives, as mpi4py's.

``comm.Iallgather(...)`` returns a :class:`Request`; ``comm.Allgather_init(...)``
a :class:`Prequest` (persistent: ``Start`` runs it again, one C call). Neither
the I-call nor ``Start`` waits for other ranks; the collective moves in
``Test``/``Wait`` (and in a background thread with ``PYMCOLL_PROGRESS_THREAD=1``).
"""

from __future__ import annotations

from typing import Any, Sequence

from ._native import ffi, lib

_NULL = ffi.NULL
# Bound once: Start/Wait of a persistent request are on the latency path.
_start = lib.pmc_request_start
_wait = lib.pmc_request_wait
_test = lib.pmc_request_test


class Request:
    """A non-blocking collective in flight (``Test``, ``Wait``, ``Free``)."""

    __slots__ = ("_comm", "_handle", "_call", "_done", "_mpi_request", "_external_seq", "_after", "_before",
                 "__weakref__")

    def __init__(self, comm: Any, handle: Any, call: Any, mpi_request: Any = None) -> None:
        self._comm = comm  # keeps the communicator alive while the request is
        self._handle = None if handle == _NULL else handle  # None once null
        self._call = call  # keeps the buffers alive while the core uses them
        self._done = ffi.new("int *")
        self._mpi_request = mpi_request  # a delegated call's mpi4py request
        self._external_seq = 0  # its open trace record (0: none)
        self._after = tuple(call.after)  # unpacking derived datatypes after completion
        self._before = tuple(call.before)  # packing them again before a persistent start

    # -- completion ----------------------------------------------------------
    def _what(self) -> str:
        return ffi.string(lib.pmc_coll_name(self._call.args.coll)).decode()

    def _completed(self, rc: int) -> None:
        if rc != lib.PMC_OK:
            msg = ffi.string(lib.pmc_request_errmsg(self._handle)).decode(errors="replace")
            self._after_run()
            if not msg and self._comm._handle == _NULL:
                msg = f"{self._what()}: the communicator was freed before the request completed"
            self._comm._raise_request_error(rc, msg, self._what())
        self._after_run()
        for step in self._after:
            step()

    def _after_run(self) -> None:
        """A non-blocking request is spent once complete (it becomes null)."""
        lib.pmc_request_free(self._handle)
        self._handle = None

    def Test(self, status: Any = None) -> bool:  # noqa: N802 - mpi4py name
        """Progress the collective without waiting; True once it is complete."""
        if self._mpi_request is not None:
            return self._external_test(status)
        if self._handle is None:
            return True
        rc = _test(self._handle, self._done)
        if not self._done[0]:
            return False
        self._completed(rc)
        return True

    def Wait(self, status: Any = None) -> bool:  # noqa: N802 - mpi4py name
        """Complete the collective (raises the collective's error, if any)."""
        h = self._handle
        if h is None:
            return True if self._mpi_request is None else self._external_wait(status)
        rc = _wait(h)
        if rc or self._after or type(self) is Request:
            self._completed(rc)
        return True

    # -- delegated calls (run in the wrapped communicator) ----------------------
    def _external_finish(self, status: int) -> None:
        seq, self._external_seq = self._external_seq, 0
        self._comm._external_done(seq, status)

    def _external_test(self, status: Any) -> bool:
        try:
            done = self._mpi_request.Test(status)
        except BaseException:
            self._external_finish(lib.PMC_ERR_MPI)
            raise
        if done:
            self._external_finish(lib.PMC_OK)
        return done

    def _external_wait(self, status: Any) -> bool:
        try:
            self._mpi_request.Wait(status)
        except BaseException:
            self._external_finish(lib.PMC_ERR_MPI)
            raise
        self._external_finish(lib.PMC_OK)
        return True

    def Free(self) -> None:  # noqa: N802 - mpi4py name
        """Release the request. An active one completes in the background
        (its buffers stay in use until then, as in MPI)."""
        if self._mpi_request is not None:
            self._mpi_request.Free()
            return
        if self._handle is None:
            return
        if lib.pmc_request_active(self._handle):
            self._comm._adopt(self._handle, self._call)
        else:
            lib.pmc_request_free(self._handle)
        self._handle = None

    def __bool__(self) -> bool:
        """False once the request is null (completed or freed), like mpi4py's."""
        if self._mpi_request is not None:
            return bool(self._mpi_request)
        return self._handle is not None

    def __del__(self) -> None:
        try:
            self.Free()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    # -- helpers over lists, as mpi4py's class methods -----------------------
    @classmethod
    def Waitall(cls, requests: Sequence["Request"], statuses: Any = None) -> bool:  # noqa: N802
        """Wait for every request in order."""
        for r in requests:
            r.Wait()
        return True

    @classmethod
    def Testall(cls, requests: Sequence["Request"], statuses: Any = None) -> bool:  # noqa: N802
        """Progress every request; True when all are complete."""
        done = True
        for r in requests:
            done = r.Test() and done
        return done

    @classmethod
    def Waitany(cls, requests: Sequence["Request"], status: Any = None) -> int:  # noqa: N802
        """Index of a request that completed (MPI.UNDEFINED if none is active)."""
        from mpi4py import MPI

        live = [i for i, r in enumerate(requests) if r]
        if not live:
            return MPI.UNDEFINED
        while True:
            for i in live:
                if requests[i].Test():
                    return i


class Prequest(Request):
    """A persistent collective: ``Start`` it, complete it, start it again."""

    __slots__ = ()

    def _after_run(self) -> None:
        pass  # stays valid for the next Start

    def Start(self) -> None:  # noqa: N802 - mpi4py name
        """Start the collective again; never waits for other ranks."""
        h = self._handle
        if h is None:
            if self._mpi_request is not None:
                _, self._external_seq = self._comm._external(self._call, 2, self._mpi_request.Start, (),
                                                             end=False)
                return
            raise ValueError("Start: this persistent request was freed; create a new one")
        for step in self._before:
            step()
        rc = _start(h)
        if rc:
            self._comm._live_handle(f"{self._what()} Start")  # raises if the communicator was freed
            self._comm._check(rc, f"{self._what()} Start")

    @classmethod
    def Startall(cls, requests: Sequence["Prequest"]) -> None:  # noqa: N802
        """Start every request, in order (the order every rank must use)."""
        for r in requests:
            r.Start()

    def __bool__(self) -> bool:
        if self._mpi_request is not None:
            return bool(self._mpi_request)
        return self._handle is not None

