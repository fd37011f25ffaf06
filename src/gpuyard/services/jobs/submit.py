"""Submitting: a job, a job array, either with an `Idempotency-Key`, and the dry run, all one
path: `Admission.admit` (every refusal, in its one order), new jobs with their ids and ports,
ONE durable write, then the journal queues them (the scheduler never starts a job it could
lose). A submit on the event loop awaits the write without a thread and looks at the file
system off the loop; the others block until the write lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from gpuyard.domain.errors import GpuyardError, InvalidRequest
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.duration_prediction import Prediction
from gpuyard.services.jobs.admission import Admission, Submission
from gpuyard.services.jobs.desk import JobDesk
from gpuyard.services.jobs.insert_batch import InsertBatcher
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.jobs.submit_keys import KEY_FIELD, SubmitKeys
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.launch.service_port import ServicePorts

T = TypeVar("T")
_UNACKNOWLEDGED = (
    "this submit is not acknowledged; if its write lands meanwhile the job is queued, and a "
    "retry with the same Idempotency-Key answers that job instead of queueing another"
)

# An array's one write of up to 10,000 tasks took 0.4-2.0 s on a loaded 2-core machine
# (docs/benchmarks.md, "Job arrays"): it may wait this many deadlines (10 s).
_ARRAY_DEADLINES = 5.0


@dataclass(frozen=True, slots=True)
class DryRun:
    """The answer to `submit --dry-run`: the job fits this server; it would start at
    `start_at`. None: not before jobs without a time limit end, or, with `not_before`, not
    before that time (the projection stopped there: a deep queue)."""

    now: float
    start_at: float | None
    not_before: float | None = None
    assumes_preemption: bool = False  # `start_at` holds only if the policy preempts as planned
    # Why the estimate is what it is: the resource it would wait for now (None: it fits now,
    # so only jobs queued ahead of it could delay it), and the jobs whose ends at their time
    # limits let it start at `start_at`.
    waits_for: str | None = None
    after_jobs: tuple[int, ...] = ()
    expected_run: Prediction | None = None  # how long it would run (its owner's history)


class JobSubmits:
    """The submit use cases. `preemptible_default`: whether a submission that does not say
    may be preempted (`--preemptible-default`); `default_mem_per_cpu_mib`: the memory a job
    that asks none gets per CPU (Slurm's DefMemPerCPU; 0: none), held and counted as --mem."""

    def __init__(
        self,
        desk: JobDesk,
        admission: Admission,
        reads: JobReads,
        *,
        identities: RunAsPolicy | None = None,
        preemptible_default: bool = False,
        default_mem_per_cpu_mib: int = 0,
    ) -> None:
        self._desk = desk
        self.default_mem_per_cpu_mib = default_mem_per_cpu_mib
        self._admission = admission
        self._reads = reads  # a replayed key's array, as the submitter sees it
        self._identities = identities
        self.preemptible_default = preemptible_default
        self._inserts = InsertBatcher(desk.store)  # the event loop's submits, one write per turn
        # Submits with an Idempotency-Key.
        self._keys = SubmitKeys(desk.book, desk.store, desk.store_calls)
        self._ports = ServicePorts(desk.book)  # `serve --port auto`: chosen at submit

    # -- one job --------------------------------------------------------------------------
    def submit(self, spec: JobSpec, actor: Principal, *, restart_of: int | None = None) -> Job:
        """Validate, store durably, then queue; returns only once the job cannot be lost.
        `restart_of`: the finished job this one runs again (`gpuyard restart`)."""
        return self._submit(Submission((spec,), actor), restart_of=restart_of)[0]

    async def submit_async(self, spec: JobSpec, actor: Principal) -> Job:
        """`submit` for the event loop: waits for the group commit without holding a thread;
        the file system is looked at off the loop (a stalled mount must not stall the API)."""
        return (await self._deadline(self._submit_async(Submission((spec,), actor))))[0]

    async def submit_once_async(
        self, spec: JobSpec, actor: Principal, idempotency_key: str
    ) -> tuple[Job, bool]:
        """`submit_async` with the request's `Idempotency-Key` (`submit_keys.py`): the job and
        whether an earlier request with this key made it (a replay: nothing new is queued,
        and the refusals of a new submit, a quota reached since or a workdir removed, do not
        apply). InvalidRequest if the key was used for another submission."""
        return await self._deadline(self._submit_once(Submission((spec,), actor), idempotency_key))

    # -- arrays ---------------------------------------------------------------------------
    def submit_array(
        self, specs: Sequence[JobSpec], indices: Sequence[int], actor: Principal
    ) -> list[Job]:
        """A job array (`--array`): one task (job) per index, all written in ONE durable write
        with consecutive ids; each task's `array_job_id` is the first task's id (Slurm's %A),
        its `array_task_id` its index (%a). `specs[i]` is task i's spec (a sweep's trials
        differ; `--array` repeats one). Every task counts against the quotas. Returns the
        tasks in index order, queued."""
        return self._submit(Submission(specs, actor, indices))

    async def submit_array_async(
        self, specs: Sequence[JobSpec], indices: Sequence[int], actor: Principal
    ) -> list[Job]:
        """`submit_array` for the event loop: the one write is awaited without a thread."""
        return await self._deadline(
            self._submit_async(Submission(specs, actor, indices)), times=_ARRAY_DEADLINES
        )

    async def submit_array_once_async(
        self, specs: Sequence[JobSpec], indices: Sequence[int], actor: Principal, key: str
    ) -> tuple[Job, bool]:
        """`submit_array_async` with an `Idempotency-Key`: the array's first task and whether
        an earlier request with this key made the array (a retry never makes a second one)."""
        return await self._deadline(
            self._submit_once(Submission(specs, actor, indices), key), times=_ARRAY_DEADLINES
        )

    # -- the dry run ----------------------------------------------------------------------
    def dry_run(self, spec: JobSpec, actor: Principal) -> DryRun:
        """Whether `spec` can ever run here and when it would start, without queueing it."""
        spec = self._with_default_mem(Submission((spec,), actor)).specs[0]
        self._admission.admit(Submission((spec,), actor))
        desk = self._desk
        probe_id = desk.book.peek_next_id()
        projection, waits_for = desk.scheduler.dry_run(spec, actor.user, probe_id)
        start = projection.starts[probe_id]
        expected = desk.scheduler.expected_run(actor.user, spec.gpus, spec.time_limit_s)
        later_than = None if start is not None or projection.complete else projection.reached_at
        return DryRun(
            now=desk.clock(), start_at=start, not_before=later_than,
            assumes_preemption=projection.estimates.assumes_preemption(probe_id),
            waits_for=waits_for, after_jobs=projection.freed_by.get(probe_id, ()),
            expected_run=expected,
        )  # fmt: skip

    def owner_home(self, actor: Principal) -> str | None:
        """Where a job that names no working directory runs: its owner's home on a server
        that runs jobs as their owners (the server's own home is not theirs to enter); None:
        the server's default (its home; a single-user box)."""
        if self._identities is None or not self._identities.switches_users:
            return None
        try:
            return self._identities.for_owner(actor.user).home
        except GpuyardError:
            return None  # refused by the admission's owner check in one line, at the submit

    # -- the one path -----------------------------------------------------------------------
    async def _deadline(self, submit: Awaitable[T], times: float = 1.0) -> T:
        """A submit on the event loop waits for the database up to the request's deadline
        (`times` it: an array), then is refused (503, Retry-After): not acknowledged, though a
        write already handed to the store goes on (shielded below) and its jobs are queued
        when it lands."""
        return await self._desk.store_calls.within(submit, _UNACKNOWLEDGED, times=times)

    def _with_default_mem(self, sub: Submission) -> Submission:
        """Each spec without --mem given the server's memory per CPU for its CPUs (at most
        what the largest machine has, per machine), as Slurm applies DefMemPerCPU at submit:
        its cgroup holds it there and the scheduler counts it."""
        per_cpu = self.default_mem_per_cpu_mib
        if not per_cpu or all(spec.mem_mib for spec in sub.specs):
            return sub
        most = max(node.mem_mib for node in self._desk.inventory.nodes)
        given: dict[int, JobSpec] = {}
        for spec in sub.specs:
            if id(spec) not in given:
                mem = min(per_cpu * spec.cpus, most * spec.nodes)
                given[id(spec)] = spec if spec.mem_mib else replace(spec, mem_mib=mem)
        return Submission([given[id(s)] for s in sub.specs], sub.actor, sub.indices)

    def _submit(self, sub: Submission, *, restart_of: int | None = None) -> list[Job]:
        sub = self._with_default_mem(sub)
        self._admission.admit(sub)
        jobs = self._new_jobs(sub, restart_of=restart_of)
        self._desk.store.write(jobs, [])
        return self._queue(jobs)

    async def _submit_async(self, sub: Submission, key: str | None = None) -> list[Job]:
        """`key`: recorded on every job (a retry finds the first); only `_submit_once` passes
        one (it makes sure no other job has it)."""
        sub = self._with_default_mem(sub)
        for probe in self._admission.admit(sub, defer_dirs=True):
            await asyncio.to_thread(self._admission.check_launch, probe)
        jobs = self._new_jobs(sub, key=key)
        if sub.indices is None:  # single jobs share a group commit per loop turn
            written = self._inserts.insert_future(jobs[0])
        else:
            written = asyncio.wrap_future(self._desk.store.write_future(jobs, []))
        # Queued by the write's own callback, before this request resumes, and even if it
        # was cancelled (its client gone) while the write was under way: else the jobs would
        # sit in the database unscheduled until the next restart loaded them. The shield is
        # over the future (no task of its own, as a coroutine's shield would take).
        written.add_done_callback(lambda done: self._queue_written(done, jobs))
        await asyncio.shield(written)
        return jobs

    def _queue_written(self, written: asyncio.Future[None], jobs: list[Job]) -> None:
        if not written.cancelled() and written.exception() is None:
            self._queue(jobs)

    async def _submit_once(self, sub: Submission, key: str) -> tuple[Job, bool]:
        sub = self._with_default_mem(sub)  # a retry's spec compared as the first was kept
        user = sub.actor.user
        while True:
            found = await self._keys.claim(user, key, sub.specs[0])
            if found is None:
                break
            if isinstance(found, Job):
                return self._same_shape(found, sub), True
            # Shielded: a request given up (its deadline) must not cancel the claim's future,
            # which the submit holding the key settles.
            made = await asyncio.shield(asyncio.wrap_future(found))
            if made is not None:
                return self._same_shape(made, sub), True
            # The submit holding the key wrote nothing (refused, or its write failed): claim
            # it again, and be refused or queued on this request's own account.
        # Shielded: a request cancelled while its write is under way must still settle its
        # claim when the write lands, or a retry could find neither claim nor job and insert.
        return await asyncio.shield(self._submit_claimed(sub, key)), False

    async def _submit_claimed(self, sub: Submission, key: str) -> Job:
        queued: Job | None = None
        try:
            queued = (await self._submit_async(sub, key))[0]
            return queued
        finally:
            self._keys.settle(sub.actor.user, key, queued)

    def _same_shape(self, made: Job, sub: Submission) -> Job:
        """A retry's key found `made`: it must be what the retry asks for, a plain job or an
        array of the same task indices (the spec alone, which the keys compare, does not say)."""
        if sub.indices is None:
            same = made.array_job_id is None
        else:
            same = made.array_job_id is not None and sorted(
                task.array_task_id or 0
                for task in self._reads.array_tasks(made.array_job_id, sub.actor)
            ) == sorted(sub.indices)
        if not same:
            raise InvalidRequest(
                f"this {KEY_FIELD} was already used for another submission (job {made.id}); "
                "send a new key with a new job",
                field=KEY_FIELD,
            )
        return made

    def _new_jobs(
        self, sub: Submission, *, restart_of: int | None = None, key: str | None = None
    ) -> list[Job]:
        """Pending jobs with new ids, their services' ports chosen: one, or an array's tasks
        with consecutive ids, each naming the first (the array's id) and its index."""
        book, owner = self._desk.book, sub.actor.user
        if sub.indices is None:
            return [Job(
                id=book.allocate_id(), spec=self._ports.assign(sub.specs[0]), owner=owner,
                state=JobState.PENDING, submitted_at=self._desk.clock(), restart_of=restart_of,
                idempotency_key=key, held=sub.specs[0].hold and restart_of is None,
            )]  # fmt: skip
        first = book.allocate_ids(len(sub.indices))
        now = self._desk.clock()
        specs = self._ports.assign_many(sub.specs)  # each service task its own port
        return [
            Job(
                id=first + i,
                spec=spec,
                owner=owner,
                state=JobState.PENDING,
                submitted_at=now,
                idempotency_key=key,
                array_job_id=first,
                array_task_id=index,
                held=spec.hold,
            )
            for i, (spec, index) in enumerate(zip(specs, sub.indices, strict=True))
        ]

    def _queue(self, jobs: list[Job]) -> list[Job]:
        """Only durable jobs enter the queue: the scheduler never starts a job it could lose."""
        for job in jobs:
            self._desk.journal.inserted(job, job.submitted_at)
        self._desk.wake()
        return jobs
