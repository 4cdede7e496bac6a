"""Work objects of the torch.distributed backend, and the thread that completes them.

A :class:`Work` wraps the pymcoll (or mpi4py, for send/recv) requests of one
torch operation, plus the local steps that follow them (copying a staged
result back, dividing for AVG). Whoever comes first completes it, once:
``wait()`` in the caller, ``is_completed()`` when a Test says the requests
are done, or the group's :class:`Completer` thread once ``get_future()``
asked for a future (DDP's reducer takes the future and waits on it from C++,
where nothing of ours would run, so someone else has to drive it).
"""

from __future__ import annotations

import queue
import threading
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
from mpi4py import MPI

from .errors import as_torch_error


class Work(dist.Work):
    """A torch.distributed work handle for one operation of the pymcoll backend.

    ``wait()`` blocks until the operation is complete and raises its error,
    ``is_completed()`` polls, ``get_future()`` returns a ``torch.futures.Future``
    whose value is the list of output tensors (completed by the group's
    completer thread when the operation is still running).
    """

    def __init__(self, op: str, result: Any, requests: Sequence[Any] = (),
                 finish: Sequence[Callable[[], None]] = (), completer: Optional["Completer"] = None,
                 status: Optional[MPI.Status] = None) -> None:
        super().__init__()
        self._op = op
        self._result = result
        self._requests = list(requests)
        self._finish = list(finish)
        self._completer = completer
        self._status = status  # recv: where the message came from
        self._future: torch.futures.Future = torch.futures.Future()
        self._lock = threading.Lock()  # held by whoever completes the work
        self._done = False
        self._submitted = False
        self._error: Optional[BaseException] = None
        if not self._requests:
            self._complete()

    # -- completion (self._lock held, or in __init__) -------------------------
    def _complete(self) -> None:
        try:
            for req in self._requests:
                if isinstance(req, MPI.Request):
                    req.Wait(self._status)
                else:
                    req.Wait()
            for step in self._finish:
                step()
        except BaseException as exc:  # noqa: BLE001 - handed to wait() and to the future
            self._fail(exc)
            return
        self._requests = []
        self._done = True
        self._future.set_result(self._result)

    def _fail(self, exc: BaseException) -> None:
        exc = as_torch_error(self._op, exc)
        self._error = exc
        self._requests = []
        self._done = True
        self._future.set_exception(exc)

    def _try_complete(self, block: bool) -> bool:
        if self._done:
            return True
        if not self._lock.acquire(blocking=block):
            return False  # another thread is completing it right now
        try:
            if not self._done:
                if block:
                    self._complete()
                else:
                    try:
                        ready = all(self._test(r) for r in self._requests)
                    except BaseException as exc:  # noqa: BLE001 - the work failed
                        self._fail(exc)
                    else:
                        if ready:
                            self._complete()
        finally:
            self._lock.release()
        return self._done

    def _test(self, req: Any) -> bool:
        if isinstance(req, MPI.Request):
            return bool(req.Test(self._status))
        return bool(req.Test())

    # -- torch's Work API -----------------------------------------------------
    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        """Block until the operation completes; raise its error if it failed.

        The deadline is the group's (torch's ``timeout=`` of the group, or
        PYMCOLL_TIMEOUT); a per-call `timeout` is not supported and ignored.
        """
        self._try_complete(block=True)
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        """Whether the operation is complete (moves it along without blocking)."""
        return self._try_complete(block=False)

    def is_success(self) -> bool:
        """Whether the operation completed without an error (False while it runs)."""
        return self._done and self._error is None

    def exception(self) -> Optional[BaseException]:
        """The operation's error, or None."""
        return self._error

    def result(self) -> Any:
        """The output tensors (after ``wait()``)."""
        self.wait()
        return self._result

    def synchronize(self) -> None:
        """Same as ``wait()`` for CPU tensors."""
        self.wait()

    def get_future(self) -> torch.futures.Future:
        """A future of the output tensor list, completed when the operation is.

        When the operation is still running, the group's completer thread
        completes it; where MPI has no MPI_THREAD_MULTIPLE (so no thread may
        call into MPI beside the caller), this completes it here instead.
        """
        if not self._done and not self._submitted:
            self._submitted = True
            if self._completer is None or not self._completer.submit(self):
                self._try_complete(block=True)
        return self._future

    def _source_rank(self) -> int:
        """recv from any source: the group rank the message came from."""
        self.wait()
        return self._status.Get_source() if self._status is not None else -1

    def source_rank(self) -> int:
        """recv from any source: the group rank the message came from."""
        return self._source_rank()

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else ("done" if self._done else "running")
        return f"<pymcoll Work {self._op} {state}>"


class Completer:
    """A daemon thread per group that completes works whose futures were taken.

    It waits for them in the order they were submitted, which is the order
    their collectives were started on the communicator (pymcoll completes
    requests of one communicator in order). Needs MPI_THREAD_MULTIPLE: the
    thread calls into MPI while the caller may too (pymcoll serializes
    calls on one communicator internally).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: "queue.SimpleQueue[Optional[Work]]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._closed = False
        self.enabled = MPI.Query_thread() >= MPI.THREAD_MULTIPLE

    def submit(self, work: Work) -> bool:
        """Hand `work` to the thread; False when there is no thread (complete it yourself)."""
        if not self.enabled:
            return False
        with self._lock:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"pymcoll-completer-{self._name}",
                                                daemon=True)
                self._thread.start()
            self._queue.put(work)
        return True

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            work._try_complete(block=True)

    def close(self, timeout: float = 60.0) -> bool:
        """Complete what was submitted, then stop the thread (waits up to `timeout`
        seconds); False if the thread is still busy then."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._thread = None
        if thread is None:
            return True
        self._queue.put(None)
        thread.join(timeout)
        return not thread.is_alive()
