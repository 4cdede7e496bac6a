"""A replica of a toy training run on FTAR, with catch-up.

The state is a float64 vector; each step every replica contributes an
integer-valued gradient whose element 0 names it (see common.marked_input),
the sum is checked exactly, and the update w += sum / n_contrib is applied
only after COMMIT. A joiner contributes zeros, fetches the state from a
donor in a background thread and replays the updates committed meanwhile.
Events: quorum, allreduce, commit, nocommit, healed, fetch_failed, done.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

import numpy as np

from pymcoll.ftar import Member

from .common import check_sum, digest, emit, marked_input, parser, ready_and_wait


class Replica:
    def __init__(self, args) -> None:
        self.args = args
        self.number = args.number
        self.w = np.zeros(args.dim, np.float64)
        self.up_to_date = True
        self.pending: dict[int, np.ndarray] = {}  # step -> update, committed while catching up
        self.fetch: Optional[threading.Thread] = None
        self.fetched: Optional[tuple[int, bytes]] = None
        self.fetch_error = ""
        self.member = Member(args.coordinator, args.id, timeout=args.timeout, streams=args.streams,
                             integrity=args.integrity, chunk_bytes=args.chunk_bytes, log=True,
                             committed_step=-1)

    def state_bytes(self) -> bytes:
        raw = self.w.tobytes()
        return raw + bytes(max(0, self.args.state_bytes - len(raw)))

    def _fetch(self, min_step: int) -> None:
        try:
            self.fetched = self.member.fetch_state(min_step)
        except Exception as exc:  # noqa: BLE001 - reported as an event, retried next step
            self.fetch_error = str(exc)

    def catch_up(self) -> None:
        """Loads a fetched snapshot and replays the updates committed after it."""
        if self.fetch is None or self.fetch.is_alive():
            return
        self.fetch = None
        if self.fetched is None:
            emit("fetch_failed", reason=self.fetch_error)
            return
        t, data = self.fetched
        self.fetched = None
        self.w = np.frombuffer(data[: self.args.dim * 8], np.float64).copy()
        last = t
        while last + 1 in self.pending:
            self.w += self.pending[last + 1]
            last += 1
        replayed = last - t
        self.pending.clear()
        self.up_to_date = True
        self.member.committed_step = last
        emit("healed", from_step=t, replayed=replayed, step=last, hash=digest(self.w))

    def run(self) -> None:
        a = self.args
        step = 0
        out = np.empty(a.dim, np.float32)
        zeros = np.zeros(a.dim, np.float32)
        ready_and_wait(a.start_file)
        while step < a.steps:
            self.catch_up()
            info = self.member.begin_step(step)
            if not info.ok:
                emit("quorum", status=info.status.value, step=step)
                time.sleep(0.05)
                continue
            step = info.step
            emit("quorum", status="OK", step=step, epoch=info.epoch, n=info.n_members, healing=info.healing,
                 serve=info.serve_state)
            if self.fetch is None:  # the coordinator knows who holds the group's state
                self.up_to_date = not info.healing
            if info.serve_state and self.up_to_date:
                self.member.publish_state(step - 1, self.state_bytes())
            if not self.up_to_date and self.fetch is None:
                self.fetch = threading.Thread(target=self._fetch, args=(step - 1,), daemon=True)
                self.fetch.start()
            contribute = self.up_to_date and not info.healing
            time.sleep(a.sleep)  # the step's compute
            t0 = time.monotonic()
            res = self.member.allreduce(marked_input(self.number, step, a.dim) if contribute else zeros, out=out,
                                        contribute=contribute)
            mask, exact = check_sum(out, step, res.n_contrib) if res.ok else (0, True)
            emit("allreduce", step=step, status=res.status.value, n_contrib=res.n_contrib, mask=mask, exact=exact,
                 epoch=res.epoch, ms=(time.monotonic() - t0) * 1e3)
            if not res.ok:
                continue
            if not self.member.commit(step, True):
                emit("nocommit", step=step, status=self.member.last_status.value)
                continue
            update = out.astype(np.float64) / max(res.n_contrib, 1)
            if info.healing or not self.up_to_date:
                self.pending[step] = update
            else:
                self.w += update
            emit("commit", step=step, epoch=res.epoch, n_contrib=res.n_contrib, mask=mask,
                 hash=digest(self.w) if self.up_to_date and not info.healing else None)
            step += 1
        emit("done", step=step, hash=digest(self.w))
        self.member.close()


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--number", type=int, required=True, help="bit of this replica in the sum's marker")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dim", type=int, default=1000)
    p.add_argument("--state-bytes", type=int, default=0, help="pad the state snapshot to this size")
    p.add_argument("--sleep", type=float, default=0.02, help="seconds of 'compute' per step")
    Replica(p.parse_args()).run()


if __name__ == "__main__":
    main()
