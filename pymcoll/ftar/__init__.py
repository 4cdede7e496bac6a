"""Fault-tolerant allreduce (FTAR) between the replicas of a data-parallel job.

Each replica (one process, or the leader of one MPI job) creates a
:class:`Member` that talks TCP to a small coordinator
(``python -m pymcoll ftar-coordinator``) and to the other members. No MPI is
involved: importing this module loads neither mpi4py nor pymcoll's MPI core,
so the MPI job of one replica can die and be restarted while the others go on.

The model:

* **Epochs.** Every operation runs in an epoch, a version of the membership.
  The coordinator starts a new epoch whenever a member joins, leaves or an
  operation fails. A failure anywhere aborts the operation on every member
  (status ``ABORTED``, ``TIMEOUT``, ...); nobody ever uses a partial sum.
* **Quorum per step.** :meth:`Member.begin_step` waits until the coordinator
  forms the quorum of the step: every previous member, or at least
  ``min_replicas`` after the join timeout. The returned :class:`StepInfo`
  tells the group's step (a joining replica adopts it), the epoch, and whether
  this member heals.
* **Out-of-place allreduce.** :meth:`Member.allreduce` sums (max, min) the
  inputs of the contributing members into ``out``; the input is untouched, so
  after an abort the same input can be reduced again in the next epoch.
  ``n_contrib`` tells how many replicas contributed, so the caller averages.
* **Commit.** An update is applied only after :meth:`Member.commit` returns
  True: the coordinator decided COMMIT for (epoch, step) because every
  surviving member reported success. No decision (e.g. the coordinator is
  lost) means no commit: the step is not applied.
* **Healing.** A (re)joining replica takes part in the ring with zeros
  (``contribute=False``; it is not counted in ``n_contrib``) while it fetches
  a state snapshot from a donor the coordinator assigns
  (:meth:`Member.fetch_state`); donors publish their state when the step info
  says ``serve_state`` (:meth:`Member.publish_state`). The joiner then replays
  the updates committed since the snapshot. :mod:`pymcoll.ftar.training` runs
  that loop for torch models.

Every connection is authenticated with a job token shared by the coordinator
and the members (``PYMCOLL_FTAR_TOKEN``, or a file), never sent in clear and
never taken from the command line.

The parts, one module each, whose public names are all here in
``pymcoll.ftar`` too:

* :mod:`pymcoll.ftar.member`: :class:`Member` and what its calls return
  (:class:`Status`, :class:`StepInfo`, :class:`AllreduceResult`,
  :class:`FtarError`).
* :mod:`pymcoll.ftar.address`: "HOST:PORT" addresses and the job token
  (:func:`parse_address`, :func:`resolve_token`).
* :mod:`pymcoll.ftar.coordinator`: :class:`Coordinator`, the coordinator
  served by this process (``python -m pymcoll ftar-coordinator`` is its
  command line).
* :mod:`pymcoll.ftar.state`: state snapshots that are never unpickled
  (:func:`encode_state`, :func:`decode_state`, :func:`state_hash`, ...).
* :mod:`pymcoll.ftar.training`: :class:`FaultTolerantTrainer`, the
  fault-tolerant training loop for torch models.

and one that is imported on its own:

* :mod:`pymcoll.ftar.local_cluster`: ``LocalCluster``, a coordinator and
  replica processes on this machine (start, SIGKILL, restart, their events),
  for tests, benchmarks and demonstrations.

Example::

    from pymcoll.ftar import Member
    with Member("127.0.0.1:29400", "replica-3") as m:
        info = m.begin_step(step)
        res = m.allreduce(grads, contribute=not info.healing)
        if res.ok and m.commit(info.step):
            grads_avg = res.result / max(res.n_contrib, 1)
"""


from __future__ import annotations

from .address import TOKEN_ENV, TOKEN_FILE_ENV, parse_address, resolve_token, route_address
from .coordinator import Coordinator, write_addr_file
from .member import FAULT_ENV, AllreduceResult, FtarError, Member, Status, StepInfo
from .state import decode_state, encode_state, load_model_state, model_state, state_hash
from .training import FaultTolerantTrainer, StepReport

__all__ = [
    "Status", "StepInfo", "AllreduceResult", "Member", "FtarError", "resolve_token", "parse_address", "route_address",
    "TOKEN_ENV", "TOKEN_FILE_ENV", "FAULT_ENV",
    "Coordinator", "write_addr_file",
    "encode_state", "decode_state", "model_state", "load_model_state", "state_hash",
    "FaultTolerantTrainer", "StepReport",
]
