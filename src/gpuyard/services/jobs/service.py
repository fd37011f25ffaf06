"""Use cases behind the API: submit, cancel, read jobs and GPUs."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from gpuyard.domain.errors import (
    Conflict,
    Forbidden,
    GpuyardError,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
)
from gpuyard.domain.gpu_types import check_gpu_type
from gpuyard.domain.job import Drain, Gpu, Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_size_mib
from gpuyard.scheduling.projection import StartEstimates
from gpuyard.services.access.quotas import LimitService
from gpuyard.services.jobs import verbs as job_verbs
from gpuyard.services.jobs.book import jobs_by_gpu
from gpuyard.services.jobs.dependencies import check_dependency_of
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.jobs.files import open_job_file
from gpuyard.services.jobs.insert_batch import InsertBatcher
from gpuyard.services.jobs.journal import Journal
from gpuyard.services.jobs.stops import StopRequests
from gpuyard.services.jobs.submit_keys import KEY_FIELD, SubmitKeys
from gpuyard.services.launch.plan import check_container
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.launch.service_check import ServiceHealth
from gpuyard.services.launch.service_port import ServicePorts
from gpuyard.services.machine.gpu_mem import PeakHistory
from gpuyard.services.machine.idle import IdleWatch
from gpuyard.services.machine.telemetry import (
    EMPTY_SNAPSHOT,
    GpuMonitor,
    GpuTelemetry,
    JobGpuStats,
    TelemetrySnapshot,
)
from gpuyard.services.ports import JobStore
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

# What admins do to other users' jobs, kept apart in the server log.
audit = logging.getLogger("gpuyard.audit")


@dataclass(frozen=True, slots=True)
class GpuHolding:
    """One GPU, the jobs holding it (several on a GPU shared with --gpu-mem), its live
    telemetry (None: not sampled) and, when shared, the GPU memory still free to share."""

    gpu: Gpu
    jobs: tuple[Job, ...] = ()
    telemetry: GpuTelemetry | None = None
    shared_free_mib: int | None = None

    @property
    def job(self) -> Job | None:
        return self.jobs[0] if self.jobs else None


@dataclass(frozen=True, slots=True)
class DryRun:
    """The answer to `submit --dry-run`: the job fits this server; it would start at
    `start_at`. None: not before jobs without a time limit end, or, with `not_before`, not
    before that time (the projection stopped there: a deep queue)."""

    now: float
    start_at: float | None
    not_before: float | None = None
    assumes_preemption: bool = False  # `start_at` holds only if the policy preempts as planned


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Part of a job's log: `data` from `offset`; `next_offset` to ask for the rest."""

    data: bytes
    offset: int
    next_offset: int
    state: JobState


@dataclass(frozen=True, slots=True)
class Cleaned:
    """What `clean` did: how many finished jobs it forgot, and those whose folder could not
    be removed (their records are gone all the same)."""

    jobs: int
    folders_kept: tuple[int, ...] = ()


# An array's cancel: tasks cancelled per durable write (and per hold of the journal's lock).
_CANCEL_CHUNK = 1_000
# Listing history: a page is at most this many jobs (the store pages through the rest).
MAX_PAGE = 10_000
MAX_JOB_ID = 2**63 - 1  # the store's integers: a larger id in a request is no job's
# A working directory seen to exist this recently is not looked at again by a submit.
_SEEN_DIR_S = 5.0
_SEEN_DIRS = 1_000


