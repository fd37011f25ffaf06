"""MemoryJobStore: the JobStore port in memory, for tests and the simulator-like tools.

It keeps the port's promises that callers rely on, not just its shape: an update is a
compare-and-set on `version` (Conflict when it lost a race), a write is all or nothing, the
exclusive lock refuses a second holder, and history pages are newest first with the same
filters as SQL. Several stores may share one `MemoryDatabase`, as several SqlJobStores share
one file: that is how the contract suite checks "reopen" and the lock for both.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from gpuyard.adapters.store.accounts_memory import MemoryAccounts, MemoryAccountStore
from gpuyard.adapters.store.bundle import every_port
from gpuyard.adapters.store.events_memory import MemoryEventRows, MemoryEvents
from gpuyard.adapters.store.gpu_history_memory import MemoryGpuHistory, MemoryGpuHistoryStore
from gpuyard.adapters.store.limits_memory import MemoryLimits, MemoryLimitStore
from gpuyard.adapters.store.notify_memory import MemoryNotify, MemoryNotifyRows
from gpuyard.adapters.store.progress_memory import MemoryProgress, MemoryProgressRows
from gpuyard.adapters.store.sweeps_memory import MemorySweepRows, MemorySweeps
from gpuyard.domain.errors import Conflict, Unavailable
from gpuyard.domain.job import Drain, Job
from gpuyard.domain.states import JobState
from gpuyard.services.stores import Stores

_ACTIVE = frozenset({JobState.PENDING, JobState.RUNNING})


@dataclass
class MemoryDatabase:
    """What a database file holds, in memory: jobs, drains, GPU stats, accounts, and who
    holds the lock."""

    name: str = "memory"
    jobs: dict[int, Job] = field(default_factory=dict)
    drains: dict[str, Drain] = field(default_factory=dict)
    gpu_stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    progress: MemoryProgressRows = field(default_factory=MemoryProgressRows)
    sweeps: MemorySweepRows = field(default_factory=MemorySweepRows)
    max_deleted_id: int = 0  # the highest id `delete_finished` removed: never given again
    accounts: MemoryAccounts = field(default_factory=MemoryAccounts)
    limits: MemoryLimits = field(default_factory=MemoryLimits)
    gpu_history: MemoryGpuHistory = field(default_factory=MemoryGpuHistory)
    notify: MemoryNotifyRows = field(default_factory=MemoryNotifyRows)
    events: MemoryEventRows = field(default_factory=MemoryEventRows)
    lock_holder: object | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryJobStore(
    MemoryAccountStore, MemoryLimitStore, MemoryGpuHistoryStore, MemoryProgress, MemorySweeps,
    MemoryNotify, MemoryEvents,
):  # fmt: skip
    """Implements every store port (`stores()`) over a MemoryDatabase (a new, empty one by
    default)."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.database = database if database is not None else MemoryDatabase()
        self._accounts = self.database.accounts
        self._limits = self.database.limits
        self._progress = self.database.progress
        self._sweeps = self.database.sweeps
        self._gpu_history = self.database.gpu_history
        self._notify = self.database.notify
        self._events = self.database.events
        self._closed = False

    def stores(self) -> Stores:
        """This store by port: it implements every one."""
        return every_port(self)

    def lock_exclusive(self) -> None:
        db = self.database
        with db.lock:
            if db.lock_holder is self:
                return
            if db.lock_holder is not None:
                raise Unavailable(
                    f"another gpuyard server already uses {db.name}; stop it or pass another"
                    " --state-dir"
                )
            db.lock_holder = self

    def load_jobs(self) -> list[Job]:
        """Every job ever, by id: for tests and tools."""
        with self.database.lock:
            return sorted(self.database.jobs.values(), key=lambda j: j.id)

    def load_active(self, recent_finished: int) -> list[Job]:
        with self.database.lock:
            everything = list(self.database.jobs.values())
        active = [j for j in everything if j.state in _ACTIVE]
        ended = [j for j in everything if j.state not in _ACTIVE and j.ended_at is not None]
        ended.sort(key=lambda j: (j.ended_at, j.id), reverse=True)
        recent = ended[: max(0, recent_finished)]
        return sorted([*active, *recent], key=lambda j: j.id)

    def get_job(self, job_id: int) -> Job | None:
        with self.database.lock:
            return self.database.jobs.get(job_id)

    def find_by_idempotency_key(self, owner: str, key: str) -> Job | None:
        with self.database.lock:
            found = [
                job
                for job in self.database.jobs.values()
                if job.owner == owner and job.idempotency_key == key
            ]
        return min(found, key=lambda j: j.id, default=None)

    def array_tasks(self, array_job_id: int) -> list[Job]:
        with self.database.lock:
            found = [j for j in self.database.jobs.values() if j.array_job_id == array_job_id]
        return sorted(found, key=lambda j: (j.array_task_id or 0, j.id))

    def max_job_id(self) -> int:
        with self.database.lock:
            return max(max(self.database.jobs, default=0), self.database.max_deleted_id)

    def delete_finished(
        self, *, ended_before: float | None = None, owner: str | None = None
    ) -> list[int]:
        self._check_open()
        with self.database.lock:
            db = self.database
            ids = sorted(
                job.id
                for job in db.jobs.values()
                if job.state.is_terminal
                and (
                    ended_before is None
                    or (job.ended_at is not None and job.ended_at < ended_before)
                )
                and (owner is None or job.owner == owner)
            )
            for job_id in ids:
                del db.jobs[job_id]
                db.gpu_stats.pop(job_id, None)
            db.progress.drop(ids)
            db.max_deleted_id = max([db.max_deleted_id, *ids])
            return ids

    def page_jobs(
        self,
        *,
        limit: int,
        before_id: int | None = None,
        since: float | None = None,
        states: Collection[JobState] | None = None,
        owner: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        wanted = None if states is None else {JobState(s) for s in states}
        page: list[Job] = []
        for job in sorted(self.load_jobs(), key=lambda j: j.id, reverse=True):
            if len(page) >= limit:
                break
            if (
                (before_id is None or job.id < before_id)
                and (since is None or job.submitted_at >= since)
                and (wanted is None or job.state in wanted)
                and (owner is None or job.owner == owner)
                and (name is None or job.spec.name == name)
            ):
                page.append(job)
        return page

    def write(self, inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        self.write_future(inserts, updates).result()

    def write_future(self, inserts: Sequence[Job], updates: Sequence[Job]) -> Future[None]:
        """Applies the write at once; the returned Future is already done (or failed)."""
        done: Future[None] = Future()
        try:
            self._apply(inserts, updates)
        except Conflict as err:
            done.set_exception(err)
        else:
            done.set_result(None)
        return done

    def load_drains(self) -> dict[str, Drain]:
        with self.database.lock:
            return dict(self.database.drains)

    def save_drain(self, gpu_uuid: str, drain: Drain | None) -> None:
        self._check_open()
        with self.database.lock:
            if drain is None:
                self.database.drains.pop(gpu_uuid, None)
            else:
                self.database.drains[gpu_uuid] = drain

    def load_gpu_stats(self, limit: int) -> dict[int, dict[str, Any]]:
        with self.database.lock:
            last = sorted(self.database.gpu_stats)[-limit:] if limit > 0 else []
            return {job_id: copy.deepcopy(self.database.gpu_stats[job_id]) for job_id in last}

    def usage_jobs(
        self, since: float, owner: str | None = None
    ) -> list[tuple[Job, dict[str, Any] | None]]:
        """The UsageStore port: jobs that held GPUs since `since`, with their saved stats."""
        out: list[tuple[Job, dict[str, Any] | None]] = []
        for job in self.load_jobs():
            ran = job.started_at is not None or job.attained_gpu_s > 0
            if (
                ran
                and (job.ended_at is None or job.ended_at >= since)
                and (owner is None or job.owner == owner)
            ):
                with self.database.lock:
                    stats = copy.deepcopy(self.database.gpu_stats.get(job.id))
                out.append((job, stats))
        return out

    def save_gpu_stats(self, job_id: int, stats: dict[str, Any]) -> None:
        self._check_open()
        with self.database.lock:
            self.database.gpu_stats[job_id] = copy.deepcopy(stats)

    def close(self) -> None:
        self._closed = True
        with self.database.lock:
            if self.database.lock_holder is self:
                self.database.lock_holder = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")

    def _apply(self, inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        """All or nothing, as one SQL transaction: inserts first, then updates in order, each
        checked against what the write itself has staged so far; nothing lands on a failure."""
        self._check_open()
        with self.database.lock:
            jobs = self.database.jobs
            staged: dict[int, Job] = {}
            for job in inserts:
                if job.id in jobs or job.id in staged:
                    raise Conflict(f"job {job.id} already exists")
                staged[job.id] = job
            for job in updates:
                current = staged.get(job.id, jobs.get(job.id))
                if current is None or current.version != job.version - 1:
                    raise Conflict(f"job {job.id} changed meanwhile; try again")
                staged[job.id] = job
            jobs.update(staged)
