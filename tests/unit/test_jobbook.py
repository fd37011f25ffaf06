"""JobBook: the in-memory index `queue` and `show` read from."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook


def new_job(job_id: int, *, gpus: int = 1, priority: int = 0, cpus: int = 1) -> Job:
    spec = JobSpec(argv=("train",), name=f"j{job_id}", workdir="/tmp", gpus=gpus, cpus=cpus,
                   mem_mib=512 * job_id, priority=priority)  # fmt: skip
    return Job(id=job_id, spec=spec, owner="ada", state=JobState.PENDING, submitted_at=1.0)


def pending_ids(book: JobBook) -> list[int]:
    return [j.id for j in book.jobs(include_finished=False) if j.state is JobState.PENDING]


def test_started_job_leaves_the_queue_and_joins_running() -> None:
    book = JobBook([new_job(1), new_job(2, gpus=4)])
    job = book.get(1)
    assert job is not None
    book.put(job.transition(JobState.RUNNING, gpus=(0,), started_at=2.0))
    assert pending_ids(book) == [2]
    assert [j.id for j in book.running()] == [1]
    assert book.running()[0].gpus == (0,)
    running = book.get(1)
    assert running is not None
    book.put(running.transition(JobState.COMPLETED, exit_code=0, ended_at=3.0))
    assert book.running() == []
    finished = book.get(1)
    assert finished is not None and finished.state is JobState.COMPLETED


def test_requeued_job_is_pending_again() -> None:
    book = JobBook([new_job(1), new_job(2), new_job(3)])
    job = book.get(2)
    assert job is not None
    running = job.transition(JobState.RUNNING, gpus=(0,))
    book.put(running)
    book.put(running.transition(JobState.PENDING, gpus=()))
    assert pending_ids(book) == [1, 2, 3]
    assert book.running() == []


def test_stale_version_is_refused_and_changes_nothing() -> None:
    book = JobBook([new_job(1)])
    job = book.get(1)
    assert job is not None
    book.put(job.with_changes(reason="Priority"))  # version 2
    # A writer that read version 1 and now applies its own change (also version 2) loses.
    with pytest.raises(Conflict):
        book.put(job.transition(JobState.RUNNING, gpus=(0,)))
    current = book.get(1)
    assert current is not None and current.version == 2 and current.reason == "Priority"
    assert pending_ids(book) == [1] and book.running() == []


def test_skipping_a_version_is_refused() -> None:
    book = JobBook([new_job(1)])
    job = book.get(1)
    assert job is not None
    with pytest.raises(Conflict):
        book.put(job.with_changes().with_changes())  # version 3 over version 1


def test_loaded_jobs_are_indexed_and_ids_continue_after_the_highest() -> None:
    done = new_job(7).transition(JobState.RUNNING).transition(JobState.FAILED)
    running = new_job(3).transition(JobState.RUNNING, gpus=(1,))
    book = JobBook([done, running, new_job(5)])
    assert book.allocate_id() == 8
    assert book.allocate_id() == 9
    assert pending_ids(book) == [5]
    assert [j.id for j in book.running()] == [3]
    assert [j.id for j in book.jobs(include_finished=False)] == [3, 5]
    assert sorted(j.id for j in book.jobs(include_finished=True)) == [3, 5, 7]


def test_allocate_id_is_unique_across_threads() -> None:
    book = JobBook()
    got: list[int] = []

    def grab() -> None:
        got.extend(book.allocate_id() for _ in range(500))

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 4001))


ops = st.lists(
    st.tuples(st.sampled_from(["submit", "start", "finish", "cancel", "requeue", "reprio"]),
              st.integers(0, 50), st.integers(0, 4), st.integers(-2, 2)),
    max_size=60,
)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(ops)
def test_indexes_match_the_jobs_after_any_sequence_of_changes(
    script: list[tuple[str, int, int, int]],
) -> None:
    book = JobBook()
    for op, pick, gpus, prio in script:
        jobs = sorted(book.jobs(include_finished=True), key=lambda j: j.id)
        pending = [j for j in jobs if j.state is JobState.PENDING]
        running = [j for j in jobs if j.state is JobState.RUNNING]
        if op == "submit":
            book.put(new_job(book.allocate_id(), gpus=gpus, priority=prio))
        elif op == "start" and pending:
            book.put(pending[pick % len(pending)].transition(JobState.RUNNING))
        elif op == "finish" and running:
            book.put(running[pick % len(running)].transition(JobState.COMPLETED))
        elif op == "cancel" and pending:
            book.put(pending[pick % len(pending)].transition(JobState.CANCELLED))
        elif op == "requeue" and running:
            book.put(running[pick % len(running)].transition(JobState.PENDING))
        elif op == "reprio" and pending:
            job = pending[pick % len(pending)]
            spec = JobSpec(job.spec.argv, job.spec.name, job.spec.workdir, gpus=job.spec.gpus,
                           priority=prio)  # fmt: skip
            book.put(job.with_changes(spec=spec))
    everything = book.jobs(include_finished=True)
    unfinished = [j.id for j in everything if not j.state.is_terminal]
    assert [j.id for j in book.jobs(include_finished=False)] == unfinished
    assert sorted(j.id for j in book.running()) == sorted(
        j.id for j in everything if j.state is JobState.RUNNING
    )


def finished(job_id: int, ended_at: float) -> Job:
    return (
        new_job(job_id)
        .transition(JobState.RUNNING)
        .transition(JobState.COMPLETED, ended_at=ended_at)
    )


def test_only_the_most_recently_finished_jobs_are_kept() -> None:
    # Loaded out of order; job 2 ended last of the old ones, so job 1 and 3 go first.
    book = JobBook([finished(3, 30.0), finished(1, 10.0), finished(2, 50.0), new_job(4)],
                   keep_finished=2)  # fmt: skip
    assert sorted(j.id for j in book.jobs(include_finished=True)) == [2, 3, 4]
    assert book.get(1) is None  # evicted: the service asks the store
    running = book.get(4)
    assert running is not None
    running = running.transition(JobState.RUNNING, gpus=(0,))
    book.put(running)
    book.put(running.transition(JobState.FAILED, ended_at=60.0))
    # Job 4 finished last: the oldest end (job 3) is evicted, never a pending or running job.
    assert sorted(j.id for j in book.jobs(include_finished=True)) == [2, 4]
    assert book.get(3) is None


def test_pending_and_running_jobs_are_never_evicted() -> None:
    book = JobBook(keep_finished=0)
    for job_id in (1, 2, 3):
        book.put(new_job(job_id))
    job = book.get(2)
    assert job is not None
    book.put(job.transition(JobState.RUNNING, gpus=(0,)))
    done = book.get(3)
    assert done is not None
    book.put(done.transition(JobState.CANCELLED, ended_at=5.0))
    assert [j.id for j in book.jobs(include_finished=True)] == [1, 2]
    assert [j.id for j in book.jobs(include_finished=False)] == [1, 2]
    assert [j.id for j in book.running()] == [2]


def test_ids_start_above_the_stores_highest_even_if_those_jobs_are_not_loaded() -> None:
    # The store held jobs up to 1,000,000 but only job 12 is still pending: the next id must
    # not reuse the ids of finished jobs left in the store.
    book = JobBook([new_job(12)], next_id=1_000_001)
    assert book.allocate_id() == 1_000_001
    assert JobBook([new_job(12)], next_id=5).allocate_id() == 13


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.integers(0, 5))
def test_the_book_keeps_exactly_the_last_finished_jobs(ends: list[int], keep: int) -> None:
    # Submit jobs and finish a few in an arbitrary order: the kept finished ones are always
    # the `keep` that finished last, and every unfinished job is still there.
    book = JobBook(keep_finished=keep)
    finished_order: list[int] = []
    clock = 0.0
    for pick in ends:
        book.put(new_job(book.allocate_id()))
        pending = book.jobs(include_finished=False)
        job = pending[pick % len(pending)]
        if pick % 2:
            clock += 1
            book.put(job.transition(JobState.CANCELLED, ended_at=clock))
            finished_order.append(job.id)
    kept = {j.id for j in book.jobs(include_finished=True) if j.state.is_terminal}
    assert kept == set(finished_order[-keep:] if keep else [])
    unfinished = {j.id for j in book.jobs(include_finished=False)}
    assert unfinished == set(range(1, len(ends) + 1)) - set(finished_order)
