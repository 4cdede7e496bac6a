"""The "pymcoll" process group: torch.distributed operations on a pymcoll.Comm.

torch 2.x builds a third-party backend through the creator registered with
``Backend.register_backend``. The C++ ``Backend`` class cannot be subclassed
from Python (it has no Python constructor), but ``ProcessGroup`` can: when a
creator returns a ``ProcessGroup`` subclass, torch uses that object as the
group itself. torch's Python API then calls its methods by name
(``allreduce``, ``all_gather_single``, ...), and C++ callers such as DDP's
reducer reach the ones torch's trampoline forwards (allreduce, broadcast,
allgather, barrier, send, recv, ...).

Every operation is a pymcoll collective on the group's communicator; with
``async_op=True`` (and from C++, where asyncOp is the default) its
non-blocking form, so communication overlaps the caller's work.
"""

from __future__ import annotations

import os
import warnings
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
from mpi4py import MPI

import pymcoll

from . import sparse
from . import tensors as targs
from .errors import as_torch_error
from .tensors import Staged, byte_view, fail, typed_view
from .work import Completer, Work

BACKEND_NAME = "pymcoll"
_IN_PLACE = MPI.IN_PLACE
_GROUP_TAG = 7341  # Create_group tag: torch creates groups in the same order on every member


def _nonblocking(name: str) -> str:
    return "I" + name[0].lower() + name[1:]


