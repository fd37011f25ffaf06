"""Dependencies and array caps in the server: the jobs a dependency names, checked at submit and
looked up by the scheduler's gate; jobs that can never run ended through the journal when the
gate reports them (the live gate does not: as Slurm's default they stay pending with reason
DependencyNeverSatisfied, `services/scheduler/live.py`).

The decisions themselves are pure (`domain/dependency.py`, `scheduling/workflow_gate.py`), so
`gpuyard simulate` makes them with the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from gpuyard.domain.dependency import Ref, parse_dependency
from gpuyard.domain.errors import InvalidRequest, NotFound
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.workflow_gate import Named
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.ports import JobStore

log = logging.getLogger("gpuyard.controller")


def named(job: Job) -> Named:
    began = job.started_at if job.started_at is not None else job.ended_at
    if job.state is JobState.PENDING and job.restarts:  # requeued: it did start once
        began = job.attempts[0].started_at if job.attempts else job.submitted_at
    return Named(job.id, job.state, job.exit_code, began)


class NamedJobs:
    """The jobs a dependency's reference names, as they are now: the book's, or the store's for
    those the book no longer keeps. Called by the gate once per reference while jobs wait on
    it (inside a pass: the book answers without a database read for live jobs)."""

    def __init__(self, book: JobBook, store: JobStore) -> None:
        self._book = book
        self._store = store

    def __call__(self, ref: Ref) -> Sequence[Named]:
        if ref.task is not None:
            return [named(j) for j in self._tasks(ref.job_id) if j.array_task_id == ref.task]
        job = self._job(ref.job_id)
        if job is None:
            return []
        if job.array_job_id == job.id:  # an array's id: every task of it
            return [named(j) for j in self._tasks(job.id)]
        return [named(job)]

    def _job(self, job_id: int) -> Job | None:
        return self._book.get(job_id) or self._store.get_job(job_id)

    def _tasks(self, array_id: int) -> list[Job]:
        kept = self._book.array_tasks(array_id)
        if kept and self._whole(array_id, [j.id for j in kept]):
            return kept  # the book alone answers: no database read inside a pass
        by_id = {j.id: j for j in self._store.array_tasks(array_id)}
        by_id.update((j.id, j) for j in kept)  # the book is never older than the store
        return list(by_id.values())

    def _whole(self, array_id: int, ids: list[int]) -> bool:
        """Whether the book keeps every task: an array's ids are consecutive from its own, so
        none is missing when they are, and the id after the last is no task of it."""
        if ids[0] != array_id or ids[-1] - ids[0] + 1 != len(ids):
            return False
        after = ids[-1] + 1
        if after >= self._book.peek_next_id():
            return True
        following = self._book.get(after)
        return following is not None and following.array_job_id != array_id


class _Visible(Protocol):
    def get(self, job_id: int, actor: Principal) -> Job: ...
    def array_tasks(self, array_id: int, actor: Principal) -> list[Job]: ...


def check_dependency_of(jobs: _Visible, spec: JobSpec, actor: Principal) -> None:
    """`check_dependency` with the jobs `actor` may see (`JobReads.get`, `array_tasks`)."""
    if spec.dependency:
        check_dependency(
            spec, lambda i: jobs.get(i, actor), lambda a: jobs.array_tasks(a, actor)
        )  # fmt: skip


def check_dependency(
    spec: JobSpec, get: Callable[[int], Job], array_tasks: Callable[[int], Sequence[Job]]
) -> None:
    """Every job a submission's dependency names exists and the submitter may see it (`get`
    and `array_tasks` raise NotFound otherwise); else InvalidRequest (422) in one line."""
    if not spec.dependency:
        return
    for _, ref in parse_dependency(spec.dependency).refs():
        try:
            if ref.task is None:
                get(ref.job_id)
            elif not any(t.array_task_id == ref.task for t in array_tasks(ref.job_id)):
                raise NotFound("")
        except NotFound:
            raise InvalidRequest(
                f"--dependency names job {ref}, which does not exist (or is not yours to "
                "see): `gpuyard queue --all` lists the jobs",
                field="dependency",
            ) from None


def note_never_satisfied(never: Iterable[tuple[int, str]]) -> None:
    """The jobs the gate found can never run stay PENDING, as Slurm leaves them (without
    --kill-on-invalid-dep): the gate keeps them out with reason DependencyNeverSatisfied (it
    judges them so again after a restart), so their owner sees why and cancels them, or
    fixes what they wait for. The jobs behind one are judged as if it had been cancelled
    (the gate's, and `gpuyard simulate`'s, rule): `afterok` on it can never hold either,
    `afternotok`/`afterany` on it run. Said once in the log."""
    for job_id, why in never:
        log.info("job %s stays pending: its dependency can never be satisfied (%s)", job_id, why)
