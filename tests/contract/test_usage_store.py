"""The UsageStore port on every store: the jobs that held GPUs since a time, with their stats."""

from __future__ import annotations

import dataclasses
from typing import cast

from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.stores import UsageStore
from tests.contract.stores import Backend, pending_job


def _ran(job_id: int, owner: str, start: float | None, end: float | None, state: JobState) -> Job:
    job = dataclasses.replace(pending_job(job_id), owner=owner)
    return dataclasses.replace(job, state=state, started_at=start, ended_at=end)


def test_usage_jobs_are_those_that_held_gpus_since(backend: Backend) -> None:
    store = backend.open()
    jobs = [
        _ran(1, "alice", 0.0, 50.0, JobState.COMPLETED),  # ended before `since`
        _ran(2, "alice", 0.0, 150.0, JobState.COMPLETED),
        _ran(3, "bob", 120.0, None, JobState.RUNNING),
        _ran(4, "bob", None, None, JobState.PENDING),  # never ran
        _ran(5, "bob", 90.0, 200.0, JobState.FAILED),
    ]
    store.write(jobs, [])
    store.save_gpu_stats(2, {"samples": 2, "util_sum_pct": 100.0, "gpu_s": 300.0})
    usage = cast(UsageStore, store)
    got = usage.usage_jobs(100.0)
    assert [(j.id, stats) for j, stats in got] == [
        (2, {"samples": 2, "util_sum_pct": 100.0, "gpu_s": 300.0}), (3, None), (5, None),
    ]  # fmt: skip
    assert [j.id for j, _ in usage.usage_jobs(100.0, owner="bob")] == [3, 5]