class ProcessGroupPymcoll(dist.ProcessGroup):
    """A torch.distributed process group whose operations run on a :class:`pymcoll.Comm`.

    Made by ``dist.init_process_group("pymcoll")`` and
    ``dist.new_group(..., backend="pymcoll")``; not meant to be built by hand.
    ``comm`` is the pymcoll communicator of the group (its ranks are the
    group's ranks).
    """

    def __init__(self, comm: pymcoll.Comm, group_name: str = "") -> None:
        super().__init__(comm.rank, comm.size)
        self._comm = comm
        # Point-to-point traffic gets its own communicator, so user tags can
        # never meet messages of pymcoll's own algorithms.
        self._p2p: Optional[MPI.Comm] = comm.mpi.Dup()
        self._completer = Completer(group_name or "default")
        self._size = comm.size
        self._rank = comm.rank
        self._group_name = group_name
        self._group_desc = ""

    # -- identity -------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        """The backend's name, "pymcoll"."""
        return BACKEND_NAME

    # torch keeps a group's name and description in its C++ backends, which a
    # Python group has none of: keep them here (torch's trampoline asks for them).
    def getGroupName(self) -> str:  # noqa: N802 - torch's name
        """The group's name, as torch set it."""
        return self._group_name

    def setGroupName(self, name: str) -> None:  # noqa: N802 - torch's name
        self._group_name = name

    def getGroupDesc(self) -> str:  # noqa: N802 - torch's name
        """The group's description, as torch set it."""
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802 - torch's name
        self._group_desc = desc

    @property
    def comm(self) -> pymcoll.Comm:
        """The pymcoll communicator of this group."""
        if self._p2p is None:
            raise RuntimeError("pymcoll backend: the process group was shut down")
        return self._comm

    def __repr__(self) -> str:
        return f"<pymcoll ProcessGroup rank {self._rank} of {self._size}>"

    # -- plumbing -------------------------------------------------------------
    def _run(self, op: str, opts: Any, call: str, args: Sequence[Any], result: Any,
             finish: Sequence[Callable[[], None]] = ()) -> Work:
        """Run pymcoll's `call` (blocking) or its non-blocking form, wrapped in a Work.

        torch's Python API says asyncOp=False when the caller waits at once: the
        blocking form is quicker then (pymcoll's fast paths). C++ callers leave
        asyncOp at its default, True.
        """
        if self._p2p is None:
            raise fail(op, "the process group was shut down", RuntimeError)
        comm = self._comm
        if getattr(opts, "asyncOp", True):
            req = getattr(comm, _nonblocking(call))(*args)
            return Work(op, result, [req], finish, self._completer)
        try:
            getattr(comm, call)(*args)
        except pymcoll.Error as exc:
            raise as_torch_error(op, exc) from exc
        return Work(op, result, (), finish)

    def _root(self, op: str, root: int, arg: str = "root") -> int:
        if not 0 <= root < self._size:
            raise fail(op, f"{arg} {root} is not a rank of the group (size {self._size})")
        return root

    def _average(self, flat: torch.Tensor) -> Callable[[], None]:
        size = self._size
        return lambda: flat.div_(size)

    # -- reductions -----------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        """all_reduce: every rank gets the reduction of every rank's tensor (in place)."""
        op = "all_reduce"
        if len(tensors) == 1 and isinstance(tensors[0], torch.Tensor) and tensors[0].layout == torch.sparse_coo:
            return self._sparse_allreduce(op, tensors, opts)
        t = targs.one(tensors, op, "tensor")
        mpi_op, avg = targs.reduce_op(op, opts.reduceOp if opts is not None else dist.ReduceOp.SUM, t.dtype)
        buf = Staged(t)
        finish = ([self._average(buf.flat)] if avg else []) + [buf.copy_back]
        return self._run(op, opts, "Allreduce", (_IN_PLACE, typed_view(buf.flat), mpi_op), tensors, finish)

    def _sparse_allreduce(self, op: str, tensors: list[torch.Tensor], opts: Any) -> Work:
        """all_reduce of a sparse COO tensor (SUM or AVG), done when this returns."""
        self.comm  # noqa: B018 - raises when the group was shut down
        try:
            sparse.all_reduce(self._comm, op, tensors[0], opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        except pymcoll.Error as exc:
            raise as_torch_error(op, exc) from exc
        return Work(op, tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        """all_reduce_coalesced: all_reduce of several tensors as one operation."""
        op = "all_reduce_coalesced"
        ts = targs.check_list(tensors, op, "tensors")
        if not ts:
            return Work(op, tensors)
        targs.same_dtype(op, ts[0], ts, "tensors")
        kind = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        mpi_op, avg = targs.reduce_op(op, kind, ts[0].dtype)
        flat = targs.concat(ts, ts[0].dtype)
        finish = ([self._average(flat)] if avg else []) + [targs.scatter_into(flat, ts)]
        return self._run(op, opts, "Allreduce", (_IN_PLACE, typed_view(flat), mpi_op), tensors, finish)

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        """reduce: the root's tensor gets the reduction; the others' stay as they were."""
        op = "reduce"
        t = targs.one(tensors, op, "tensor")
        root = self._root(op, opts.rootRank, "dst")
        mpi_op, avg = targs.reduce_op(op, opts.reduceOp, t.dtype)
        buf = Staged(t)
        if root == self._rank:
            finish = ([self._average(buf.flat)] if avg else []) + [buf.copy_back]
            args = (_IN_PLACE, typed_view(buf.flat), mpi_op, root)
        else:
            finish = []
            args = (typed_view(buf.flat), None, mpi_op, root)
        return self._run(op, opts, "Reduce", args, tensors, finish)

    def reduce_scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                       opts: Any) -> Work:
        """reduce_scatter: rank i gets the reduction of every rank's input_list[i]."""
        op = "reduce_scatter"
        out = targs.one(outputs, op, "output")
        ins = self._per_rank_list(op, input_lists, "input_list",
                                  f"expected one input list per process, got {len(input_lists)}", out)
        mpi_op, avg = targs.reduce_op(op, opts.reduceOp, out.dtype)
        send = targs.concat(ins, out.dtype)
        buf = Staged(out)
        finish = ([self._average(buf.flat)] if avg else []) + [buf.copy_back]
        return self._run(op, opts, "Reduce_scatter_block", (typed_view(send), typed_view(buf.flat), mpi_op),
                         outputs, finish)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Work:  # noqa: A002
        """reduce_scatter_tensor: rank i gets block i of the reduction of every rank's input."""
        op = "reduce_scatter_tensor"
        inp, out = self._whole_and_block(op, input, "input", output, "output")
        mpi_op, avg = targs.reduce_op(op, opts.reduceOp, out.dtype)
        send = Staged(inp)
        buf = Staged(out)
        finish = ([self._average(buf.flat)] if avg else []) + [buf.copy_back]
        return self._run(op, opts, "Reduce_scatter_block", (typed_view(send.flat), typed_view(buf.flat), mpi_op),
                         [output], finish)

    _reduce_scatter_base = reduce_scatter_single  # the name older torch releases call
    reduce_scatter_tensor = reduce_scatter_single

    # -- data movement --------------------------------------------------------
    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        """broadcast: every rank's tensor gets the root's."""
        op = "broadcast"
        t = targs.one(tensors, op, "tensor")
        root = self._root(op, opts.rootRank, "src")
        buf = Staged(t)
        finish = [buf.copy_back] if root != self._rank else []
        return self._run(op, opts, "Bcast", (byte_view(buf.flat), root), tensors, finish)

    def allgather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> Work:
        """all_gather: output_list[i] of every rank gets rank i's tensor."""
        op = "all_gather"
        t = targs.one(inputs, op, "tensor")
        outs = self._per_rank_list(op, output_lists, "tensor_list",
                                   f"expected one output list per process, got {len(output_lists)}", t)
        send = Staged(t)
        recv = torch.empty(self._size * t.numel(), dtype=t.dtype)
        return self._run(op, opts, "Allgather", (byte_view(send.flat), byte_view(recv)), output_lists,
                         [targs.scatter_into(recv, outs)])

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Work:  # noqa: A002
        """all_gather_into_tensor: block i of every rank's output gets rank i's input."""
        op = "all_gather_into_tensor"
        out, inp = self._whole_and_block(op, output, "output_tensor", input, "input_tensor")
        send = Staged(inp)
        buf = Staged(out)
        return self._run(op, opts, "Allgather", (byte_view(send.flat), byte_view(buf.flat)), [output],
                         [buf.copy_back])

    _allgather_base = all_gather_single  # the name older torch releases call
    allgather_into_tensor = all_gather_single

    def _whole_and_block(self, op: str, whole: torch.Tensor, whole_name: str, block: torch.Tensor,
                         block_name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Checked (whole, block) of the *_tensor forms: whole holds group size x block elements."""
        w = targs.check_tensor(whole, op, whole_name)
        b = targs.check_tensor(block, op, block_name)
        targs.same_dtype(op, b, [w], whole_name)
        if w.numel() != b.numel() * self._size:
            raise fail(op, f"{whole_name} has {w.numel()} elements; it needs group size x {block_name} = "
                           f"{self._size} x {b.numel()} = {self._size * b.numel()}")
        return w, b

    def _per_rank_list(self, op: str, lists: list[list[torch.Tensor]], name: str, missing: str,
                       t: torch.Tensor) -> list[torch.Tensor]:
        """A list argument of one tensor per rank of the group, each with t's dtype and size;
        `missing` is the error when torch passed other than exactly one list."""
        if len(lists) != 1:
            raise fail(op, missing)
        tensors = targs.check_list(lists[0], op, name, self._size)
        targs.same_dtype(op, t, tensors, name)
        for i, x in enumerate(tensors):
            if x.numel() != t.numel():
                raise fail(op, f"{name}[{i}] has {x.numel()} elements but this rank's tensor has "
                               f"{t.numel()}; every entry of {name} must have as many")
        return tensors

    def gather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> Work:
        """gather: the root's gather_list[i] gets rank i's tensor."""
        op = "gather"
        t = targs.one(inputs, op, "tensor")
        root = self._root(op, opts.rootRank, "dst")
        send = Staged(t)
        if root == self._rank:
            outs = self._per_rank_list(op, output_lists, "gather_list",
                                       "the destination rank needs gather_list (one tensor per rank of the group)", t)
            recv = torch.empty(self._size * t.numel(), dtype=t.dtype)
            return self._run(op, opts, "Gather", (byte_view(send.flat), byte_view(recv), root), output_lists,
                             [targs.scatter_into(recv, outs)])
        if any(len(lst) for lst in output_lists):
            raise fail(op, "gather_list is given on a rank that is not the destination; pass it on dst only")
        return self._run(op, opts, "Gather", (byte_view(send.flat), None, root), output_lists)

    def scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any) -> Work:
        """scatter: rank i's tensor gets the root's scatter_list[i]."""
        op = "scatter"
        t = targs.one(outputs, op, "tensor")
        root = self._root(op, opts.rootRank, "src")
        buf = Staged(t)
        if root == self._rank:
            ins = self._per_rank_list(op, input_lists, "scatter_list",
                                      "the source rank needs scatter_list (one tensor per rank of the group)", t)
            send = targs.concat(ins, t.dtype)
            args = (byte_view(send), byte_view(buf.flat), root)
        else:
            if any(len(lst) for lst in input_lists):
                raise fail(op, "scatter_list is given on a rank that is not the source; pass it on src only")
            args = (None, byte_view(buf.flat), root)
        return self._run(op, opts, "Scatter", args, outputs, [buf.copy_back])

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          output_split_sizes: list[int], input_split_sizes: list[int], opts: Any = None) -> Work:
        """all_to_all_single: rows of input go to the ranks by input_split_sizes; output
        gets every rank's block for this rank, in rank order, by output_split_sizes."""
        op = "all_to_all_single"
        out = targs.check_tensor(output, op, "output")
        inp = targs.check_tensor(input, op, "input")
        targs.same_dtype(op, inp, [out], "output")
        in_rows, in_row_bytes = targs.rows(inp, op, "input")
        out_rows, out_row_bytes = targs.rows(out, op, "output")
        if in_rows and out_rows and in_row_bytes != out_row_bytes:
            raise fail(op, f"a row of input (dim 0 slice) has {in_row_bytes} bytes but a row of output has "
                           f"{out_row_bytes}; input and output need the same shape past dim 0")
        scounts, sdispls = targs.split_counts(op, "input_split_sizes", input_split_sizes, in_rows, in_row_bytes,
                                          self._size)
        rcounts, rdispls = targs.split_counts(op, "output_split_sizes", output_split_sizes, out_rows, out_row_bytes,
                                          self._size)
        send = Staged(inp)
        buf = Staged(out)
        args = ([byte_view(send.flat), scounts, sdispls, MPI.BYTE], [byte_view(buf.flat), rcounts, rdispls, MPI.BYTE])
        return self._run(op, opts, "Alltoallv", args, [output], [buf.copy_back])

    alltoall_base = all_to_all_single  # the name older torch releases call

    def alltoall(self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                 opts: Any = None) -> Work:
        """all_to_all: input_tensor_list[j] goes to rank j, output_tensor_list[i] comes from rank i."""
        op = "all_to_all"
        outs = targs.check_list(output_tensors, op, "output_tensor_list", self._size)
        ins = targs.check_list(input_tensors, op, "input_tensor_list", self._size)
        targs.same_dtype(op, ins[0], ins, "input_tensor_list")
        targs.same_dtype(op, ins[0], outs, "output_tensor_list")
        item = ins[0].element_size()
        scounts = [t.numel() * item for t in ins]
        rcounts = [t.numel() * item for t in outs]
        sdispls = [sum(scounts[:i]) for i in range(self._size)]
        rdispls = [sum(rcounts[:i]) for i in range(self._size)]
        send = targs.concat(ins, ins[0].dtype)
        recv = torch.empty(sum(t.numel() for t in outs), dtype=ins[0].dtype)
        args = ([byte_view(send), scounts, sdispls, MPI.BYTE], [byte_view(recv), rcounts, rdispls, MPI.BYTE])
        return self._run(op, opts, "Alltoallv", args, output_tensors, [targs.scatter_into(recv, outs)])

    def barrier(self, opts: Any = None) -> Work:
        """barrier: returns once every rank of the group has called it."""
        return self._run("barrier", opts, "Barrier", (), [])

    def monitored_barrier(self, *args: Any, **kwargs: Any) -> Any:
        """monitored_barrier: torch implements it on its gloo backend only (dist.monitored_barrier
        refuses every other backend); raises NotImplementedError naming what to use instead."""
        raise fail("monitored_barrier", "torch implements monitored_barrier on its gloo backend only; call "
                                        "barrier(), which raises a Timed out error once the group's timeout passes",
                   NotImplementedError)

    # -- point to point -------------------------------------------------------
    def _p2p_args(self, op: str, tensors: list[torch.Tensor], peer: int, tag: int, arg: str) -> Staged:
        t = targs.one(tensors, op, "tensor")
        self._root(op, peer, arg)
        tag_ub = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB)
        if not 0 <= tag <= tag_ub:
            raise fail(op, f"tag {tag} is outside MPI's range 0..{tag_ub}; pass a tag in that range")
        return Staged(t)

    def send(self, tensors: list[torch.Tensor], dstRank: int, tag: int) -> Work:  # noqa: N803 - torch's name
        """send (isend): the tensor to group rank `dstRank`, matched by `tag`."""
        op = "send"
        buf = self._p2p_args(op, tensors, dstRank, tag, "dst")
        req = self._p2p_comm(op).Isend(byte_view(buf.flat), dest=dstRank, tag=tag)
        # The request holds the (possibly staged) bytes until the send completes.
        return Work(op, tensors, [req], (), self._completer)

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int) -> Work:  # noqa: N803 - torch's name
        """recv (irecv): the tensor from group rank `srcRank`, matched by `tag`."""
        op = "recv"
        buf = self._p2p_args(op, tensors, srcRank, tag, "src")
        status = MPI.Status()
        req = self._p2p_comm(op).Irecv(byte_view(buf.flat), source=srcRank, tag=tag)
        return Work(op, tensors, [req], [buf.copy_back], self._completer, status)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Work:
        """recv from any rank of the group (``src=None``); the work's source_rank() tells which."""
        op = "recv"
        buf = self._p2p_args(op, tensors, 0, tag, "src")
        status = MPI.Status()
        req = self._p2p_comm(op).Irecv(byte_view(buf.flat), source=MPI.ANY_SOURCE, tag=tag)
        return Work(op, tensors, [req], [buf.copy_back], self._completer, status)

    def _p2p_comm(self, op: str) -> MPI.Comm:
        if self._p2p is None:
            raise fail(op, "the process group was shut down", RuntimeError)
        return self._p2p

    # -- what the backend does not do ----------------------------------------
    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> Work:
        """all_gather_coalesced (deprecated in torch): output_tensor_lists[r][i] of every rank gets
        rank r's input_tensor_list[i]; one Allgather of the inputs laid end to end."""
        op = "all_gather_coalesced"
        ins = targs.check_list(inputs, op, "input_tensor_list")
        if not isinstance(output_lists, (list, tuple)) or len(output_lists) != self._size:
            got = len(output_lists) if isinstance(output_lists, (list, tuple)) else type(output_lists).__name__
            raise fail(op, f"output_tensor_lists has {got} lists; it needs one per rank of the group ({self._size})")
        if not ins:
            return Work(op, output_lists)
        targs.same_dtype(op, ins[0], ins, "input_tensor_list")
        outs: list[torch.Tensor] = []
        for r, lst in enumerate(output_lists):
            name = f"output_tensor_lists[{r}]"
            got = targs.check_list(lst, op, name)
            if len(got) != len(ins):
                raise fail(op, f"{name} has {len(got)} tensors; it needs one per tensor of input_tensor_list "
                               f"({len(ins)})")
            targs.same_dtype(op, ins[0], got, name)
            for i, (o, t) in enumerate(zip(got, ins)):
                if o.numel() != t.numel():
                    raise fail(op, f"{name}[{i}] has {o.numel()} elements but input_tensor_list[{i}] has "
                                   f"{t.numel()}; they must have as many")
            outs.extend(got)
        send = targs.concat(ins, ins[0].dtype)
        recv = torch.empty(self._size * send.numel(), dtype=send.dtype)
        return self._run(op, opts, "Allgather", (byte_view(send), byte_view(recv)), output_lists,
                         [targs.scatter_into(recv, outs)])

    # -- lifetime -------------------------------------------------------------
    def shutdown(self) -> None:
        """Release the communicators (torch calls this in destroy_process_group). Local."""
        if self._p2p is None:
            return
        p2p, self._p2p = self._p2p, None
        if not self._completer.close():
            # A collective still runs in the completer thread: freeing its
            # communicator under it would be worse than keeping it.
            warnings.warn("pymcoll backend: an operation was still running at shutdown; its "
                          "communicator is left allocated", RuntimeWarning, stacklevel=2)
            return
        if not MPI.Is_finalized():  # never after MPI_Finalize (interpreter exit)
            p2p.Free()
            self._comm.Free()

    def abort(self) -> None:
        """Same as shutdown: pymcoll collectives already end at their deadline."""
        self.shutdown()


