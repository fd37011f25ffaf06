"""What `gpuyard queue` (estimated start times) and `submit --dry-run` cost with a deep queue.

The live server's LiveScheduler on one 8-GPU node with 8 running jobs and N pending jobs (default
10,000; GPU counts 1-8, time limits 10 min to 1 day). Times, per live policy: one scheduling
pass after a submit; one projection of every pending job's start (a deep copy of the policy,
then up to 2,000 ends or 2 s), made in the background when it is that slow; what a reader
(`gpuyard queue`) waits for the estimates then; and one dry run (projects until the probe
starts). Prints one JSON line with `--json`.

    .venv/bin/python bench/estimates.py --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.services.inventory import Inventory
from gpuyard.services.live_scheduler import LiveScheduler

LIMITS_S = [600, 3600, 4 * 3600, 86400]


def _job(job_id: int, gpus: int, limit_s: int, now: float, user: str) -> Job:
    spec = JobSpec(argv=("train",), name="t", workdir="/", gpus=gpus, time_limit_s=limit_s)
    return Job(job_id, spec, user, JobState.PENDING, submitted_at=now)


def measure(name: str, pending: int, rounds: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    now = [1_000_000.0]
    gpus = tuple(Gpu(i, f"GPU-{i}", "declared", None, False) for i in range(8))
    inventory = Inventory(gpus, NodeCapacity("node0", 10_000, 10**9), "declared")
    scheduler = LiveScheduler(make_policy(name, for_server=True), inventory, lambda: now[0])
    for job_id in range(1, 9):  # fill the node
        scheduler.submitted(_job(job_id, 1, rng.choice(LIMITS_S), now[0], "u0"))
    for launch in scheduler.decide().launches:
        scheduler.launched(launch.job_id, launch.gpus)
    for job_id in range(9, 9 + pending):
        job = _job(job_id, rng.choice([1, 1, 1, 2, 4, 8]), rng.choice(LIMITS_S), now[0],
                   f"u{rng.randrange(20)}")  # fmt: skip
        scheduler.submitted(job)
    scheduler.decide()
    pass_ms, estimate_ms, read_ms, dry_ms, known = [], [], [], [], 0
    next_id = 9 + pending
    for _ in range(rounds):
        now[0] += 1.0
        scheduler.submitted(_job(next_id, 1, 600, now[0], "u1"))
        next_id += 1
        t0 = time.perf_counter()
        scheduler.decide()
        pass_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        estimates = scheduler._project_estimates()
        estimate_ms.append((time.perf_counter() - t0) * 1000)
        known = sum(1 for v in estimates.values() if v is not None)
        scheduler.decide()  # a new pass: the estimates are stale now
        t0 = time.perf_counter()
        scheduler.estimated_starts()
        read_ms.append((time.perf_counter() - t0) * 1000)
        spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=1, time_limit_s=600)
        t0 = time.perf_counter()
        scheduler.dry_run(spec, "u2", next_id)
        dry_ms.append((time.perf_counter() - t0) * 1000)
    return {
        f"{name}_pass_ms": round(statistics.median(pass_ms), 2),
        f"{name}_projection_ms": round(statistics.median(estimate_ms), 1),
        f"{name}_estimated_jobs": known,
        f"{name}_queue_read_ms": round(statistics.median(read_ms), 2),
        f"{name}_dry_run_ms": round(statistics.median(dry_ms), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result: dict[str, object] = {"benchmark": "estimates", "pending": args.pending, "gpus": 8}
    for name in policy_names(include_oracles=False):
        result.update(measure(name, args.pending, args.rounds, seed=1))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value}")


if __name__ == "__main__":
    main()
