"""Processes started by perf/bench_ftar.py (not run by hand), on a pymcoll.ftar LocalCluster.

    bw      one worker of the bandwidth run: an FTAR member per configuration
            (streams, integrity) and a torch.distributed gloo process group in
            the same process, interleaved blocks per size, plus raw TCP
            transfers between the workers; rank 0 emits the "result" event
    replica one replica of a training-like loop on FTAR (stall and catch-up
            runs): begin_step, "compute", allreduce, commit, state snapshots
            for joiners; one JSON event per line on stdout

Times are time.monotonic() (CLOCK_MONOTONIC: one clock for every process on
the host), so the harness can line up the events of different replicas.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from typing import Any, Callable, Optional


def emit(ev: str, **fields: Any) -> None:
    fields["ev"] = ev
    fields.setdefault("t", time.monotonic())
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- bandwidth


class RawTcp:
    """Plain TCP connections between the workers, for the reference bandwidth.

    "uni": rank 0 sends to rank 1 over k streams (the others idle).
    "ring": every rank sends to its right neighbour and receives from its left
    one at the same time over k streams each, the traffic pattern of a ring
    allreduce without the reduction (at 2 ranks: both directions of one pair).
    Kernel default socket buffers (autotuned), TCP_NODELAY; Python threads,
    one per stream and direction (sendall/recv_into release the GIL).
    """

    def __init__(self, store: Any, rank: int, n: int, uni_k: int, ring_k: int, nbytes: int) -> None:
        import numpy as np

        self.rank, self.n, self.nbytes = rank, n, nbytes
        self.sendbuf = np.ones(nbytes, np.uint8)
        self.recvbuf = np.zeros(nbytes, np.uint8)
        self.recvbuf.fill(0)  # resident: no first-touch page faults inside a measured transfer
        lst = socket.create_server(("127.0.0.1", 0), backlog=64)
        store.set(f"tcp-{rank}", f"127.0.0.1:{lst.getsockname()[1]}")
        left, right = (rank - 1) % n, (rank + 1) % n
        expected = ring_k + (uni_k if rank == 1 else 0)
        self.inbound: dict[tuple[str, int], socket.socket] = {}
        self.outbound: dict[tuple[str, int], socket.socket] = {}
        errors: list[BaseException] = []

        def accept() -> None:
            try:
                lst.settimeout(60)
                for _ in range(expected):
                    c, _ = lst.accept()
                    c.settimeout(None)
                    tag = _recv_exact(c, 2)
                    self.inbound[(chr(tag[0]), tag[1])] = c
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        th = threading.Thread(target=accept, daemon=True)
        th.start()

        def connect(peer: int, kind: str, k: int) -> None:
            host, port = store.get(f"tcp-{peer}").decode().rsplit(":", 1)
            for i in range(k):
                s = socket.create_connection((host, int(port)), timeout=60)
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.sendall(bytes([ord(kind), i]))
                self.outbound[(kind, i)] = s

        connect(right, "r", ring_k)
        if rank == 0:
            connect(1, "u", uni_k)
        th.join(90)
        lst.close()
        if errors or len(self.inbound) != expected:
            raise RuntimeError(f"raw TCP set-up failed on rank {rank}: {errors or 'missing connections'}")
        del left

    def transfer(self, pattern: str, k: int) -> None:
        """Moves nbytes in the pattern (each active link: nbytes split over k streams)."""
        kind = "u" if pattern == "uni" else "r"
        send = pattern == "ring" or self.rank == 0
        recv = pattern == "ring" or self.rank == 1
        part = self.nbytes // k
        jobs: list[Callable[[], None]] = []
        sv, rv = memoryview(self.sendbuf), memoryview(self.recvbuf)
        for i in range(k):
            lo, hi = i * part, (self.nbytes if i == k - 1 else (i + 1) * part)
            if send:
                jobs.append(lambda s=self.outbound[(kind, i)], v=sv[lo:hi]: s.sendall(v))
            if recv:
                jobs.append(lambda s=self.inbound[(kind, i)], v=rv[lo:hi]: _recv_into(s, v))
        threads = [threading.Thread(target=j, daemon=True) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def close(self) -> None:
        for s in list(self.inbound.values()) + list(self.outbound.values()):
            s.close()


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def _recv_into(s: socket.socket, view: memoryview) -> None:
    got, n = 0, len(view)
    while got < n:
        r = s.recv_into(view[got:], min(n - got, 4 << 20))
        if r == 0:
            raise ConnectionError("peer closed during the raw TCP transfer")
        got += r


def bw_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="ftar_bench_worker.py bw")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--members", type=int, required=True)
    p.add_argument("--store", required=True, help="file of the torch FileStore")
    p.add_argument("--coord", action="append", default=[], help="NAME=STREAMS:INTEGRITY:HOST:PORT (repeated)")
    p.add_argument("--sizes", required=True, help="comma-separated byte sizes")
    p.add_argument("--mac-sizes", default="", help="sizes at which the integrity member runs too")
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--target-ms", type=float, default=25.0, help="time per timed block")
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--iters", type=int, default=0, help="fixed calls per block (0: scaled)")
    p.add_argument("--chunk-bytes", type=int, default=256 * 1024)
    p.add_argument("--timeout", type=float, default=120.0, help="FTAR and gloo operation deadline, s")
    p.add_argument("--tcp-bytes", type=int, default=64 << 20)
    p.add_argument("--tcp-uni", default="1,4", help="stream counts of the one-way raw TCP transfers")
    p.add_argument("--tcp-ring", default="1,2", help="stream counts of the ring raw TCP transfers")
    a = p.parse_args(argv)

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist

    from pymcoll.ftar import Member

    torch.set_num_threads(1)
    rank, n = a.rank, a.members
    store = dist.FileStore(a.store, n)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n, timeout=timedelta(seconds=a.timeout))
    say = progress if rank == 0 else (lambda text: None)

    configs: list[tuple[str, int, bool, str]] = []
    for spec in a.coord:
        name, rest = spec.split("=", 1)
        streams, integ, addr = rest.split(":", 2)
        configs.append((name, int(streams), integ == "1", addr))
    members = {name: Member(addr, f"bw-{rank}", streams=streams, integrity=integ, chunk_bytes=a.chunk_bytes,
                            timeout=a.timeout) for name, streams, integ, addr in configs}
    steps = {name: 0 for name in members}
    mac_sizes = {int(s) for s in a.mac_sizes.split(",") if s}
    uni_ks = [int(k) for k in a.tcp_uni.split(",") if k]
    ring_ks = [int(k) for k in a.tcp_ring.split(",") if k]
    raw = RawTcp(store, rank, n, max(uni_ks, default=1), max(ring_ks, default=1), a.tcp_bytes)
    tcp_rounds: list[dict[str, Any]] = []

    def max_over_ranks(values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def tcp_round() -> None:
        out: dict[str, Any] = {}
        local = []
        names = [("uni", k) for k in uni_ks] + [("ring", k) for k in ring_ks]
        for pattern, k in names:
            dist.barrier()
            t0 = time.perf_counter()
            raw.transfer(pattern, k)
            local.append(time.perf_counter() - t0)
        for (pattern, k), dt in zip(names, max_over_ranks(local), strict=True):
            out[f"{pattern}{k}"] = a.tcp_bytes / dt / 1e9
        tcp_rounds.append(out)

    def ftar_block(name: str, x: Any, out: Any, xa: Any, iters: int, calls: list[float]) -> tuple[float, float]:
        """Seconds per call (calls only) and the step's begin_step + commit seconds."""
        m = members[name]
        t0 = time.perf_counter()
        info = m.begin_step(steps[name])
        ctl = time.perf_counter() - t0
        if not info.ok:
            raise RuntimeError(f"{name}: begin_step failed: {info.status}")
        total = 0.0
        for i in range(iters):
            xa[::1024] = i + 1  # one value per 4 KiB page, new every call (not timed)
            t0 = time.perf_counter()
            res = m.allreduce(x, out=out)
            dt = time.perf_counter() - t0
            total += dt
            calls.append(dt)
            if not res.ok:
                raise RuntimeError(f"{name}: allreduce failed: {res.status}")
        t0 = time.perf_counter()
        if not m.commit(steps[name]):
            raise RuntimeError(f"{name}: no commit: {m.last_status}")
        ctl += time.perf_counter() - t0
        steps[name] += 1
        return total / iters, ctl

    def gloo_block(g: Any, ga: Any, iters: int, calls: list[float]) -> tuple[float, float]:
        total = 0.0
        for i in range(iters):
            ga[::1024] = i + 1
            t0 = time.perf_counter()
            dist.all_reduce(g)
            dt = time.perf_counter() - t0
            total += dt
            calls.append(dt)
        return total / iters, 0.0

    records: list[dict[str, Any]] = []
    sizes = [int(s) for s in a.sizes.split(",")]
    tcp_round()  # warm-up: fresh sockets grow their windows and buffers in the first transfer
    tcp_rounds.clear()
    tcp_round()
    for size in sizes:
        count = size // 4
        impls = [c[0] for c in configs if not c[2] or size in mac_sizes] + ["gloo"]
        x = torch.zeros(count, dtype=torch.float32)
        out = torch.empty_like(x)
        g = torch.zeros(count, dtype=torch.float32)
        xa, ga = x.numpy(), g.numpy()

        def run(impl: str, iters: int, calls: list[float], x: Any = x, out: Any = out, xa: Any = xa, g: Any = g,
                ga: Any = ga) -> tuple[float, float]:
            dist.barrier()
            if impl == "gloo":
                return gloo_block(g, ga, iters, calls)
            return ftar_block(impl, x, out, xa, iters, calls)

        # Probe (2 calls each, slowest rank), then calls per block for each implementation.
        probe = max_over_ranks([min(run(impl, 1, [])[0] for _ in range(2)) for impl in impls])
        iters = {impl: a.iters or max(1, min(a.max_iters, int(a.target_ms / 1e3 / max(pt, 1e-7))))
                 for impl, pt in zip(impls, probe, strict=True)}
        warm = {impl: max(1, iters[impl] // 4) for impl in impls}
        for impl in impls:
            run(impl, warm[impl], [])
        per: dict[str, list[float]] = {impl: [] for impl in impls}
        ctl: dict[str, list[float]] = {impl: [] for impl in impls}
        calls: dict[str, list[float]] = {impl: [] for impl in impls}
        for b in range(a.blocks):
            order = impls[b % len(impls):] + impls[:b % len(impls)]  # rotate: no implementation always first
            for impl in order:
                t, c = run(impl, iters[impl], calls[impl])
                per[impl].append(t)
                ctl[impl].append(c)
        # A block's time per call is the slowest rank's.
        flat = max_over_ranks([t for impl in impls for t in per[impl]])
        flat_ctl = max_over_ranks([c for impl in impls for c in ctl[impl]])
        call_med = max_over_ranks([statistics.median(calls[impl]) for impl in impls])
        # Verify once per implementation: integer-valued inputs, exact sums.
        base = (np.arange(count, dtype=np.int64) % 13 - 6).astype(np.float32)
        want = base * n + float(n * (n - 1) // 2)
        wrong_local = []
        for impl in impls:
            dist.barrier()
            if impl == "gloo":
                ga[:] = base + rank
                dist.all_reduce(g)
                wrong_local.append(float(np.count_nonzero(ga != want)))
            else:
                xa[:] = base + rank
                out.fill_(float("nan"))
                m = members[impl]
                info = m.begin_step(steps[impl])
                res = m.allreduce(x, out=out)
                ok = info.ok and res.ok and m.commit(steps[impl]) and res.n_contrib == n
                steps[impl] += 1
                wrong_local.append(float(np.count_nonzero(out.numpy() != want)) if ok else float(count))
        t = torch.tensor(wrong_local, dtype=torch.float64)
        dist.all_reduce(t)
        wrong = t.tolist()
        k = 0
        line = []
        for j, impl in enumerate(impls):
            blk = flat[k:k + a.blocks]
            cblk = flat_ctl[k:k + a.blocks]
            k += a.blocks
            rec = {"impl": impl, "members": n, "size": size, "count": count, "type": "float", "redop": "sum",
                   "iters": iters[impl], "warmup": warm[impl], "blocks": a.blocks,
                   "block_us": [v * 1e6 for v in blk], "median_us": statistics.median(blk) * 1e6,
                   "min_us": min(blk) * 1e6, "max_us": max(blk) * 1e6, "call_median_us": call_med[j] * 1e6,
                   "wrong": int(wrong[j])}
            if impl != "gloo":
                rec["step_ctl_us"] = statistics.median(cblk) * 1e6
            records.append(rec)
            line.append(f"{impl} {rec['median_us']:.0f}us x{iters[impl]}")
        say(f"#   n={n} {size:>10} B  " + "  ".join(line))
        tcp_round()
        del run, x, out, g, xa, ga  # free this size's buffers before the next size's
    raw.close()
    for m in members.values():
        m.close()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        emit("result", data={"members": n, "records": records, "tcp_rounds": tcp_rounds,
                             "tcp_bytes": a.tcp_bytes, "configs": [c[:3] for c in configs]})


# ---------------------------------------------------------------- replica


def cpu_work_matrix() -> Any:
    """The 'compute' of the cpu mode: products of this matrix with itself (single-threaded BLAS)."""
    import numpy as np

    return np.random.default_rng(0).standard_normal((160, 160)).astype(np.float32)


def cpu_iters_for(ms: float) -> int:
    """How many products take `ms` here, run alone (call with the machine otherwise idle)."""
    m = cpu_work_matrix()
    for _ in range(20):
        m @ m
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        m @ m
        n += 1
    return max(1, round(ms / 1e3 / ((time.perf_counter() - t0) / n)))


def replica_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="ftar_bench_worker.py replica")
    p.add_argument("--coordinator", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--number", type=int, default=0)
    p.add_argument("--grad-bytes", type=int, default=4 << 20, help="bytes allreduced per step (float32)")
    p.add_argument("--state-bytes", type=int, default=0, help="state snapshot size (>= grad-bytes)")
    p.add_argument("--compute-ms", type=float, default=10.0, help="'compute' per step")
    p.add_argument("--compute", choices=("sleep", "cpu"), default="sleep",
                   help="sleep (the host idles, as with an accelerator) or fixed numpy work on the CPU")
    p.add_argument("--compute-iters", type=int, default=0,
                   help="cpu: matrix products per step (the harness sizes them to --compute-ms run alone)")
    p.add_argument("--steps", type=int, default=1 << 40)
    p.add_argument("--stop-file", default="", help="a file holding the step at which to stop")
    p.add_argument("--start-file", default="", help="wait for this file before the first step")
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--chunk-bytes", type=int, default=256 * 1024)
    p.add_argument("--calibrate", action="store_true", help="time publish_state and a plain copy before the steps")
    p.add_argument("--publish", choices=("every", "once"), default="every",
                   help="publish the state at every step that asks (serve_state), as pymcoll.ftar.training "
                        "does, or once per healing episode")
    a = p.parse_args(argv)

    import numpy as np

    from pymcoll.ftar import Member

    dim = a.grad_bytes // 4
    w = np.zeros(max(dim, a.state_bytes // 4), np.float32)
    w.fill(0.0)  # resident, like a loaded model: no first-touch page faults inside the measured steps
    member = Member(a.coordinator, a.id, streams=a.streams, chunk_bytes=a.chunk_bytes, timeout=a.timeout,
                    log=True)
    grad = np.empty(dim, np.float32)
    zeros = np.zeros(dim, np.float32)
    out = np.empty(dim, np.float32)
    cpu_work = cpu_work_matrix()

    def compute(step: int) -> None:
        if a.compute == "sleep":
            time.sleep(a.compute_ms / 1e3)
        else:
            for _ in range(a.compute_iters):  # fixed work: a starved replica takes longer
                cpu_work @ cpu_work
        grad.fill(float(a.number % 7 + 1))
        grad[0] = float(step % 1000)

    state = {"up_to_date": True, "fetch": None, "fetched": None, "error": ""}
    pending: dict[int, np.ndarray] = {}

    def fetch(min_step: int) -> None:
        t0 = time.monotonic()
        try:
            state["fetched"] = member.fetch_state(min_step)
        except Exception as exc:  # noqa: BLE001 - reported, retried at the next step
            state["error"] = str(exc)
        emit("fetched", ok=state["fetched"] is not None, t0=t0, error=state["error"])

    def catch_up() -> None:
        nonlocal w
        th = state["fetch"]
        if th is None or th.is_alive():
            return
        state["fetch"] = None
        if state["fetched"] is None:
            return
        t0 = time.monotonic()
        t, data = state["fetched"]
        state["fetched"] = None
        snap = np.frombuffer(data, np.float32)
        if snap.size == w.size:
            np.copyto(w, snap)  # into the pages this replica already has: no fresh 64 MiB of page faults
        else:
            w = snap.copy()
        last = t
        while last + 1 in pending:
            w[:dim] += pending[last + 1]
            last += 1
        pending.clear()
        state["up_to_date"] = True
        member.committed_step = last
        emit("healed", from_step=t, step=last, load_ms=(time.monotonic() - t0) * 1e3)

    def stop_step() -> Optional[int]:
        if not a.stop_file or not os.path.exists(a.stop_file):
            return None
        try:
            return int(open(a.stop_file, encoding="utf-8").read().strip() or "-1")
        except (OSError, ValueError):
            return None

    if a.calibrate and w.nbytes >= a.state_bytes > 0:
        # What one snapshot costs here, before any step: publish_state (the member's own copy) and, for
        # comparison, a copy of the same bytes into a buffer that is already resident.
        spare = np.empty_like(w)
        spare.fill(0.0)
        pub, cpy = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            member.publish_state(-1, w)
            pub.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            np.copyto(spare, w)
            cpy.append((time.perf_counter() - t0) * 1e3)
        del spare
        emit("calibration", publish_ms=pub, resident_copy_ms=cpy, bytes=w.nbytes)
    emit("ready", pid=os.getpid())
    end = time.monotonic() + 120
    while a.start_file and not os.path.exists(a.start_file) and time.monotonic() < end:
        time.sleep(0.005)
    step = 0
    grad_step = -1  # the step whose gradients `grad` holds: a retry reduces them again
    published_for: Optional[int] = None  # publish "once": the step of this healing episode's snapshot
    while step < a.steps:
        stop = stop_step()
        if stop is not None and step >= stop:
            break
        catch_up()
        t_bs = time.monotonic()
        info = member.begin_step(step)
        t_bs_end = time.monotonic()
        if not info.ok:
            emit("quorum_failed", step=step, status=info.status.value, t_bs=t_bs, t=t_bs_end)
            time.sleep(0.02)
            continue
        step = info.step
        if state["fetch"] is None:
            state["up_to_date"] = not info.healing
        pub_ms = 0.0
        if info.n_healing == 0:
            published_for = None
        if info.serve_state and state["up_to_date"] and (a.publish == "every" or published_for is None):
            published_for = step
            t0 = time.monotonic()
            member.publish_state(step - 1, w)
            pub_ms = (time.monotonic() - t0) * 1e3
        if not state["up_to_date"] and state["fetch"] is None:
            th = threading.Thread(target=fetch, args=(step - 1,), daemon=True)
            state["fetch"] = th
            th.start()
        contribute = state["up_to_date"] and not info.healing
        t_c = time.monotonic()
        if contribute and grad_step != step:
            compute(step)
            grad_step = step
        t_ar = time.monotonic()
        emit("ar_start", step=step, epoch=info.epoch, t=t_ar)
        res = member.allreduce(grad if contribute else zeros, out=out, contribute=contribute)
        t_ar_end = time.monotonic()
        base = {"step": step, "epoch": info.epoch, "n": info.n_members, "n_healing": info.n_healing,
                "healing": info.healing, "serve": info.serve_state, "contribute": contribute,
                "t_bs": t_bs, "t_bs_end": t_bs_end, "t_compute": t_c, "t_ar": t_ar, "t_ar_end": t_ar_end,
                "pub_ms": pub_ms}
        if not res.ok:
            emit("attempt", status=res.status.value, phase="allreduce", t=t_ar_end, **base)
            continue
        ok = member.commit(step)
        t_end = time.monotonic()
        if not ok:
            emit("attempt", status=member.last_status.value, phase="commit", t=t_end, **base)
            continue
        update = out / np.float32(max(res.n_contrib, 1))
        if state["up_to_date"] and not info.healing:
            w[:dim] += update
        else:
            pending[step] = update
        emit("step", status="OK", n_contrib=res.n_contrib, t=t_end, **base)
        step += 1
    import hashlib

    digest = hashlib.sha256(w.tobytes()).hexdigest()[:16] if state["up_to_date"] else None
    emit("done", step=step, hash=digest)
    member.close()


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("bw", "replica"):
        raise SystemExit(__doc__)
    mode, argv = sys.argv[1], sys.argv[2:]
    {"bw": bw_main, "replica": replica_main}[mode](argv)


if __name__ == "__main__":
    main()