def create(opts: Any, pg_options: Any = None) -> ProcessGroupPymcoll:
    """The creator torch calls for a "pymcoll" group (``extended_api=True``).

    The default group duplicates MPI.COMM_WORLD; a subgroup builds a
    communicator over exactly its global ranks (MPI_Comm_create_group is
    collective over the members only, and torch calls this on members only).
    """
    if pg_options is not None:
        raise ValueError("pymcoll backend: pg_options is not supported; tune with PYMCOLL_* variables")
    world = MPI.COMM_WORLD
    ranks = list(opts.global_ranks_in_group)
    if not ranks:  # the default group
        if opts.group_size != world.size:
            raise ValueError(f"pymcoll backend: torch's world size is {opts.group_size} (WORLD_SIZE) but MPI "
                             f"runs {world.size} ranks; launch with mpiexec -n {opts.group_size}, or unset "
                             f"WORLD_SIZE so that pymcoll.torch sets it from MPI")
        if opts.group_rank != world.rank:
            raise ValueError(f"pymcoll backend: torch's rank is {opts.group_rank} (RANK) but this is MPI rank "
                             f"{world.rank}; unset RANK so that pymcoll.torch sets it from MPI")
        mpi = world.Dup()
    else:
        if max(ranks) >= world.size or ranks[opts.group_rank] != world.rank:
            raise ValueError(f"pymcoll backend: the group's global ranks {ranks} are not MPI ranks (this is "
                             f"MPI rank {world.rank} of {world.size}); torch's ranks must be MPI's "
                             f"(unset RANK and WORLD_SIZE so that pymcoll.torch sets them)")
        group = world.Get_group().Incl(ranks)
        try:
            mpi = world.Create_group(group, _GROUP_TAG)
        finally:
            group.Free()
    kwargs: dict[str, Any] = {}
    timeout = getattr(opts, "timeout", None)
    if os.environ.get("PYMCOLL_TIMEOUT", "") == "" and isinstance(timeout, timedelta) and timeout.total_seconds() > 0:
        kwargs["timeout"] = timeout.total_seconds()  # torch's group timeout is the collectives' deadline
    return ProcessGroupPymcoll(pymcoll.Comm(mpi, **kwargs), str(getattr(opts, "group_id", "")))
