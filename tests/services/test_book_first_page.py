"""The first page of the live queue (`GET /api/v1/jobs?limit=50`, `queue --limit 50`) comes
from the book's `active_page`: the oldest pending and running jobs, finished ones left out,
the same jobs as the whole queue's first rows, without sorting the whole queue."""

from __future__ import annotations

import random
from dataclasses import replace

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook

_SPEC = JobSpec(argv=("true",), name="t", workdir="/tmp", gpus=1)


def _job(job_id: int, state: JobState) -> Job:
    ended = 1.0 if state.is_terminal else None
    return Job(id=job_id, spec=_SPEC, owner="alice", state=state, submitted_at=0.0,
               started_at=None if state is JobState.PENDING else 0.5, ended_at=ended)  # fmt: skip


def test_the_first_page_is_the_oldest_active_jobs_in_id_order() -> None:
    rng = random.Random(7)
    states = [JobState.PENDING] * 6 + [JobState.RUNNING, JobState.COMPLETED, JobState.FAILED]
    jobs = [_job(i, rng.choice(states)) for i in rng.sample(range(1, 20_000), 5_000)]
    book = JobBook(jobs, next_id=20_000)

    whole = book.jobs(include_finished=False)
    for limit in (1, 50, 4_000, 10_000):
        page = book.active_page(limit)
        assert [j.id for j in page] == [j.id for j in whole[:limit]]
        assert all(not j.state.is_terminal for j in page)


def test_the_first_page_follows_changes() -> None:
    book = JobBook([_job(i, JobState.PENDING) for i in range(1, 6)], next_id=6)
    book.put(replace(_job(1, JobState.COMPLETED), version=2))
    assert [j.id for j in book.active_page(2)] == [2, 3]  # the finished job left the page
