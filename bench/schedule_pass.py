"""How long one scheduling pass takes with a deep queue: 10,000 pending jobs on 1,024 GPUs.

For each policy: fill 128 nodes of 8 GPUs with running jobs, queue 10,000 more (GPU counts drawn
like Philly's: mostly 1, some 2-16), then time the pass that follows one running job's end, and
the pass after a submit to a full cluster; also the first pass over the whole new queue
(which may preempt hundreds of jobs at once). Then the CPU-bound case (`*_cpu_bound_*`): GPUs
free on every node but every CPU taken, so no pending job can start (each asks for CPUs): a
pass must not search the nodes for each of the 10,000 jobs (found profiling submits).
Prints one JSON line with `--json`.

    .venv/bin/python bench/schedule_pass.py --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Iterator

from machine import with_machine

from gpuyard.scheduling.cluster import ClusterState, NodeSpec, Placement
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.scheduling.policy import Policy, SchedJob, begin_run, end_run

SIZES = [1] * 80 + [2] * 3 + [4] * 6 + [8] * 9 + [16] * 2
PREEMPTIBLE = [True]  # --not-preemptible: every job as submitted without --preemptible


def new_job(*args: object, **kwargs: object) -> SchedJob:
    return SchedJob(*args, preemptible=PREEMPTIBLE[0], **kwargs)  # type: ignore[arg-type]


class Ctx:
    """A bare Context: applies starts and preemptions to the cluster, nothing else."""

    def __init__(self, cluster: ClusterState, policy: Policy, now: float) -> None:
        self.cluster, self.policy, self.now = cluster, policy, now
        self.running: dict[int, SchedJob] = {}

    def start(self, job: SchedJob, placement: Placement) -> None:
        begin_run(job, self.cluster, placement, self.now)
        self.policy.started(job, self.now)
        self.running[job.id] = job

    def preempt(self, job: SchedJob) -> None:
        end_run(job, self.cluster, self.now)
        self.running.pop(job.id, None)
        self.policy.preempted(job, self.now)


def measure(name: str, pending: int, rounds: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    finish_ms, submit_ms, first_ms = [], [], []
    for _ in range(rounds):
        policy = make_policy(name)
        cluster = ClusterState.uniform(1024, 8)
        now = 0.0
        ids = iter(range(1, 10**9))
        ctx = Ctx(cluster, policy, now)
        while cluster.free_gpus:  # fill the cluster
            job = new_job(next(ids), f"u{rng.randrange(100)}", 1, now, time_limit_s=86400.0)
            policy.submit(job, now)
            policy.schedule(ctx)
        now = 7200.0  # running jobs are 2 h old
        for _ in range(pending):
            gpus = rng.choice(SIZES)
            job = new_job(next(ids), f"u{rng.randrange(100)}", gpus, now - rng.random() * 3600,
                           time_limit_s=rng.choice([600.0, 3600.0, 86400.0]))  # fmt: skip
            policy.submit(job, now)
        first, finish, submit = time_passes(ctx, now, ids)
        first_ms.append(first)
        finish_ms.append(finish)
        submit_ms.append(submit)
    return medians(name, first_ms, finish_ms, submit_ms)


def measure_cpu_bound(name: str, pending: int, rounds: int, seed: int) -> dict[str, float]:
    """128 nodes of 8 GPUs and 16 CPUs, each running one 1-GPU job holding all 16 CPUs (7 GPUs
    free, no CPU); `pending` jobs asking for 1-4 CPUs each."""
    rng = random.Random(seed)
    finish_ms, submit_ms, first_ms = [], [], []
    for _ in range(rounds):
        policy = make_policy(name)
        cluster = ClusterState([NodeSpec(f"n{i}", 8, cpus=16) for i in range(128)])
        now = 0.0
        ids = iter(range(1, 10**9))
        ctx = Ctx(cluster, policy, now)
        for _ in range(128):
            job = new_job(next(ids), f"u{rng.randrange(100)}", 1, now, cpus=16,
                           time_limit_s=86400.0)  # fmt: skip
            policy.submit(job, now)
            policy.schedule(ctx)
        now = 7200.0
        for _ in range(pending):
            job = new_job(next(ids), f"u{rng.randrange(100)}", rng.choice(SIZES[:89]),
                           now - rng.random() * 3600, cpus=rng.choice([1, 2, 4]),
                           time_limit_s=rng.choice([600.0, 3600.0, 86400.0]))  # fmt: skip
            policy.submit(job, now)
        first, finish, submit = time_passes(ctx, now, ids, cpus=1)
        first_ms.append(first)
        finish_ms.append(finish)
        submit_ms.append(submit)
    return medians(f"{name}_cpu_bound", first_ms, finish_ms, submit_ms)


def time_passes(
    ctx: Ctx, now: float, ids: Iterator[int], gpu_type: str = "", cpus: int = 0
) -> tuple[float, float, float]:
    """On a full cluster whose deep queue was just submitted at ``now``: the ms of the first
    pass over the queue, of the pass after one running job's end, and of the pass after a
    submit of one 1-GPU job (of ``gpu_type``)."""
    policy, cluster = ctx.policy, ctx.cluster
    ctx.now = now
    t0 = time.perf_counter()
    policy.schedule(ctx)  # the first pass over the whole new queue (may preempt)
    first = (time.perf_counter() - t0) * 1000
    now += 1.0
    victim = ctx.running.pop(min(ctx.running))
    end_run(victim, cluster, now)
    policy.finished(victim, now)
    ctx.now = now
    t0 = time.perf_counter()
    policy.schedule(ctx)
    finish = (time.perf_counter() - t0) * 1000
    now += 1.0
    job = new_job(next(ids), "u0", 1, now, time_limit_s=600.0, gpu_type=gpu_type, cpus=cpus)
    policy.submit(job, now)
    ctx.now = now
    t0 = time.perf_counter()
    policy.schedule(ctx)
    submit = (time.perf_counter() - t0) * 1000
    return first, finish, submit


def medians(
    name: str, first_ms: list[float], finish_ms: list[float], submit_ms: list[float]
) -> dict[str, float]:
    return {
        f"{name}_first_pass_ms": round(statistics.median(first_ms), 3),
        f"{name}_after_finish_ms": round(statistics.median(finish_ms), 3),
        f"{name}_after_submit_ms": round(statistics.median(submit_ms), 3),
    }


def parse_args(doc: str | None) -> argparse.Namespace:
    """--json, --pending (the queue's depth) and --rounds; ``doc``'s first line describes."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--not-preemptible", action="store_true",
                        help="no job opted in to preemption (the live default)")  # fmt: skip
    return parser.parse_args()


def emit(result: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(with_machine(result, backend=None)))
    else:
        for key, value in result.items():
            print(f"{key:32s} {value}")


def main() -> None:
    args = parse_args(__doc__)
    PREEMPTIBLE[0] = not args.not_preemptible
    result: dict[str, object] = {"benchmark": "schedule_pass", "pending": args.pending,
                                 "gpus": 1024, "nodes": 128,
                                 "preemptible": PREEMPTIBLE[0]}  # fmt: skip
    for name in policy_names(include_oracles=False):
        result.update(measure(name, args.pending, args.rounds, seed=1))
        result.update(measure_cpu_bound(name, args.pending, args.rounds, seed=1))
    steady = [v for k, v in result.items() if k.endswith(("_finish_ms", "_submit_ms"))]
    result["worst_steady_pass_ms"] = max(v for v in steady if isinstance(v, float))
    emit(result, args.json)


if __name__ == "__main__":
    main()
