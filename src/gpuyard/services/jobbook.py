"""JobBook: the server's in-memory index of jobs, kept in step with the durable store.

Reads (queue, show, the scheduler's view) come from here, so they never touch the database;
every change is written to the store first and put here after. Changes to existing jobs happen
under `mutation_lock`, so two changes to one job can never interleave; a new job needs no such
lock (nobody else knows its id yet).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterable

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.scheduling.plan import PendingJob, priority_order_key


class JobBook:
    """All jobs by id, the pending queue kept in priority order, and GPU holders."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self.lock = threading.RLock()  # short critical sections: index reads and writes
        self.mutation_lock = threading.Lock()  # held across a durable write of a change
        self._jobs: dict[int, Job] = {}
        # Two aligned lists in priority order: sort keys, and what the scheduler reads.
        self._pending: list[tuple[int, int]] = []
        self._pending_items: list[PendingJob] = []
        self._pending_by_gpus: Counter[int] = Counter()
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
        with self.lock:
            if include_finished:
                return sorted(self._jobs.values(), key=lambda j: j.id)
            pending = [self._jobs[job_id] for _, job_id in self._pending]
            return sorted([*pending, *self._running.values()], key=lambda j: j.id)

    def pending_in_order(self) -> tuple[list[PendingJob], dict[int, int]]:
        """Pending jobs in priority order and the count of pending jobs per GPU request."""
        with self.lock:
            return list(self._pending_items), dict(self._pending_by_gpus)

    def running(self) -> list[Job]:
        with self.lock:
            return list(self._running.values())

    def _index(self, old: Job | None, new: Job) -> None:
        if old is not None and old.state is JobState.PENDING:
            key = priority_order_key(old.spec.priority, old.id)
            pos = bisect.bisect_left(self._pending, key)
            if pos < len(self._pending) and self._pending[pos] == key:
                del self._pending[pos]
                del self._pending_items[pos]
            self._pending_by_gpus[old.spec.gpus] -= 1
            if self._pending_by_gpus[old.spec.gpus] <= 0:
                del self._pending_by_gpus[old.spec.gpus]
        if old is not None and old.state is JobState.RUNNING:
            self._running.pop(old.id, None)
        self._jobs[new.id] = new
        if new.state is JobState.PENDING:
            key = priority_order_key(new.spec.priority, new.id)
            pos = bisect.bisect_left(self._pending, key)
            self._pending.insert(pos, key)
            spec = new.spec
            self._pending_items.insert(
                pos, PendingJob(new.id, spec.gpus, spec.cpus, spec.mem_mib, spec.priority)
            )
            self._pending_by_gpus[new.spec.gpus] += 1
        elif new.state is JobState.RUNNING:
            self._running[new.id] = new
