"""pymcoll.testing.check: the whole battery against one implementation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from mpi4py import MPI

from .case import Case
from .mpi_defects import wrapped_defect
from .execute import BarrierProbe, bitwise_comparable, build, call, clone, compare_memory, judge
from .oracle import expected
from .runner import Watchdog, run_property
from .strategies import cases, collective_names, coverage_cases

LayoutFn = Callable[[Any, MPI.Comm], tuple[Any, Optional[MPI.Comm]]]


def _split_layout(color_key: Callable[[int, int], tuple[int, int]]) -> LayoutFn:
    def make(impl: Any, comm: MPI.Comm) -> tuple[Any, Optional[MPI.Comm]]:
        color, key = color_key(comm.Get_rank(), comm.Get_size())
        if not callable(getattr(impl, "Split", None)):
            raise ValueError("layouts: the implementation has no Split(); test it with layouts=('world',)")
        sub = impl.Split(color, key)
        verdicts = comm.Split(color, key)
        if verdicts == MPI.COMM_NULL:
            return None, None
        return sub, verdicts
    return make


def virtual_nodes(k: int) -> LayoutFn:
    """Layout: the same ranks as a pymcoll.Comm with virtual nodes of k ranks
    (the implementation must be a pymcoll.Comm; its options carry over)."""
    def make(impl: Any, comm: MPI.Comm) -> tuple[Any, Optional[MPI.Comm]]:
        import pymcoll

        if not isinstance(impl, pymcoll.Comm):
            raise ValueError(f"layouts: nodes-of-{k} needs a pymcoll.Comm implementation")
        return pymcoll.Comm(impl.mpi.Dup(), node_size=k), comm.Dup()
    return make


def layout_by_name(name: str) -> LayoutFn:
    """A layout of ``LAYOUTS``, or ``nodes-of-K`` for virtual nodes of K ranks."""
    if name in LAYOUTS:
        return LAYOUTS[name]
    if name.startswith("nodes-of-") and name[len("nodes-of-"):].isdigit() and int(name[len("nodes-of-"):]) > 0:
        return virtual_nodes(int(name[len("nodes-of-"):]))
    raise ValueError(f"layouts: unknown {name!r}; expected one of {sorted(LAYOUTS)}, nodes-of-K, or a mapping")


LAYOUTS: dict[str, LayoutFn] = {
    "world": lambda impl, comm: (impl, comm.Dup()),
    "halves": _split_layout(lambda r, n: (r % 2, r)),
    "reversed": _split_layout(lambda r, n: (0, n - r)),
    "all-but-first": _split_layout(lambda r, n: (MPI.UNDEFINED if r == 0 else 0, r)),
}


@dataclass
class Failure:
    """One collective that misbehaved, with its minimal failing case."""

    collective: str
    layout: str
    case: dict[str, Any]            # Case(**case) rebuilds it
    call: str                       # a call that reproduces it on the same ranks
    message: str                    # what went wrong, rank by rank
    first_case: Optional[dict[str, Any]] = None  # the first failing case seen, before shrinking
    first_message: Optional[str] = None  # what went wrong there

    def __str__(self) -> str:
        text = f"{self.collective} [{self.layout}]: {self.message}\n    reproduce: {self.call}"
        if self.first_message is not None and self.first_message != self.message:
            # Shrinking may rerun on a communicator the first failure broke:
            # then only the first message says what went wrong.
            text += f"\n    first failure: {self.first_case}: {self.first_message}"
        return text


@dataclass
class Report:
    """Outcome of :func:`check`, identical on every rank."""

    failures: list[Failure] = field(default_factory=list)
    examples: dict[str, int] = field(default_factory=dict)
    # With compare_wrapped: examples judged by the oracle alone because the
    # wrapped MPI has a known defect there (pymcoll.testing.mpi_defects), by reason.
    not_compared: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no collective failed."""
        return not self.failures

    def __str__(self) -> str:
        ran = ", ".join(f"{k} x{v}" for k, v in self.examples.items())
        if self.ok:
            lines = [f"pymcoll.testing: all passed ({ran})"]
        else:
            lines = [f"pymcoll.testing: {len(self.failures)} failure(s) ({ran})"]
            lines += [f"  {f}" for f in self.failures]
        lines += [f"  not compared with the wrapped MPI in {n} example(s), judged by the oracle alone: {why}"
                  for why, n in self.not_compared.items()]
        return "\n".join(lines)


