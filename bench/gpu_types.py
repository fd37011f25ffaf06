"""One scheduling pass with a deep queue of typed jobs on mixed machines (issue 16).

The cluster of `bench/schedule_pass.py` (1,024 GPUs), as 128 machines of 4 NVIDIA H100 and 4
AMD MI300X: 256 policy nodes (one per pool, two sharing each machine's CPUs). Fill it, queue
10,000 more jobs of Philly-like sizes (at most 4 GPUs: a pool), a fifth each asking for no type,
`nvidia`, `amd`, `h100`, `mi300x`, then time the first pass over the queue, the pass after a
job's end, and the pass after a submit to the full cluster, per policy. Compare with
`bench/schedule_pass.py` (untyped, 128 nodes of 8). Also `one_type_full`: every GPU busy,
10,000 pending jobs all asking for `amd`, one NVIDIA GPU freed: the passes that follow find
nothing to start (the cluster remembers a full type until a release).

    .venv/bin/python bench/gpu_types.py --json
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

from gpuyard.domain.gpu_types import type_labels
from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.scheduling.policy import SchedJob, end_run, place_job

sys.path.insert(0, str(Path(__file__).resolve().parent))

from schedule_pass import Ctx, emit, medians, parse_args, time_passes

SIZES = [1] * 80 + [2] * 3 + [4] * 6
TYPES = ["", "nvidia", "amd", "h100", "mi300x"]
H100 = type_labels("nvidia", "NVIDIA H100 80GB HBM3", "9.0")
MI300X = type_labels("amd", "AMD Instinct MI300X", "gfx942")


def mixed_cluster(machines: int) -> ClusterState:
    nodes = []
    for m in range(machines):
        for labels in (H100, MI300X):
            nodes.append(NodeSpec(f"m{m}", 4, 64, 1 << 20, 81920, labels, f"m{m}"))
    return ClusterState(nodes)


def measure(name: str, pending: int, rounds: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    finish_ms, submit_ms, first_ms = [], [], []
    for _ in range(rounds):
        policy = make_policy(name)
        cluster = mixed_cluster(128)
        now = 0.0
        ids = iter(range(1, 10**9))
        ctx = Ctx(cluster, policy, now)
        while cluster.free_gpus:
            job = SchedJob(next(ids), f"u{rng.randrange(100)}", 1, now, time_limit_s=86400.0,
                           gpu_type=rng.choice(TYPES))  # fmt: skip
            if place_job(cluster, job) is None:
                continue  # that type is full: the fill goes on with another
            policy.submit(job, now)
            policy.schedule(ctx)
        now = 7200.0
        for _ in range(pending):
            job = SchedJob(next(ids), f"u{rng.randrange(100)}", rng.choice(SIZES),
                           now - rng.random() * 3600, gpu_type=rng.choice(TYPES),
                           time_limit_s=rng.choice([600.0, 3600.0, 86400.0]))  # fmt: skip
            policy.submit(job, now)
        first, finish, submit = time_passes(ctx, now, ids, gpu_type="amd")
        first_ms.append(first)
        finish_ms.append(finish)
        submit_ms.append(submit)
    return medians(name, first_ms, finish_ms, submit_ms)


def one_type_full(name: str, pending: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    policy = make_policy(name)
    cluster = mixed_cluster(128)
    ctx = Ctx(cluster, policy, 0.0)
    ids = iter(range(1, 10**9))
    while cluster.free_gpus:
        policy.submit(SchedJob(next(ids), f"u{rng.randrange(100)}", 1, 0.0,
                               time_limit_s=86400.0), 0.0)  # fmt: skip
        policy.schedule(ctx)
    ctx.now = 7200.0
    for _ in range(pending):
        policy.submit(SchedJob(next(ids), f"u{rng.randrange(100)}", 1, 7000.0, gpu_type="amd",
                               time_limit_s=86400.0), 7200.0)  # fmt: skip
    policy.schedule(ctx)
    victim = next(j for j in ctx.running.values() if j.placement[0][0] % 2 == 0)  # an H100
    ctx.running.pop(victim.id)
    end_run(victim, cluster, 7201.0)
    policy.finished(victim, 7201.0)
    times = []
    for step in range(6):
        ctx.now = 7201.0 + step
        t0 = time.perf_counter()
        policy.schedule(ctx)
        times.append((time.perf_counter() - t0) * 1000)
    return {f"{name}_one_type_full_pass_ms": round(statistics.median(times[1:]), 3)}


def main() -> None:
    args = parse_args(__doc__)
    result: dict[str, object] = {"benchmark": "gpu_types", "pending": args.pending,
                                 "gpus": 1024, "machines": 128, "pools": 256}  # fmt: skip
    for name in policy_names(include_oracles=False):
        result.update(measure(name, args.pending, args.rounds, seed=1))
        result.update(one_type_full(name, args.pending, seed=1))
    steady = [v for k, v in result.items()
              if k.endswith(("_finish_ms", "_submit_ms", "_full_pass_ms"))]  # fmt: skip
    result["worst_steady_pass_ms"] = max(v for v in steady if isinstance(v, float))
    emit(result, args.json)


if __name__ == "__main__":
    main()
