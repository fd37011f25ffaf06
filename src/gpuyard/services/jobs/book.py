"""JobBook: the server's in-memory index of jobs, kept in step with the durable store.

Reads (queue, show) come from here, so they never touch the database;
every change is written to the store first and put here after. Changes to existing jobs happen
under `mutation_lock`, so two changes to one job can never interleave; a new job needs no such
lock (nobody else knows its id yet).

Bounded: every pending and running job stays, but only the `keep_finished` jobs that finished
last; an older finished job is evicted (`get` answers None) and is read from the store's
history instead, so a server with a million past jobs does not hold them all.

The jobs it holds are also found by their owner and `Idempotency-Key` (`by_idempotency_key`):
a retried submit finds its job here without a database read (an evicted one: the store's
`find_by_idempotency_key`).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState


class JobBook:
    """Unfinished jobs by id (pending or running), and the most recently finished ones."""

    def __init__(
        self, jobs: Iterable[Job] = (), *, next_id: int = 1, keep_finished: int = 10_000
    ) -> None:
        """`next_id`: the first id to give (the store's `max_job_id() + 1`: ids of evicted
        jobs are never given again); `jobs`: what the store's `load_active` returned."""
        self.lock = threading.RLock()  # short critical sections: index reads and writes
        self.mutation_lock = threading.Lock()  # held across a durable write of a change
        self.keep_finished = keep_finished
        self._jobs: dict[int, Job] = {}
        self._pending: set[int] = set()
        self._running: dict[int, Job] = {}
        self._finished: OrderedDict[int, None] = OrderedDict()  # oldest end first
        self._by_key: dict[tuple[str, str], int] = {}  # (owner, idempotency key) -> job id
        self._by_array: dict[int, set[int]] = {}  # array id -> its tasks' job ids kept here
        self._next_id = next_id
        # Finished jobs enter in the order they ended, so the oldest end is evicted first.
        for job in sorted(jobs, key=_end_order):
            self._index(None, job)
            self._next_id = max(self._next_id, job.id + 1)

    def allocate_id(self) -> int:
        with self.lock:
            job_id = self._next_id
            self._next_id += 1
            return job_id

    def allocate_ids(self, count: int) -> int:
        """`count` consecutive ids (an array's tasks); returns the first."""
        with self.lock:
            first = self._next_id
            self._next_id += count
            return first

    def peek_next_id(self) -> int:
        """The id the next submission will get (for what-if questions; allocates nothing)."""
        with self.lock:
            return self._next_id

    def get(self, job_id: int) -> Job | None:
        """The job if kept in memory; None for an unknown or evicted one (ask the store)."""
        return self._jobs.get(job_id)

    def by_idempotency_key(self, owner: str, key: str) -> Job | None:
        """The job in memory that `owner` submitted with this key; None: none here (an evicted
        one may be in the store)."""
        with self.lock:
            job_id = self._by_key.get((owner, key))
            return None if job_id is None else self._jobs.get(job_id)

    def array_tasks(self, array_id: int) -> list[Job]:
        """The array's tasks kept in memory, by task index (evicted ones: the store's)."""
        with self.lock:
            found = [self._jobs[i] for i in self._by_array.get(array_id, ())]
        return sorted(found, key=lambda j: (j.array_task_id or 0, j.id))

    def put(self, job: Job) -> None:
        """Record a new job or a new version of one; a stale version is refused."""
        with self.lock:
            old = self._jobs.get(job.id)
            if old is not None and job.version != old.version + 1:
                raise Conflict(f"job {job.id} changed meanwhile; try again")
            self._index(old, job)

    def jobs(self, *, include_finished: bool) -> list[Job]:
        """Jobs in memory by id: all of them, or the pending and running ones."""
        with self.lock:
            if include_finished:
                return sorted(self._jobs.values(), key=lambda j: j.id)
            pending = [self._jobs[job_id] for job_id in self._pending]
            return sorted([*pending, *self._running.values()], key=lambda j: j.id)

    def active_page(self, limit: int) -> list[Job]:
        """The `limit` pending and running jobs of lowest id, by id: `jobs()`'s first page
        without sorting (or copying) every one of them: the first page of a 10,000-job queue
        (`GET /api/v1/jobs?limit=50`) used to sort the whole queue under this lock."""
        with self.lock:
            ids = heapq.nsmallest(limit, itertools.chain(self._pending, self._running))
            return [self._jobs[job_id] for job_id in ids]

    def running(self) -> list[Job]:
        with self.lock:
            return list(self._running.values())

    def forget(self, job_ids: Iterable[int]) -> None:
        """Drop finished jobs (`gpuyard clean` deleted them); a pending or running one stays."""
        with self.lock:
            for job_id in job_ids:
                if job_id in self._finished:
                    del self._finished[job_id]
                    self._drop(job_id)

    def _index(self, old: Job | None, new: Job) -> None:
        if old is not None:
            self._pending.discard(old.id)
            self._running.pop(old.id, None)
        if new.state.is_terminal and new.spec.script is not None:
            # A finished job's script copy (up to 1 MiB) is the store's to keep, not memory's:
            # nothing reads it again but `restart`, which reads the store.
            new = replace(new, spec=replace(new.spec, script=None))
        self._jobs[new.id] = new
        if new.idempotency_key is not None and old is None:
            self._by_key.setdefault((new.owner, new.idempotency_key), new.id)
        if new.array_job_id is not None and old is None:
            self._by_array.setdefault(new.array_job_id, set()).add(new.id)
        if new.state is JobState.PENDING:
            self._pending.add(new.id)
        elif new.state is JobState.RUNNING:
            self._running[new.id] = new
        elif new.id not in self._finished:  # a later change to a finished job keeps its place
            self._finished[new.id] = None
            self._evict()

    def _evict(self) -> None:
        while len(self._finished) > self.keep_finished:
            job_id, _ = self._finished.popitem(last=False)
            self._drop(job_id)

    def _drop(self, job_id: int) -> None:
        job = self._jobs.pop(job_id)
        if job.array_job_id is not None:
            tasks = self._by_array.get(job.array_job_id)
            if tasks is not None:
                tasks.discard(job_id)
                if not tasks:
                    del self._by_array[job.array_job_id]
        if job.idempotency_key is not None:
            key = (job.owner, job.idempotency_key)
            if self._by_key.get(key) == job_id:
                del self._by_key[key]


def _end_order(job: Job) -> tuple[bool, float, int]:
    """Unfinished jobs first (never evicted anyway), then finished ones by when they ended."""
    if not job.state.is_terminal:
        return (False, 0.0, job.id)
    return (True, job.ended_at or 0.0, job.id)


def jobs_by_gpu(jobs: Iterable[Job]) -> dict[int, list[Job]]:
    """GPU index -> the jobs on it (several on a GPU shared with --gpu-mem)."""
    by_gpu: dict[int, list[Job]] = {}
    for job in jobs:
        for gpu in job.gpus:
            by_gpu.setdefault(gpu, []).append(job)
    return by_gpu