class JobService:
    """The server's use cases; the API is a thin layer over these. Every use case is called
    with the acting Principal, and what it may see or change is decided here."""

    def __init__(
        self,
        journal: Journal,
        store: JobStore,
        scheduler: LiveScheduler,
        drains: DrainService,
        stops: StopRequests,
        inventory: Inventory,
        *,
        log_path: Callable[[int], str],
        remove_files: Callable[[int], None] = lambda job_id: None,
        wake: Callable[[], None],
        clock: Callable[[], float] = time.time,
        monitor: GpuMonitor | None = None,
        idle: IdleWatch | None = None,
        peaks: PeakHistory | None = None,
        preemptible_default: bool = False,
        identities: RunAsPolicy | None = None,
        limits: LimitService | None = None,
    ) -> None:
        self.journal = journal
        self._identities = identities  # refuses at submit an owner whose job could never run
        # Whether a submission that does not say may be preempted (`--preemptible-default`).
        self.preemptible_default = preemptible_default
        self.book = journal.book
        self.store = store
        self._inserts = InsertBatcher(store)  # the event loop's submits, one write per turn
        self._keys = SubmitKeys(self.book, store)  # submits with an Idempotency-Key
        self.scheduler = scheduler
        self._drains = drains
        self._stops = stops
        self.inventory = inventory
        self._log_path = log_path
        self._remove_files = remove_files
        self._wake = wake
        self._clock = clock
        self.monitor = monitor
        self.idle = idle
        self.peaks = peaks or PeakHistory()  # earlier runs' GPU memory, for --gpu-mem advice
        self.service_ports = ServicePorts(self.book)  # `serve --port auto`: chosen at submit
        # Services' health checks (`serve --health`), read by JobOut; None: not checked.
        self.service_health: ServiceHealth | None = None
        self._seen_dirs: dict[str, float] = {}  # workdir -> when it last existed (monotonic)
        # Quotas, shares and usage (`access/quotas.py`); None: a store without them, no limits.
        self.limits = limits

    # -- submit ---------------------------------------------------------------------------
    def submit(self, spec: JobSpec, actor: Principal, *, restart_of: int | None = None) -> Job:
        """Validate, store durably, then queue; returns only once the job cannot be lost.
        `restart_of`: the finished job this one runs again (`gpuyard restart`)."""
        self._check_fits(spec)
        self._check_owner(actor)
        self._check_quota(spec, actor)
        check_dependency_of(self, spec, actor)
        self._check_workdir(spec)
        job = self._new_job(spec, actor, restart_of)
        self.store.write([job], [])
        return self._queue(job)

    async def submit_async(
        self, spec: JobSpec, actor: Principal, *, idempotency_key: str | None = None
    ) -> Job:
        """`submit` for the event loop: waits for the group commit without holding a thread;
        the file system is looked at off the loop (a stalled mount must not stall the API).
        `idempotency_key`: recorded on the job; only `submit_once_async` may pass one (it
        makes sure no other job has it)."""
        self._check_fits(spec)
        self._check_owner(actor)
        self._check_quota(spec, actor)
        check_dependency_of(self, spec, actor)
        if not self._workdir_seen_recently(spec.workdir):
            await asyncio.to_thread(self._check_workdir, spec)
        job = self._new_job(spec, actor, idempotency_key=idempotency_key)
        # Shielded: a request cancelled (its client gone) while the write is under way still
        # queues the job once it is on disk; else it would sit in the database unscheduled
        # until the next restart loaded it.
        return await asyncio.shield(self._insert_and_queue(job))

    async def _insert_and_queue(self, job: Job) -> Job:
        await self._inserts.insert(job)
        return self._queue(job)

    async def submit_once_async(
        self, spec: JobSpec, actor: Principal, idempotency_key: str
    ) -> tuple[Job, bool]:
        """`submit_async` with the request's `Idempotency-Key` (`submit_keys.py`): the job and
        whether an earlier request with this key made it (a replay: nothing new is queued,
        and the refusals of a new submit, a quota reached since or a workdir removed, do not
        apply). InvalidRequest if the key was used for another submission."""
        while True:
            found = self._keys.claim(actor.user, idempotency_key, spec)
            if found is None:
                break
            if isinstance(found, Job):
                return self._same_shape(found, None, actor), True
            made = await asyncio.wrap_future(found)
            if made is not None:
                return self._same_shape(made, None, actor), True
            # The submit holding the key wrote nothing (refused, or its write failed): claim
            # it again, and be refused or queued on this request's own account.
        # Shielded: a request cancelled while its write is under way must still settle its
        # claim when the write lands, or a retry could find neither claim nor job and insert.
        job = await asyncio.shield(self._submit_claimed(spec, actor, idempotency_key))
        return job, False

    async def _submit_claimed(
        self,
        spec: JobSpec,
        actor: Principal,
        key: str,
        make: Callable[[], Awaitable[Job]] | None = None,
    ) -> Job:
        queued: Job | None = None
        try:
            if make is None:
                queued = await self.submit_async(spec, actor, idempotency_key=key)
            else:
                queued = await make()
            return queued
        finally:
            self._keys.settle(actor.user, key, queued)

    # -- arrays ---------------------------------------------------------------------------
    def submit_array(
        self, specs: Sequence[JobSpec], indices: Sequence[int], actor: Principal
    ) -> list[Job]:
        """A job array (`--array`): one task (job) per index, all written in ONE durable write
        with consecutive ids; each task's `array_job_id` is the first task's id (Slurm's %A),
        its `array_task_id` its index (%a). `specs[i]` is task i's spec (a sweep's trials
        differ; `--array` repeats one). Every task counts against the quotas. Returns the
        tasks in index order, queued."""
        self._check_array(specs, indices, actor)
        for workdir in {spec.workdir for spec in specs}:
            self._check_workdir_of(workdir)
        tasks = self._new_tasks(specs, indices, actor)
        self.store.write(tasks, [])
        return self._queue_tasks(tasks)

    async def submit_array_async(
        self,
        specs: Sequence[JobSpec],
        indices: Sequence[int],
        actor: Principal,
        *,
        idempotency_key: str | None = None,
    ) -> list[Job]:
        """`submit_array` for the event loop: the one write is awaited without a thread.
        `idempotency_key`: recorded on every task (a retry finds the first one); only
        `submit_array_once_async` may pass one."""
        self._check_array(specs, indices, actor)
        for workdir in {spec.workdir for spec in specs}:
            if not self._workdir_seen_recently(workdir):
                await asyncio.to_thread(self._check_workdir_of, workdir)
        tasks = self._new_tasks(specs, indices, actor, idempotency_key)
        return await asyncio.shield(self._write_and_queue_tasks(tasks))

    async def submit_array_once_async(
        self, specs: Sequence[JobSpec], indices: Sequence[int], actor: Principal, key: str
    ) -> tuple[Job, bool]:
        """`submit_array_async` with an `Idempotency-Key`: the array's first task and whether
        an earlier request with this key made the array (a retry never makes a second one)."""
        while True:
            found = self._keys.claim(actor.user, key, specs[0])
            if found is None:
                break
            if isinstance(found, Job):
                return self._same_shape(found, indices, actor), True
            made = await asyncio.wrap_future(found)
            if made is not None:
                return self._same_shape(made, indices, actor), True

        async def make() -> Job:
            tasks = await self.submit_array_async(specs, indices, actor, idempotency_key=key)
            return tasks[0]

        job = await asyncio.shield(self._submit_claimed(specs[0], actor, key, make))
        return job, False

    def _same_shape(self, made: Job, indices: Sequence[int] | None, actor: Principal) -> Job:
        """A retry's key found `made`: it must be what the retry asks for, a plain job or an
        array of the same task indices (the spec alone, which the keys compare, does not say)."""
        if indices is None:
            same = made.array_job_id is None
        else:
            same = made.array_job_id is not None and sorted(
                task.array_task_id or 0 for task in self.array_tasks(made.array_job_id, actor)
            ) == sorted(indices)
        if not same:
            raise InvalidRequest(
                f"this {KEY_FIELD} was already used for another submission (job {made.id}); "
                "send a new key with a new job",
                field=KEY_FIELD,
            )
        return made

    async def _write_and_queue_tasks(self, tasks: list[Job]) -> list[Job]:
        await asyncio.wrap_future(self.store.write_future(tasks, []))
        return self._queue_tasks(tasks)

    def _check_array(
        self, specs: Sequence[JobSpec], indices: Sequence[int], actor: Principal
    ) -> None:
        if not indices or len(specs) != len(indices):
            raise InvalidRequest(
                f"an array needs one spec per task index ({len(specs)} specs, "
                f"{len(indices)} indices)",
                field="array",
            )
        if len(set(indices)) != len(indices):
            raise InvalidRequest("an array's task indices must differ", field="array")
        distinct = list({id(spec): spec for spec in specs}.values())
        for spec in distinct:
            self._check_fits(spec)
        self._check_owner(actor)
        # The quotas look at a spec's GPUs and time limit only: each pair once.
        for spec in {(s.gpus, s.time_limit_s): s for s in distinct}.values():
            self._check_quota(spec, actor)
        self._check_pending_room(len(indices), actor)
        check_dependency_of(self, specs[0], actor)  # an array's tasks share one

    def _check_pending_room(self, count: int, actor: Principal) -> None:
        """Every task is a pending job: an array that would take its owner (or team) past the
        most pending jobs allowed is refused whole, in one line."""
        rules = self.scheduler.quota_rules
        if not rules.limited(actor.user):
            return
        mine_limits, team, team_limits = rules.limits_of(actor.user)
        mine = theirs = 0
        for job in self.book.jobs(include_finished=False):
            if job.state is JobState.PENDING:
                mine += job.owner == actor.user
                theirs += team is not None and rules.team_of.get(job.owner) == team
        for who, lim, pending in ((f"user {actor.user}", mine_limits, mine),
                                  (f"team {team}", team_limits, theirs)):  # fmt: skip
            if (
                lim is not None
                and lim.max_pending is not None
                and pending + count > lim.max_pending
            ):
                raise QuotaExceeded(
                    f"the array's {count} tasks would give {who} {pending + count} pending "
                    f"jobs, the most allowed is {lim.max_pending}; submit fewer tasks or wait "
                    "for some jobs to start"
                )

    def _new_tasks(
        self,
        specs: Sequence[JobSpec],
        indices: Sequence[int],
        actor: Principal,
        idempotency_key: str | None = None,
    ) -> list[Job]:
        first = self.book.allocate_ids(len(indices))
        now = self._clock()
        specs = self.service_ports.assign_many(specs)  # each service task its own port
        return [
            Job(
                id=first + i,
                spec=spec,
                owner=actor.user,
                state=JobState.PENDING,
                submitted_at=now,
                idempotency_key=idempotency_key,
                array_job_id=first,
                array_task_id=index,
            )
            for i, (spec, index) in enumerate(zip(specs, indices, strict=True))
        ]

    def _queue_tasks(self, tasks: list[Job]) -> list[Job]:
        for task in tasks:
            self.journal.inserted(task, task.submitted_at)
        self._wake()
        return tasks

    def array_tasks(self, array_id: int, actor: Principal) -> list[Job]:
        """An array's tasks by index, as the actor may see them: the book's (pending, running,
        recently finished), the store's for those the book evicted. NotFound for no such
        array, or another user's."""
        kept = self.book.array_tasks(array_id)
        first = self.book.get(array_id)
        # Every task kept and none evicted: the book alone answers (no database read).
        stored: list[Job] = []
        if not kept or first is None or _maybe_evicted(kept):
            stored = self.store.array_tasks(array_id) if 0 < array_id <= MAX_JOB_ID else []
        by_id = {job.id: job for job in stored}
        by_id.update((job.id, job) for job in kept)  # the book is never older than the store
        tasks = sorted(by_id.values(), key=lambda j: (j.array_task_id or 0, j.id))
        if not tasks or not actor.may_see(tasks[0].owner):
            raise NotFound(
                f"array {array_id} not found: `gpuyard queue --all` lists every job (an "
                "array's id is its first task's)"
            )
        return tasks

    def cancel_array(self, array_id: int, actor: Principal) -> list[Job]:
        """Cancel every pending task of the array at once (one durable write) and ask every
        running one to stop; ended tasks stay as they are. Returns the tasks by index."""
        tasks = self.array_tasks(array_id, actor)
        owner = tasks[0].owner
        if not (actor.is_admin or owner == actor.user):
            raise Forbidden(f"array {array_id} is {owner}'s; only they or an admin may cancel it")
        now = self._clock()
        active = [t for t in tasks if not t.state.is_terminal]
        # A write per chunk, the journal's lock released between them: a pass (which takes
        # it) never waits for all of a 10,000-task array. A task started meanwhile is RUNNING
        # by the time the stops below look at it.
        for at in range(0, len(active), _CANCEL_CHUNK):
            with self.journal.transaction() as tx:
                cancelled = []
                for task in active[at : at + _CANCEL_CHUNK]:
                    current = tx.current(task.id)
                    if current is not None and current.state is JobState.PENDING:
                        cancelled.append(
                            current.transition(
                                JobState.CANCELLED, ended_at=now, reason="Cancelled by user"
                            )
                        )
                tx.commit(cancelled, now)
        for task in active:
            current = self.book.get(task.id)
            if current is not None and current.state is JobState.RUNNING:
                self._stops.request(task.id, JobState.CANCELLED)
        if owner != actor.user:
            audit.warning("admin %s cancelled array %s of %s", actor.user, array_id, owner)
        self._wake()
        return [self.book.get(task.id) or task for task in tasks]

    def owner_home(self, actor: Principal) -> str | None:
        """Where a job that names no working directory runs: its owner's home on a server
        that runs jobs as their owners (the server's own home is not theirs to enter); None:
        the server's default (its home; a single-user box)."""
        if self._identities is None or not self._identities.switches_users:
            return None
        try:
            return self._identities.for_owner(actor.user).home
        except GpuyardError:
            return None  # refused by `_check_owner` in one line, at the submit itself

    def _check_owner(self, actor: Principal) -> None:
        """A root server runs each job as its owner: an owner with no Unix user, or one that
        would run as root when that is not allowed, is refused now rather than at launch."""
        if self._identities is not None:
            self._identities.check(actor.user)

    def _check_quota(self, spec: JobSpec, actor: Principal) -> None:
        """A job larger than a limit will ever let run, or one past the most jobs pending, is
        refused now in one line (`scheduling/quotas.py`); one over a running limit is queued
        and waits with the limit's reason. Costs nothing for users no limit applies to."""
        if self.limits is not None:
            self.limits.note_team(actor.user, actor.team)
        rules = self.scheduler.quota_rules
        if not rules.limited(actor.user):
            return
        team = rules.team_of.get(actor.user)
        mine = theirs = 0
        for job in self.book.jobs(include_finished=False):
            if job.state is JobState.PENDING:
                mine += job.owner == actor.user
                theirs += team is not None and rules.team_of.get(job.owner) == team
        why = rules.submit_refusal(actor.user, spec.gpus, spec.time_limit_s, mine, theirs)
        if why is not None:
            raise QuotaExceeded(why)

    def _new_job(
        self,
        spec: JobSpec,
        actor: Principal,
        restart_of: int | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Job:
        return Job(
            id=self.book.allocate_id(),
            spec=self.service_ports.assign(spec),
            owner=actor.user,
            state=JobState.PENDING,
            submitted_at=self._clock(),
            restart_of=restart_of,
            idempotency_key=idempotency_key,
        )

    def _queue(self, job: Job) -> Job:
        """Only a durable job enters the queue: the scheduler never starts a job it could lose."""
        self.journal.inserted(job, job.submitted_at)
        self._wake()
        return job

    def hint(self, spec: JobSpec, actor: Principal) -> str | None:
        """Advice for a submission: a --gpu-mem from the peaks of earlier runs of that name."""
        return self.peaks.hint(spec, actor.user, self.inventory.gpu_mem_mib())

    def dry_run(self, spec: JobSpec, actor: Principal) -> DryRun:
        """Whether `spec` can ever run here and when it would start, without queueing it."""
        self._check_fits(spec)
        self._check_owner(actor)
        self._check_quota(spec, actor)
        check_dependency_of(self, spec, actor)
        self._check_workdir(spec)
        probe_id = self.book.peek_next_id()
        projection = self.scheduler.dry_run(spec, actor.user, probe_id)
        start = projection.starts[probe_id]
        later_than = None if start is not None or projection.complete else projection.reached_at
        return DryRun(
            now=self._clock(), start_at=start, not_before=later_than,
            assumes_preemption=projection.estimates.assumes_preemption(probe_id),
        )  # fmt: skip

    # -- reads ----------------------------------------------------------------------------
    def get(self, job_id: int, actor: Principal) -> Job:
        """A job the actor may see (another user's job is 'not found', as if it did not exist)."""
        # An id no job can have (past SQLite's 64-bit integers) is simply not found.
        job = self.book.get(job_id) or (
            self.store.get_job(job_id) if 0 < job_id <= MAX_JOB_ID else None
        )
        if job is None or not actor.may_see(job.owner):
            raise NotFound(f"job {job_id} not found: `gpuyard queue --all` lists every job")
        return job

    def list_jobs(
        self,
        actor: Principal,
        *,
        include_finished: bool,
        limit: int | None = None,
        before_id: int | None = None,
        since: float | None = None,
        states: Collection[JobState] | None = None,
        owner: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """Pending and running jobs from memory; with `include_finished`, a page of history
        from the store (newest first by id up to `limit`, before `before_id`), returned in id
        order. Filters by submit time, state, owner and name."""
        if not include_finished:
            jobs = self.book.jobs(include_finished=False)
            return [j for j in jobs if _matches(j, since, states, owner, name)][:limit]
        if before_id is not None:
            before_id = min(max(before_id, 0), MAX_JOB_ID)
        page = self.store.page_jobs(
            limit=min(limit or MAX_PAGE, MAX_PAGE), before_id=before_id, since=since,
            states=states, owner=owner, name=name,
        )  # fmt: skip
        # The book is never older than the store (written first): prefer its version.
        return sorted((self.book.get(j.id) or j for j in page), key=lambda j: j.id)

    def read_log(
        self, job_id: int, actor: Principal, offset: int = 0, limit: int | None = None
    ) -> LogChunk:
        """Part of a job's output, from `offset` (past the end: nothing, not an error)."""
        with self.open_log(job_id, actor, offset) as log:
            data = log.read(limit if limit is not None else log.end - log.start)
            return LogChunk(data, log.start, log.start + len(data), log.state)

    def open_log(
        self, job_id: int, actor: Principal, offset: int = 0, tail: int | None = None
    ) -> LogReader:
        """A job's log opened for streaming, from `offset` (clamped to its size) or, with
        `tail`, from its last `tail` lines, up to its size now. A job that never ran has an
        empty log; an ended job's log deleted, or replaced by something that is not a file, is
        an error that says so."""
        job = self.get(job_id, actor)
        path = self._log_path(job_id)
        try:
            f = open_job_file(path)  # never through a link the job planted; LogReader owns it
        except FileNotFoundError:
            # Created by the job's supervisor, first thing: until a launched job has ended it
            # may not be there yet.
            if job.pid is None or not job.state.is_terminal:
                return LogReader(None, 0, 0, job.state)
            raise NotFound(
                f"job {job_id}'s log {path} is not on the server any more (deleted?), so its "
                "output is lost"
            ) from None
        except OSError as exc:
            raise Conflict(_unreadable_log(job_id, path, exc)) from None
        try:
            size = os.fstat(f.fileno()).st_size
            start = min(offset, size)
            if tail is not None:
                start = max(start, _tail_start(f, size, tail))
            f.seek(start)
        except OSError as exc:
            f.close()
            raise Conflict(_unreadable_log(job_id, path, exc)) from None
        return LogReader(f, start, size, job.state)

    def counts(self) -> tuple[int, int]:
        """How many jobs are pending and running now (for /metrics)."""
        jobs = self.book.jobs(include_finished=False)
        pending = sum(1 for job in jobs if job.state is JobState.PENDING)
        return pending, len(jobs) - pending

    def reason(self, job: Job) -> str:
        """Why a job is in its state: the scheduler's reason for pending jobs."""
        if job.state is JobState.PENDING:
            return self.scheduler.reason_for(job.id)
        return job.reason

    def estimated_starts(self, wanted: Collection[int] = ()) -> dict[int, float | None]:
        """Projected start of each pending job: running and started jobs use their whole time
        limit (what Slurm's `squeue --start` assumes); None where no estimate is possible."""
        return self.scheduler.estimated_starts(wanted)

    def start_estimates(self, wanted: Collection[int] = ()) -> StartEstimates:
        """`estimated_starts`, with which of them hold only if the policy preempts a running
        job as it plans to (a preemptible job without a time limit is such a job's only end)."""
        return self.scheduler.start_estimates(wanted)

    def log_path(self, job_id: int) -> str:
        return self._log_path(job_id)

    # -- changes --------------------------------------------------------------------------
    def cancel(self, job_id: int, actor: Principal, stop_signal: int | None = None) -> Job:
        """Cancel a pending job at once; ask a running one to stop (its stop signal, grace,
        KILL). `stop_signal` (`cancel --signal`): sent instead of the job's `--signal`."""
        job = self.get(job_id, actor)
        if not (actor.is_admin or job.owner == actor.user):
            raise Forbidden(f"job {job_id} is {job.owner}'s; only they or an admin may cancel it")
        if job.state.is_terminal:
            raise Conflict(
                f"job {job_id} already ended ({job.state.value}); there is nothing to cancel"
            )
        now = self._clock()

        def cancel_pending(current: Job) -> Job | None:
            if current.state is not JobState.PENDING:
                return None
            return current.transition(JobState.CANCELLED, ended_at=now, reason="Cancelled by user")

        current = self.journal.change(job_id, cancel_pending, now) or job
        if current.state is JobState.RUNNING:
            asked = self._stops.request(job_id, JobState.CANCELLED, stop_signal=stop_signal)
            current = asked or current
        if job.owner != actor.user:  # an admin acting on someone's job: on the record
            audit.warning("admin %s cancelled job %s of %s", actor.user, job_id, job.owner)
        self._wake()
        return current

    # -- hold, release, requeue, update, restart (services/jobs/verbs.py) ------------------
    def hold(self, job_id: int, actor: Principal) -> Job:
        return job_verbs.hold(self, job_id, actor)

    def release(self, job_id: int, actor: Principal) -> Job:
        return job_verbs.release(self, job_id, actor)

    def requeue(self, job_id: int, actor: Principal) -> Job:
        return job_verbs.requeue(self, job_id, actor)

    def update(
        self,
        job_id: int,
        actor: Principal,
        *,
        time_limit_s: int | None = None,
        priority: int | None = None,
        gpus: int | None = None,
    ) -> Job:
        return job_verbs.update(
            self, job_id, actor, time_limit_s=time_limit_s, priority=priority, gpus=gpus
        )

    def restart(self, job_id: int, actor: Principal) -> Job:
        return job_verbs.restart(self, job_id, actor)

    @property
    def stops(self) -> StopRequests:
        return self._stops

    def wake(self) -> None:
        """Wake the controller: a change for the scheduler's next pass."""
        self._wake()

    def now(self) -> float:
        return self._clock()

    def check_fits(self, spec: JobSpec) -> None:
        """Whether `spec` can ever run on this server (InvalidRequest naming what is short)."""
        self._check_fits(spec)

    def clean(
        self, actor: Principal, *, older_than_s: float | None = None, owner: str | None = None
    ) -> Cleaned:
        """Forget finished jobs, their records and folders (pueue's `clean`): that ended more
        than `older_than_s` ago (None: any), of `owner`. An admin cleans everyone's (or
        `owner`'s), a user only their own. Pending and running jobs are never touched: the
        store deletes only finished rows, and the book drops only finished jobs."""
        if not actor.is_admin:
            if owner is not None and owner != actor.user:
                raise Forbidden(
                    f"only an admin may clean {owner}'s jobs; `gpuyard clean` cleans your own"
                )
            owner = actor.user
        before = None if older_than_s is None else self._clock() - older_than_s
        ids = self.store.delete_finished(ended_before=before, owner=owner)
        # Under the journal's lock: a job that ended just before the delete is in the book by
        # now (the journal writes, then puts, under this lock), so it is dropped too.
        with self.journal.lock:
            self.book.forget(ids)
        kept: list[int] = []
        for job_id in ids:
            try:
                self._remove_files(job_id)
            except OSError:
                kept.append(job_id)
        return Cleaned(len(ids), tuple(kept))

    # -- GPUs -----------------------------------------------------------------------------
    def gpus(self) -> list[GpuHolding]:
        holders = jobs_by_gpu(self.book.running())
        sampled = self.telemetry().gpus
        shared = self.scheduler.shared_gpus()
        return [
            GpuHolding(
                gpu,
                tuple(holders.get(gpu.index, ())),
                sampled.get(gpu.index) if gpu.detected else None,
                shared.get(gpu.index),
            )
            for gpu in self.inventory.gpus
        ]

    def drain(
        self, gpu_index: int, reason: str, actor: Principal, *, now: bool = False
    ) -> list[Job]:
        """Take a GPU out of service: no new job goes there. Returns the jobs on it: left to
        finish (Slurm's DRAIN), or with `now` stopped and requeued (not failed)."""
        _require_admin(actor, f"drain GPU {gpu_index}")
        stopped = self._drains.drain(gpu_index, reason or "drained by an admin", "admin", now=now)
        if now:
            return stopped
        return [job for job in self.book.running() if gpu_index in job.gpus]

    def resume(self, gpu_index: int, actor: Principal) -> None:
        """Put a drained GPU back in service."""
        _require_admin(actor, f"resume GPU {gpu_index}")
        self._drains.resume(gpu_index)

    def drains(self) -> dict[int, Drain]:
        return self._drains.current()

    def hot_gpus(self) -> dict[int, str]:
        """GPUs placed last because they are too hot or throttled, and why."""
        return dict(self.scheduler.hot)

    def telemetry(self) -> TelemetrySnapshot:
        """The latest GPU sample (empty without NVML or before the first sample)."""
        return self.monitor.snapshot if self.monitor is not None else EMPTY_SNAPSHOT

    def idle_since(self, job: Job) -> float | None:
        """When a running job's GPUs went idle, once it has been flagged (None: not idle)."""
        if self.idle is None or job.state is not JobState.RUNNING:
            return None
        return self.idle.idle_since(job.id)

    def gpu_stats(self, job_id: int) -> JobGpuStats | None:
        """What the job did with its GPUs while sampled; None if it never was."""
        return self.monitor.job_stats(job_id) if self.monitor is not None else None

    def _check_workdir(self, spec: JobSpec) -> None:
        self._check_workdir_of(spec.workdir)

    def _check_workdir_of(self, workdir: str) -> None:
        if not os.path.isdir(workdir):
            raise InvalidRequest(
                f"workdir {workdir!r} does not exist on the server; create it or pass --workdir",
                field="workdir",
            )
        self._seen_dirs[workdir] = time.monotonic()
        if len(self._seen_dirs) > _SEEN_DIRS:
            self._seen_dirs.clear()

    def _workdir_seen_recently(self, workdir: str) -> bool:
        """A burst of submits from one directory looks at the file system once (a thread hop
        each would cost a fifth of a submit's CPU)."""
        seen = self._seen_dirs.get(workdir)
        return seen is not None and time.monotonic() - seen < _SEEN_DIR_S

    def _check_fits(self, spec: JobSpec) -> None:
        inv = self.inventory
        if spec.gpus > len(inv.gpus):
            raise InvalidRequest(
                f"the job asks for {_gpus(spec.gpus)} but this server has {_gpus(len(inv.gpus))} "
                f"({inv.source}); ask for fewer",
                field="gpus",
            )
        check_gpu_type(spec.gpu_type, spec.gpus, spec.nodes, inv.gpus)
        if spec.gpu_mem_mib:
            self._check_gpu_mem(spec)
        if spec.container is not None:
            check_container(spec, inv.container_runtime)
        self._check_machines(spec)
        # Per machine: a job on several has its CPUs and memory split over them.
        cpus, mem_mib = -(-spec.cpus // spec.nodes), -(-spec.mem_mib // spec.nodes)
        most_cpus = max(node.cpus for node in inv.nodes)
        most_mem = max(node.mem_mib for node in inv.nodes)
        each = " per machine" if spec.nodes > 1 else ""
        if cpus > most_cpus:
            raise InvalidRequest(
                f"the job asks for {cpus} CPUs{each} but this server offers {most_cpus}",
                field="cpus",
            )
        if mem_mib > most_mem:
            raise InvalidRequest(
                f"the job asks for {format_size_mib(mem_mib)} of memory{each} but this server "
                f"offers {format_size_mib(most_mem)}",
                field="mem",
            )

    def _check_machines(self, spec: JobSpec) -> None:
        """A job fits on one machine, or (`--nodes N`) on N machines with its share of GPUs."""
        inv = self.inventory
        sizes = sorted((len(inv.gpus_of(node.name)) for node in inv.nodes), reverse=True)
        if spec.nodes > len(sizes):
            raise InvalidRequest(
                f"the job asks for {spec.nodes} nodes but this server has {len(sizes)} "
                "(multi-node jobs need `gpuyard server --backend ray` on a cluster)",
                field="nodes",
            )
        per_node = spec.gpus_per_node
        if sizes[spec.nodes - 1] < per_node:
            where = "one machine" if spec.nodes == 1 else f"{spec.nodes} machines"
            raise InvalidRequest(
                f"the job asks for {_gpus(per_node)} on {where}, but the largest machines here "
                f"have {', '.join(map(str, sizes[: spec.nodes]))} GPUs; ask for fewer"
                + (" or spread it with --nodes" if spec.nodes == 1 and len(sizes) > 1 else ""),
                field="gpus",
            )

    def _check_gpu_mem(self, spec: JobSpec) -> None:
        if not self.inventory.sharing:
            raise InvalidRequest(
                "--gpu-mem shares GPUs of one machine, but this server runs jobs on Ray, which "
                "gives each job whole GPUs: submit without --gpu-mem",
                field="gpu_mem",
            )
        per_gpu = self.inventory.gpu_mem_mib()
        if per_gpu is None:
            raise InvalidRequest(
                "--gpu-mem shares GPUs by memory, but this server does not know its GPUs' memory "
                "(declared GPUs): start it with --gpu-mem-per-gpu SIZE, or submit without "
                "--gpu-mem for whole GPUs",
                field="gpu_mem",
            )
        if spec.gpu_mem_mib > per_gpu:
            raise InvalidRequest(
                f"--gpu-mem {format_size_mib(spec.gpu_mem_mib)} is more than a GPU here has "
                f"({format_size_mib(per_gpu)}); ask for at most that, or for whole GPUs without "
                "--gpu-mem",
                field="gpu_mem",
            )


def _maybe_evicted(kept: list[Job]) -> bool:
    """Whether an array's tasks kept in memory may lack some the book evicted: its ids are
    consecutive from the array's, so a gap, or any finished task (the next to go), says so."""
    ids = [job.id for job in kept]
    first = kept[0].array_job_id
    return (
        min(ids) != first
        or max(ids) - min(ids) + 1 != len(ids)
        or any(job.state.is_terminal for job in kept)
    )


def _require_admin(actor: Principal, what: str) -> None:
    if not actor.is_admin:
        raise Forbidden(f"only an admin may {what}; ask one (`gpuyard admin` needs that role)")


def _matches(
    job: Job,
    since: float | None,
    states: Collection[JobState] | None,
    owner: str | None,
    name: str | None,
) -> bool:
    return (
        (since is None or job.submitted_at >= since)
        and (not states or job.state in states)
        and (owner is None or job.owner == owner)
        and (name is None or job.spec.name == name)
    )


class LogReader:
    """An open job log, read from `start` up to `end` (its size when opened): a log still
    being written is sent as it was then, and `end` is where to ask for the rest."""

    def __init__(self, file: BinaryIO | None, start: int, end: int, state: JobState) -> None:
        self._file = file
        self.start = start
        self.end = end
        self.state = state
        self._at = start

    def read(self, limit: int) -> bytes:
        """The next bytes, at most `limit`, never past `end` (b"": done)."""
        if self._file is None:
            return b""
        data = self._file.read(min(limit, self.end - self._at))
        self._at += len(data)
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


_TAIL_BLOCK = 1 << 16


def _tail_start(f: BinaryIO, size: int, lines: int) -> int:
    """Where a file's last `lines` lines begin (a final newline ends a line, it does not start
    one): read backwards block by block, so a tail of a 200 MB log reads only its end."""
    if lines <= 0:
        return size
    pos, newlines = size, 0
    last = size - 1  # a newline here ends the last line
    while pos > 0:
        step = min(_TAIL_BLOCK, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        end = len(block)
        while (i := block.rfind(b"\n", 0, end)) >= 0:
            end = i
            if pos + i == last:
                continue
            newlines += 1
            if newlines == lines:
                return pos + i + 1
    return 0


def _unreadable_log(job_id: int, path: str, exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError):
        what = "a directory, not a file"
    else:
        what = exc.strerror or str(exc)
    return (
        f"job {job_id}'s log {path} cannot be read ({what}); ask the server's admin to put "
        "the file back or move that away"
    )


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")