def run_case(impl: Any, case: Case, rank: Optional[int] = None, *,
             wrapped: Optional[MPI.Comm] = None) -> Optional[str]:
    """Run one case on this rank of `impl` and judge it: None, or what is wrong.

    Every rank of the case's communicator must call it with the same case.
    wrapped: an mpi4py communicator over the same ranks in the same order
    (a pymcoll.Comm's ``.mpi``): the same call then runs on it too, with the
    same arguments in fresh memory holding the same bytes, and this rank's
    receive memory must come out identical byte for byte (see
    :func:`pymcoll.testing.execute.compare_memory`); an exception on one side
    only is a failure too. Floating-point reductions, whose bytes depend on
    the reduction order, run on `impl` only (the oracle bounds their error).
    """
    if rank is None:
        rank = impl.Get_rank() if hasattr(impl, "Get_rank") else impl.rank
    if case.collective == "Barrier":
        call(impl, case, build(case, rank))
        return None
    bufs = build(case, rank)
    if wrapped is not None and not isinstance(wrapped, MPI.Comm):
        raise TypeError(f"wrapped: expected an mpi4py communicator, got {type(wrapped).__name__}")
    if wrapped is None or not bitwise_comparable(case) or wrapped_defect(case) is not None:
        call(impl, case, bufs)
        return judge(case, rank, bufs)
    ref = clone(bufs)
    # Both calls run whatever the first did, so every rank makes the same calls.
    failed = ref_failed = None
    try:
        call(impl, case, bufs)
    except Exception as exc:  # noqa: BLE001 - reported, with what mpi4py did
        failed = f"{type(exc).__name__}: {exc}"
    try:
        call(wrapped, case, ref)
    except Exception as exc:  # noqa: BLE001
        ref_failed = f"{type(exc).__name__}: {exc}"
    if failed is not None:
        if ref_failed is not None:
            return f"{failed} (the wrapped mpi4py communicator raised too: {ref_failed})"
        return f"{failed} (the wrapped mpi4py communicator accepted the same arguments)"
    if ref_failed is not None:
        return f"accepted arguments the wrapped mpi4py communicator rejects: {ref_failed}"
    exp = expected(case, rank) if bufs.recv is not None else None
    return judge(case, rank, bufs, exp) or compare_memory(case, bufs, ref, exp, "the wrapped mpi4py communicator")


def wrapped_comm(impl: Any) -> MPI.Comm:
    """The mpi4py communicator `impl` wraps (its ``mpi`` attribute, as on a
    pymcoll.Comm); raises ValueError naming compare_wrapped when it has none."""
    inner = getattr(impl, "mpi", None)
    if not isinstance(inner, MPI.Comm) or inner == MPI.COMM_NULL:
        raise ValueError(f"compare_wrapped: the implementation ({type(impl).__name__}) has no 'mpi' attribute "
                         f"holding the mpi4py communicator it wraps, as a pymcoll.Comm has")
    return inner


def _message(messages: list[Optional[str]]) -> str:
    """Per-rank messages, ranks with the same message grouped."""
    groups: dict[str, list[int]] = {}
    for r, m in enumerate(messages):
        if m is not None:
            groups.setdefault(m, []).append(r)
    parts = []
    for m, ranks in groups.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        parts.append(f"{who}: {m}")
    return "; ".join(parts)


def check(impl: Any, comm: MPI.Comm, collectives: Optional[Iterable[str]] = None, max_examples: int = 100,
          *, dtypes: Optional[Iterable[str]] = None, ops: Optional[Iterable[str]] = None,
          max_bytes: int = 1 << 16, thresholds: Sequence[int] = (), in_place: bool = True,
          layouts: Union[Sequence[str], Mapping[str, LayoutFn]] = ("world",),
          deadline: float = 60.0, spec_forms: bool = False, compare_wrapped: bool = False) -> Report:
    """Test `impl`'s collectives against MPI semantics; returns a :class:`Report`.

    impl: anything with mpi4py's buffer-API methods (a pymcoll.Comm, an
        mpi4py communicator, a user's object); comm: the mpi4py communicator
        over the same ranks, used only to agree on examples and verdicts.
    collectives: method names ("Allgather", "Iallgather", "Allgather_init", ...); default every
        blocking collective `impl` has.
    dtypes, ops, max_bytes, thresholds, in_place, spec_forms: see
        :func:`pymcoll.testing.strategies.cases`; with spec_forms the
        coverage cases also take every argument form in turn.
    layouts: communicator layouts to test on: names from ``LAYOUTS``
        ("world", "halves", "reversed", "all-but-first"; the last three need
        ``impl.Split``), ``nodes-of-K`` (a pymcoll.Comm over the same ranks
        with virtual nodes of K) or a mapping of names to functions
        ``(impl, comm) -> (sub_impl, sub_comm)`` returning (None, None) on
        ranks left out.
    deadline: seconds one example may take before the watchdog reports it
        and aborts the job (0: no watchdog).
    compare_wrapped: also run the examples on the mpi4py communicator the
        implementation wraps (``impl.mpi``, as on a pymcoll.Comm, and on
        each layout's communicator) with the same arguments, and require the
        same receive bytes and the same acceptance (see :func:`run_case`):
        every drawn example and every coverage case written in a form other
        than the plain one (the plain coverage cases are the oracle's alone).

    Collective over `comm`. A found bug never raises: it is in the report,
    with the minimal failing case and a call that reproduces it.
    """
    if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm: expected the mpi4py communicator the implementation runs on, got {comm!r}")
    if max_examples < 1:
        raise ValueError(f"max_examples: expected >= 1, got {max_examples}")
    names = collective_names(impl, collectives)
    if compare_wrapped:
        wrapped_comm(impl)  # raises before any collective when there is none
    table: Mapping[str, LayoutFn]
    if isinstance(layouts, Mapping):
        table = layouts
    else:
        table = {n: layout_by_name(n) for n in layouts}

    rank = comm.Get_rank()
    watchdog = Watchdog(deadline, rank)
    local: list[Failure] = []
    examples: dict[str, int] = {}
    skipped: dict[str, int] = {}
    try:
        for lname, make in table.items():
            sub, vcomm = make(impl, comm)
            if sub is not None:
                try:
                    _check_layout(sub, vcomm, lname, names, max_examples, local, examples, watchdog,
                                  dict(dtypes=dtypes, ops=ops, max_bytes=max_bytes, thresholds=thresholds,
                                       in_place=in_place, spec_forms=spec_forms), compare_wrapped, skipped)
                finally:
                    if sub is not impl and callable(getattr(sub, "Free", None)):
                        sub.Free()
                    vcomm.Free()
    finally:
        watchdog.stop()
    # Every rank reports every group's failures.
    merged: list[Failure] = []
    seen = set()
    for part in comm.allgather(local):
        for f in part:
            key = (f.collective, f.layout, repr(f.case))
            if key not in seen:
                seen.add(key)
                merged.append(f)
    totals: dict[str, int] = {}
    for part in comm.allgather(examples):
        for k, v in part.items():
            totals[k] = max(totals.get(k, 0), v)
    left_out: dict[str, int] = {}
    for part in comm.allgather(skipped):
        for k, v in part.items():
            left_out[k] = max(left_out.get(k, 0), v)
    return Report(merged, totals, left_out)


