"""The prioritized, overlapped exchange: the schedule's order, the progress thread, the pipeline
(concurrency, errors), CPU plans, and across ranks bit-identical training with and without the
progress thread."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CI

torch = pytest.importorskip("torch")

from pymcoll.algorithms.balance.overlap import (OverlappedStep, ProgressThread,  # noqa: E402
                                                plan_cpus, schedule)


@settings(max_examples=200, deadline=None)
@given(chunks=st.integers(0, 40), lookahead=st.integers(0, 6))
def test_schedule_fetches_in_order_of_need(chunks: int, lookahead: int) -> None:
    order = schedule(chunks, lookahead)
    assert sorted(order) == sorted([("forward", k) for k in range(chunks)] + [("backward", k) for k in range(chunks)])
    forwards = [k for op, k in order if op == "forward"]
    backwards = [k for op, k in order if op == "backward"]
    assert forwards == list(range(chunks)) and backwards == list(range(chunks))
    for at, (op, k) in enumerate(order):
        done = sum(1 for o, _ in order[:at] if o == "backward")  # chunks computed before this point
        if op == "forward":
            # never more than `lookahead` chunks ahead of compute, and never later than needed
            assert k <= done + lookahead
            assert k >= min(done + lookahead, chunks - 1) or at < lookahead + 1
        else:
            assert ("forward", k) in order[:at]


def test_schedule_examples() -> None:
    F, B = "forward", "backward"
    assert schedule(4, 1) == [(F, 0), (F, 1), (B, 0), (F, 2), (B, 1), (F, 3), (B, 2), (B, 3)]
    assert schedule(3, 0) == [(F, 0), (B, 0), (F, 1), (B, 1), (F, 2), (B, 2)]
    assert schedule(2, 5) == [(F, 0), (F, 1), (B, 0), (B, 1)]
    assert schedule(0, 1) == []
    with pytest.raises(ValueError, match="lookahead"):
        schedule(3, -1)


def test_progress_thread_runs_calls_in_order_and_hands_back_errors() -> None:
    seen: list[int] = []
    with ProgressThread() as t:
        futs = [t.submit(seen.append, k) for k in range(50)]
        bad = t.submit(lambda: 1 / 0)
        after = t.submit(lambda: threading.current_thread().name)
        for f in futs:
            f.result(timeout=10)
        with pytest.raises(ZeroDivisionError):
            bad.result(timeout=10)
        assert after.result(timeout=10) == "pymcoll-progress"  # the thread survives an error
        assert t.native_id not in (None, threading.get_native_id())
    assert seen == list(range(50))
    with pytest.raises(RuntimeError, match="closed"):
        t.submit(print)
    t.close()  # twice is fine


def test_progress_thread_pins_and_rejects_bad_cpus() -> None:
    import os
    cpu = sorted(os.sched_getaffinity(0))[0]
    with ProgressThread([cpu]) as t:
        assert t.submit(os.sched_getaffinity, 0).result(timeout=10) == {cpu}
    assert os.sched_getaffinity(0) != {cpu} or len(os.sched_getaffinity(0)) == 1  # the caller is not pinned
    with pytest.raises(ValueError, match="cpus="):
        ProgressThread([100_000])


def test_plan_cpus_separates_progress_threads_when_there_are_cpus() -> None:
    cpus = list(range(16))
    plans = [plan_cpus(r, 4, 3, cpus) for r in range(4)]
    used = [c for comp, prog, sep in plans for c in comp + prog]
    assert all(sep for _, _, sep in plans) and sorted(used) == cpus  # every CPU once
    assert all(len(comp) == 3 and len(prog) == 1 and not set(comp) & set(prog) for comp, prog, _ in plans)
    # 2 ranks on 2 CPUs: one each, the progress thread stays on its rank's CPU
    assert [plan_cpus(r, 2, 1, [0, 1]) for r in range(2)] == [([0], [0], False), ([1], [1], False)]
    # more ranks than CPUs: shared out round-robin
    assert [plan_cpus(r, 3, 1, [0, 1])[0] for r in range(3)] == [[0], [1], [0]]
    with pytest.raises(ValueError, match="local_rank"):
        plan_cpus(2, 2, 1, [0, 1])
    with pytest.raises(ValueError, match="threads"):
        plan_cpus(0, 1, 0, [0])


class FakeExchange:
    """embed(): rows = chunk * weight, recorded; its backward is recorded too."""

    def __init__(self) -> None:
        self.weight = torch.ones(3, requires_grad=True)
        self.log: list[tuple[str, int]] = []
        self.fetching = {k: threading.Event() for k in range(8)}

    def embed(self, chunk: int) -> torch.Tensor:
        self.log.append(("forward", chunk))
        self.fetching[chunk].set()
        return Tap.apply(self.weight * float(chunk + 1), chunk, self.log)


class Tap(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, chunk, log):  # type: ignore[override]
        ctx.chunk, ctx.log = chunk, log
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        ctx.log.append(("backward", ctx.chunk))
        return grad, None, None


@pytest.mark.parametrize("threaded", [False, True])
def test_pipeline_gradients_and_order(threaded: bool) -> None:
    fake = FakeExchange()
    got: list[int] = []

    def consume(k: int, chunk: int, rows: torch.Tensor) -> None:
        assert rows.is_leaf and rows.requires_grad
        got.append(chunk)
        (rows * (k + 1)).sum().backward()

    with ProgressThread() as t:
        times = OverlappedStep(fake.embed, t if threaded else None, lookahead=2).run(list(range(5)), consume)
    assert got == list(range(5))
    assert list(times.order) == schedule(5, 2) == fake.log
    # d/dw sum_k (k+1) * (k+1) * w
    assert torch.equal(fake.weight.grad, torch.full((3,), float(sum((k + 1) ** 2 for k in range(5)))))
    assert times.compute >= 0 and times.comm > 0 and (threaded or times.stall == 0)


def test_pipeline_overlaps_compute_with_the_next_fetch() -> None:
    """While chunk 0 is computed the progress thread fetches chunk 1 (an event, no timing)."""
    fake = FakeExchange()

    def consume(k: int, chunk: int, rows: torch.Tensor) -> None:
        if k == 0:
            assert fake.fetching[1].wait(timeout=30), "chunk 1 was not fetched while chunk 0 was computed"
        rows.sum().backward()

    with ProgressThread() as t:
        OverlappedStep(fake.embed, t, lookahead=1).run([0, 1, 2], consume)


def test_pipeline_errors_reach_the_caller_and_leave_nothing_running() -> None:
    fake = FakeExchange()

    def failing_embed(chunk: int) -> torch.Tensor:
        if chunk == 2:
            raise RuntimeError("exchange failed on chunk 2")
        return fake.embed(chunk)

    with ProgressThread() as t:
        step = OverlappedStep(failing_embed, t, lookahead=1)
        with pytest.raises(RuntimeError, match="chunk 2"):
            step.run([0, 1, 2, 3], lambda k, c, rows: rows.sum().backward())

        def bad_consume(k: int, chunk: int, rows: torch.Tensor) -> None:
            raise ValueError("model failed")

        with pytest.raises(ValueError, match="model failed"):
            OverlappedStep(fake.embed, t).run([0, 1, 2], bad_consume)
        assert t.submit(lambda: 7).result(timeout=10) == 7  # still serving
    with pytest.raises(ValueError, match="lookahead"):
        OverlappedStep(fake.embed, None, lookahead=-1)


@pytest.mark.parametrize("n,chunks,lookahead", [
    (1, 3, 1), pytest.param(2, 4, 1, marks=pytest.mark.skipif(CI, reason="runs outside CI")), (3, 3, 0), (4, 4, 2)])
def test_training_is_identical_with_and_without_the_progress_thread(mpirun, n: int, chunks: int,
                                                                   lookahead: int) -> None:
    proc = mpirun(n, "seqrec_overlap", str(chunks), str(lookahead), timeout=240)
    assert f"overlap identical to inline over 4 steps at {n} ranks" in proc.stdout
