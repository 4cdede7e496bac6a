"""Allreduce correctness: every case (dtype, op, count) is one step; inputs
are integer-valued, so the result must equal the reduction exactly, and
every member reports a digest of its result to compare bits across members.
Events: case (per case), done."""

from __future__ import annotations

import numpy as np

from pymcoll.ftar import Member

from .common import digest, emit, parser, ready_and_wait

NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32,
         "int64": np.int64}


def member_input(number: int, case: int, count: int, dtype: str) -> np.ndarray:
    """Small integers (exact in every dtype, also summed over 8 members in float16)."""
    v = np.random.default_rng([number, case]).integers(-8, 9, count)
    return v.astype(np.float32 if dtype == "bfloat16" else NUMPY[dtype])


def expected(n: int, case: int, count: int, dtype: str, op: str) -> np.ndarray:
    parts = [member_input(k, case, count, dtype).astype(np.float64) for k in range(n)]
    fold = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    acc = parts[0]
    for p in parts[1:]:
        acc = fold(acc, p)
    return acc


def as_buffer(a: np.ndarray, dtype: str):
    if dtype != "bfloat16":
        return a
    import torch

    return torch.from_numpy(a).to(torch.bfloat16)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--number", type=int, required=True)
    p.add_argument("--members", type=int, required=True)
    p.add_argument("--cases", required=True, help="dtype:op:count,...")
    a = p.parse_args()
    cases = [c.split(":") for c in a.cases.split(",")]
    with Member(a.coordinator, a.id, timeout=a.timeout, streams=a.streams, integrity=a.integrity,
                chunk_bytes=a.chunk_bytes) as m:
        ready_and_wait(a.start_file)
        for i, (dtype, op, count) in enumerate(cases):
            count = int(count)
            info = m.begin_step(i)
            assert info.ok and info.n_members == a.members, info
            x = as_buffer(member_input(a.number, i, count, dtype), dtype)
            keep = x.clone() if dtype == "bfloat16" else x.copy()
            res = m.allreduce(x, op=op)
            got = res.result.float().numpy() if dtype == "bfloat16" else res.result
            want = expected(a.members, i, count, dtype, op)
            exact = bool(np.array_equal(np.asarray(got, np.float64), want))
            untouched = bool((x == keep).all()) if count else True
            raw = got.view(np.uint8) if dtype != "bfloat16" else res.result.view(dtype=__import__("torch").int16).numpy()
            committed = m.commit(i, res.ok and exact)
            emit("case", case=i, dtype=dtype, op=op, count=count, status=res.status.value, n_contrib=res.n_contrib,
                 exact=exact, input_untouched=untouched, digest=digest(raw), committed=committed)
    emit("done")


if __name__ == "__main__":
    main()
