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
import threading
import time
from typing import Any

from machine import with_machine

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

LIMITS_S = [600, 3600, 4 * 3600, 86400]


def _job(job_id: int, gpus: int, limit_s: int, now: float, user: str) -> Job:
    spec = JobSpec(argv=("train",), name="t", workdir="/", gpus=gpus, time_limit_s=limit_s)
    return Job(job_id, spec, user, JobState.PENDING, submitted_at=now)


class _HoldTimer:
    """A lock wrapper recording the longest hold (for schedulers that do not record it)."""

    def __init__(self, lock: Any) -> None:
        self._lock, self._since, self.hold_max_s = lock, 0.0, 0.0

    def __enter__(self) -> _HoldTimer:
        self._lock.acquire()
        self._since = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.hold_max_s = max(self.hold_max_s, time.perf_counter() - self._since)
        self._lock.release()


def _project(scheduler: LiveScheduler) -> dict[int, float | None]:
    """One projection now (the method's name differs before and after the estimator split, and
    the estimator's answers a `StartEstimates` since preemption-dependent starts are marked)."""
    old = getattr(scheduler, "_project_estimates", None)
    made = old() if old is not None else scheduler.estimator._project()
    return dict(getattr(made, "starts", made))


def contention(
    scheduler: LiveScheduler, now: list[float], seconds: float, next_id: int
) -> dict[str, float]:
    """Projections back to back on a thread; passes and reads on this one."""
    timer = (
        scheduler._lock if hasattr(scheduler._lock, "hold_max_s") else _HoldTimer(scheduler._lock)
    )
    scheduler._lock = timer  # type: ignore[assignment]
    timer.hold_max_s = 0.0
    stop = threading.Event()
    projections = [0]

    def project() -> None:
        while not stop.is_set():
            _project(scheduler)
            projections[0] += 1

    thread = threading.Thread(target=project, daemon=True)
    thread.start()
    worst_pass = worst_reason = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        now[0] += 0.01
        scheduler.submitted(_job(next_id, 1, 600, now[0], "u3"))
        t0 = time.perf_counter()
        scheduler.decide()
        worst_pass = max(worst_pass, time.perf_counter() - t0)
        t0 = time.perf_counter()
        scheduler.reason_for(next_id)
        worst_reason = max(worst_reason, time.perf_counter() - t0)
        next_id += 1
        time.sleep(0.01)
    stop.set()
    thread.join()
    return {
        "contended_pass_max_ms": round(worst_pass * 1000, 2),
        "contended_reason_max_ms": round(worst_reason * 1000, 2),
        "lock_hold_max_ms": round(timer.hold_max_s * 1000, 2),
        "contended_projections": projections[0],
    }


def measure(
    name: str, pending: int, rounds: int, seed: int, contention_s: float
) -> dict[str, float]:
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
        estimates = _project(scheduler)
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
    contended = contention(scheduler, now, contention_s, next_id + 1) if contention_s else {}
    return {
        **{f"{name}_{key}": value for key, value in contended.items()},
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
    parser.add_argument("--contention-s", type=float, default=3.0)
    parser.add_argument("--policy", action="append", help="only these policies (repeatable)")
    args = parser.parse_args()
    result: dict[str, object] = {"benchmark": "estimates", "pending": args.pending, "gpus": 8}
    for name in args.policy or policy_names(include_oracles=False):
        result.update(measure(name, args.pending, args.rounds, 1, args.contention_s))
    if args.json:
        print(json.dumps(with_machine(result, backend=None)))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value}")


if __name__ == "__main__":
    main()
