"""JobBook: the server's in-memory index of jobs, kept in step with the durable store.

Reads (queue, show) come from here, so they never touch the database;
every change is written to the store first and put here after. Changes to existing jobs happen
under `mutation_lock`, so two changes to one job can never interleave; a new job needs no such
lock (nobody else knows its id yet).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState


class JobBook:
    """All jobs by id, and the ids of the unfinished ones (pending or running)."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self.lock = threading.RLock()  # short critical sections: index reads and writes
        self.mutation_lock = threading.Lock()  # held across a durable write of a change
        self._jobs: dict[int, Job] = {}
        self._pending: set[int] = set()
        self._running: dict[int, Job] = {}
        self._next_id = 1
        for job in jobs:
            self._index(None, job)
            self._next_id = max(self._next_id, job.id + 1)

    def allocate_id(self) -> int:
        with self.lock:
            job_id = self._next_id
            self._next_id += 1
            return job_id

    def peek_next_id(self) -> int:
        """The id the next submission will get (for what-if questions; allocates nothing)."""
        with self.lock:
            return self._next_id

    def get(self, job_id: int) -> Job | None:
        return self._jobs.get(job_id)

    def put(self, job: Job) -> None:
        """Record a new job or a new version of one; a stale version is refused."""
        with self.lock:
            old = self._jobs.get(job.id)
            if old is not None and job.version != old.version + 1:
                raise Conflict(f"job {job.id} changed meanwhile; try again")
            self._index(old, job)

    def jobs(self, *, include_finished: bool) -> list[Job]:
        """Jobs by id: all of them, or the pending and running ones."""
        with self.lock:
            if include_finished:
                return sorted(self._jobs.values(), key=lambda j: j.id)
            pending = [self._jobs[job_id] for job_id in self._pending]
            return sorted([*pending, *self._running.values()], key=lambda j: j.id)

    def running(self) -> list[Job]:
        with self.lock:
            return list(self._running.values())

    def _index(self, old: Job | None, new: Job) -> None:
        if old is not None:
            self._pending.discard(old.id)
            self._running.pop(old.id, None)
        self._jobs[new.id] = new
        if new.state is JobState.PENDING:
            self._pending.add(new.id)
        elif new.state is JobState.RUNNING:
            self._running[new.id] = new


def jobs_by_gpu(jobs: Iterable[Job]) -> dict[int, list[Job]]:
    """GPU index -> the jobs on it (several on a GPU shared with --gpu-mem)."""
    by_gpu: dict[int, list[Job]] = {}
    for job in jobs:
        for gpu in job.gpus:
            by_gpu.setdefault(gpu, []).append(job)
    return by_gpu