def _check_layout(impl: Any, vcomm: MPI.Comm, lname: str, names: list[str], max_examples: int,
                  out: list[Failure], examples: dict[str, int], watchdog: Watchdog,
                  options: dict[str, Any], compare_wrapped: bool = False,
                  skipped: Optional[dict[str, int]] = None) -> None:
    size, rank = vcomm.Get_size(), vcomm.Get_rank()
    wrapped = wrapped_comm(impl) if compare_wrapped else None
    probe: Optional[BarrierProbe] = None
    try:
        for name in names:
            counter = {"n": 0}
            if name in ("Barrier", "Ibarrier") and probe is None:
                probe = BarrierProbe(vcomm)

            strategy = cases(name, size, **options)
            explicit = coverage_cases(name, size, dtypes=options["dtypes"], ops=options["ops"],
                                      spec_forms=options["spec_forms"])
            # The plain coverage cases (a few elements of each dtype, plain arguments) are
            # the oracle's alone: what the wrapped communicator would add there is time.
            oracle_only = {c for c in explicit if not c.forms()}

            def body(case: Case, _probe: Optional[BarrierProbe] = probe,
                     _oracle_only: set[Case] = oracle_only) -> Optional[str]:
                counter["n"] += 1
                if case.collective == "Barrier" and _probe is not None:
                    _probe.before(case)
                    call(impl, case, build(case, rank))
                    return _probe.after()
                compared = None if case in _oracle_only else wrapped
                if compared is not None and skipped is not None:
                    why = wrapped_defect(case)
                    if why is not None:
                        skipped[why] = skipped.get(why, 0) + 1
                return run_case(impl, case, rank, wrapped=compared)

            label = f"{name} [{lname}]"
            found = run_property(strategy, body, vcomm, label=label, max_examples=max_examples,
                                 watchdog=watchdog, explicit=explicit)
            if found is not None and found.case in explicit:
                # Explicit examples are not shrunk: search again within the
                # failing dtype and op, where shrinking finds the minimal case.
                narrowed = dict(options, dtypes=[found.case.dtype],
                                ops=[found.case.op] if found.case.op else options["ops"])
                again = run_property(cases(name, size, **narrowed), body, vcomm, label=label,
                                     max_examples=max_examples, watchdog=watchdog)
                if again is not None:
                    again.first_case, again.first_messages = found.case, found.messages
                    found = again
            examples[f"{name}[{lname}]"] = counter["n"]
            if found is not None:
                case: Case = found.case
                out.append(Failure(
                    collective=name, layout=lname, case=case.kwargs(),
                    call=(f"pymcoll.testing.run_case(impl, pymcoll.testing.{case!r}"
                          f"{', wrapped=impl.mpi' if wrapped is not None else ''})  "
                          f"# on every rank of a {size}-rank communicator ({lname} layout)"),
                    message=_message(found.messages),
                    first_case=found.first_case.kwargs() if found.first_case is not None else None,
                    first_message=_message(found.first_messages) if found.first_case is not None else None,
                ))
    finally:
        if probe is not None:
            probe.free()
