"""`array_tasks`: an array's tasks by index, over every backend, after they ended and after a
reopen (what `gpuyard show A` reads once the server's book evicted them); other jobs and other
arrays never match."""

from __future__ import annotations

import dataclasses

from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.ports import JobStore
from tests.contract.stores import Backend, pending_job


def _task(job_id: int, array_id: int, index: int) -> Job:
    return dataclasses.replace(pending_job(job_id), array_job_id=array_id, array_task_id=index)


def test_an_arrays_tasks_come_by_index_and_no_other_job(store: JobStore) -> None:
    # Written out of index order, with a plain job and another array between them.
    tasks = [_task(10, 10, 0), _task(12, 10, 9), _task(11, 10, 4)]
    other = [_task(13, 13, 0), _task(14, 13, 1)]
    store.write([*tasks, pending_job(20), *other], [])

    assert [j.id for j in store.array_tasks(10)] == [10, 11, 12]
    assert [j.array_task_id for j in store.array_tasks(10)] == [0, 4, 9]
    assert store.array_tasks(10)[1] == tasks[2]
    assert [j.id for j in store.array_tasks(13)] == [13, 14]
    assert store.array_tasks(20) == []  # a plain job is no array
    assert store.array_tasks(11) == []  # a task's own id is not its array's
    assert store.array_tasks(999) == []


def test_ended_tasks_are_found_after_a_reopen(backend: Backend) -> None:
    store = backend.open()
    first, second = _task(5, 5, 0), _task(6, 5, 1)
    store.write([first, second], [])
    running = second.transition(JobState.RUNNING, gpus=(0,), started_at=1001.0)
    done = running.transition(JobState.COMPLETED, ended_at=1002.0, exit_code=0)
    store.write([], [running])
    store.write([], [done])
    store.close()

    reopened = backend.open()
    found = reopened.array_tasks(5)
    assert [(j.id, j.state) for j in found] == [(5, JobState.PENDING), (6, JobState.COMPLETED)]
    assert found[1].array_job_id == 5 and found[1].array_task_id == 1


def test_ten_thousand_tasks_in_one_write_all_land(store: JobStore) -> None:
    tasks = [_task(100 + i, 100, i) for i in range(10_000)]
    store.write(tasks, [])
    found = store.array_tasks(100)
    assert len(found) == 10_000
    assert [j.array_task_id for j in found] == list(range(10_000))
