"""`gpuyard usage`'s figures (domain/usage.py) on a known set of jobs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.domain.usage import summarise


def _job(job_id: int, owner: str, gpus: int, start: float, end: float | None,
         state: JobState, **kw: Any) -> Job:  # fmt: skip
    spec = JobSpec(argv=("x",), name="t", workdir="/", gpus=gpus)
    return Job(id=job_id, spec=spec, owner=owner, state=state, submitted_at=kw.pop("sub", 0.0),
               started_at=start, ended_at=end, **kw)  # fmt: skip


def test_worked_example_and_teams() -> None:
    carol: dict[str, Any] = {"sub": -3600.0, "attained_gpu_s": 600.0}
    half = {"samples": 10, "util_sum_pct": 500.0, "gpu_s": 7200.0}  # 50% mean over 2 GPU-h
    records = [
        (_job(1, "alice", 2, 0.0, 3600.0, JobState.COMPLETED), half),
        (_job(2, "alice", 1, 0.0, 1800.0, JobState.FAILED), None),
        (_job(3, "bob", 4, 1800.0, None, JobState.RUNNING), None),  # running: up to now
        # Preempted once for 600 GPU-s before its last run; ran before `since` partly.
        (_job(4, "carol", 1, -1800.0, 1800.0, JobState.COMPLETED, **carol), None),
    ]
    rows = {r.key: r for r in summarise(records, since=0.0, now=3600.0)}
    alice = rows["alice"]
    assert alice.allocated_gpu_h == pytest.approx(2.5)
    assert alice.used_gpu_h == pytest.approx(1.0)
    assert alice.util_mean_pct == pytest.approx(50.0)
    assert alice.states == {"COMPLETED": 1, "FAILED": 1} and alice.jobs == 2
    assert rows["bob"].allocated_gpu_h == pytest.approx(2.0)
    assert rows["bob"].used_gpu_h is None and rows["bob"].util_mean_pct is None
    assert rows["carol"].allocated_gpu_h == pytest.approx(0.5)  # submitted before: no attained
    by_team = summarise(records, since=0.0, now=3600.0,
                        key_of={"alice": "vision", "bob": "vision"})  # fmt: skip
    assert [(r.key, round(r.allocated_gpu_h, 3)) for r in by_team] == [
        ("vision", 4.5), ("carol", 0.5),
    ]  # fmt: skip


def test_preempted_runs_count_when_submitted_since() -> None:
    job = dataclasses.replace(
        _job(1, "dave", 2, 100.0, 200.0, JobState.COMPLETED, sub=10.0), attained_gpu_s=120.0
    )
    (row,) = summarise([(job, None)], since=0.0, now=1000.0)
    assert row.allocated_gpu_h == pytest.approx((200.0 + 120.0) / 3600.0)
