"""Slurm's and pueue's everyday verbs on one job: cancel, hold/release, requeue, update,
restart; an array's cancel; and `clean`, which forgets finished jobs.

Each is a use case with its actor: a job another user owns does not exist for them (`reads.get`
answers NotFound), so only its owner or an admin gets this far. Each changes the job only
through the journal, so the change is durable before anything acts on it; the journal's
scheduler observer carries it to the scheduler (`observers.scheduler_events`):

    cancel(7)    pending: CANCELLED   -> the policy forgets it; running: stop intent, signalled
    hold(7)      held=True, stored    -> the gate keeps 7 out of the policy (JobHeldUser)
    release(7)   held=False, stored   -> the gate lets it back in at the next pass
    requeue(7)   stop intent PENDING  -> stopped as a preemption is, then back in the queue
                                         (restarts + 1)
    update(7)    a new spec, pending  -> the policy forgets it and hears of it again, with
                                         its submit time kept
    restart(7)   a finished job       -> a new job, same spec and owner, restart_of=7
    clean()      finished rows gone   -> the journal publishes their removal (`removed`)
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gpuyard.domain.errors import Conflict, Forbidden, GpuyardError, InvalidRequest
from gpuyard.domain.job import REASON_PREEMPTING, Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.spec_rules import check_shape
from gpuyard.domain.states import JobState
from gpuyard.services.access.rules import owns, sees_everyone
from gpuyard.services.jobs.admission import Admission
from gpuyard.services.jobs.desk import JobDesk
from gpuyard.services.jobs.journal import ROUND_JOBS, Update
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.jobs.submit import JobSubmits

# What admins do to other users' jobs, kept apart in the server log.
audit = logging.getLogger("gpuyard.audit")

REASON_REQUEUED = "Requeued by user"
_MAX_GPUS, _MAX_PRIORITY = 1024, 1_000_000


@dataclass(frozen=True, slots=True)
class Cleaned:
    """What `clean` did: how many finished jobs it forgot, and those whose folder could not
    be removed (their records are gone all the same)."""

    jobs: int
    folders_kept: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Cancels:
    """What `cancel_many` did: the jobs cancelled at once (pending), those asked to stop
    (running), and those refused, each with why (not found, already ended)."""

    cancelled: tuple[int, ...] = ()
    stopping: tuple[int, ...] = ()
    refused: dict[int, GpuyardError] = field(default_factory=dict)


class JobVerbs:
    """The verbs; `update` asks the admission whether a new spec fits, `restart` submits."""

    def __init__(
        self, desk: JobDesk, reads: JobReads, admission: Admission, submits: JobSubmits
    ) -> None:
        self._desk = desk
        self._reads = reads
        self._admission = admission
        self._submits = submits

    def cancel(self, job_id: int, actor: Principal, stop_signal: int | None = None) -> Job:
        """Cancel a pending job at once; ask a running one to stop (its stop signal, grace,
        KILL). `stop_signal` (`cancel --signal`): sent instead of the job's `--signal`."""
        desk = self._desk
        job = self._reads.get(job_id, actor)
        if job.state.is_terminal:
            raise Conflict(
                f"job {job_id} already ended ({job.state.value}); there is nothing to cancel"
            )
        now = desk.clock()
        current = desk.journal.change(job_id, _cancel_pending(now), now) or job
        if current.state is JobState.RUNNING:
            asked = desk.stops.request(job_id, JobState.CANCELLED, stop_signal=stop_signal)
            current = asked or current
        if not owns(actor, job.owner):  # an admin acting on someone's job: on the record
            audit.warning("admin %s cancelled job %s of %s", actor.user, job_id, job.owner)
        desk.wake()
        return current

    def cancel_array(self, array_id: int, actor: Principal) -> list[Job]:
        """Cancel every pending task of the array at once (one durable write) and ask every
        running one to stop; ended tasks stay as they are. Returns the tasks by index."""
        desk = self._desk
        tasks = self._reads.array_tasks(array_id, actor)
        owner = tasks[0].owner
        now = desk.clock()
        self._cancel_all([t.id for t in tasks if not t.state.is_terminal], now, None)
        if not owns(actor, owner):
            audit.warning("admin %s cancelled array %s of %s", actor.user, array_id, owner)
        desk.wake()
        return [desk.book.get(task.id) or task for task in tasks]

    def cancel_many(
        self,
        job_ids: Sequence[int],
        actor: Principal,
        stop_signal: int | None = None,
        *,
        whole_arrays: bool = False,
    ) -> Cancels:
        """Cancel many jobs in one go (`scancel -u USER -t PENDING`, the dashboard's selection):
        the pending ones in a durable write per 1,000, the running ones asked to stop, as
        `cancel` does each. `whole_arrays`: an array's id stands for all its tasks (as
        `scancel 12` means it). A job that is not the actor's to see, or already ended, is
        refused on its own line; the others are cancelled all the same."""
        desk = self._desk
        refused: dict[int, GpuyardError] = {}
        active: dict[int, Job] = {}
        for job_id in dict.fromkeys(job_ids):
            try:
                job = self._reads.get(job_id, actor)
            except GpuyardError as exc:
                refused[job_id] = exc
                continue
            if whole_arrays and job.array_job_id == job.id:
                tasks = self._reads.array_tasks(job.id, actor)
                active.update((t.id, t) for t in tasks if not t.state.is_terminal)
            elif job.state.is_terminal:
                refused[job_id] = Conflict(
                    f"job {job_id} already ended ({job.state.value}); there is nothing to cancel"
                )
            else:
                active[job.id] = job
        stopping = self._cancel_all(list(active), desk.clock(), stop_signal)
        others = Counter(job.owner for job in active.values() if not owns(actor, job.owner))
        for owner, count in others.items():  # an admin acting on someone's jobs: on the record
            audit.warning("admin %s cancelled %s jobs of %s", actor.user, count, owner)
        desk.wake()
        cancelled = tuple(i for i in active if i not in stopping)
        return Cancels(cancelled, tuple(stopping), refused)

    def _cancel_all(self, job_ids: list[int], now: float, stop_signal: int | None) -> list[int]:
        """Cancel the pending jobs among `job_ids` and ask the running ones to stop; the ids
        asked to stop. A round of the journal's per chunk, its lock released between them: a
        pass (which takes it) never waits for all of a 10,000-task array; cancels of other
        requests share the rounds' writes. A job started meanwhile is RUNNING by the time the
        stops look at it."""
        desk = self._desk
        cancel_pending = _cancel_pending(now)
        for at in range(0, len(job_ids), ROUND_JOBS):
            chunk = job_ids[at : at + ROUND_JOBS]
            desk.journal.change_many(dict.fromkeys(chunk, cancel_pending), now)
        stopping = []
        for job_id in job_ids:
            current = desk.book.get(job_id)
            if current is not None and current.state is JobState.RUNNING:
                desk.stops.request(job_id, JobState.CANCELLED, stop_signal=stop_signal)
                stopping.append(job_id)
        return stopping

    def clean(
        self, actor: Principal, *, older_than_s: float | None = None, owner: str | None = None
    ) -> Cleaned:
        """Forget finished jobs, their records and folders (pueue's `clean`): that ended more
        than `older_than_s` ago (None: any), of `owner`. An admin cleans everyone's (or
        `owner`'s), a user only their own. Pending and running jobs are never touched: the
        store deletes only finished rows, and the book drops only finished jobs."""
        desk = self._desk
        if not sees_everyone(actor):
            if owner is not None and not owns(actor, owner):
                raise Forbidden(
                    f"only an admin may clean {owner}'s jobs; `gpuyard clean` cleans your own"
                )
            owner = actor.user
        now = desk.clock()
        before = None if older_than_s is None else now - older_than_s
        ids = desk.store.delete_finished(ended_before=before, owner=owner)
        desk.journal.removed(ids, now)
        kept: list[int] = []
        for job_id in ids:
            try:
                desk.remove_files(job_id)
            except OSError:
                kept.append(job_id)
        return Cleaned(len(ids), tuple(kept))

    def hold(self, job_id: int, actor: Principal) -> Job:
        """Keep a pending job out of the queue until `release` (Slurm's `scontrol hold`)."""
        job = self._reads.get(job_id, actor)

        def held(current: Job) -> Job | None:
            _pending(current, "held (a running job holds its GPUs: `gpuyard requeue` it first)")
            self._not_starting(job_id, "hold")
            return None if current.held else current.with_changes(held=True)

        return self._change(job_id, held) or job

    def release(self, job_id: int, actor: Principal) -> Job:
        """Let a held job back in the queue."""
        job = self._reads.get(job_id, actor)

        def released(current: Job) -> Job | None:
            if not current.held or current.state is not JobState.PENDING:
                raise Conflict(f"job {job_id} is not held; there is nothing to release")
            return current.with_changes(held=False)

        return self._change(job_id, released) or job

    def requeue(self, job_id: int, actor: Principal) -> Job:
        """Stop a running job and put it back in the queue, as a preemption does."""
        job = self._reads.get(job_id, actor)
        if job.state is JobState.PENDING:
            raise Conflict(f"job {job_id} is pending: it is in the queue already")
        if job.state.is_terminal:
            raise Conflict(
                f"job {job_id} already ended ({job.state.value}); `gpuyard restart {job_id}` "
                "runs it again"
            )
        current = self._desk.stops.request(job_id, JobState.PENDING, reason=REASON_REQUEUED)
        if current is None or current.stop_intent is not JobState.PENDING:
            raise Conflict(f"job {job_id} is stopping already (cancelled or failing): not requeued")
        self._desk.wake()
        return current

    def update(
        self,
        job_id: int,
        actor: Principal,
        *,
        time_limit_s: int | None = None,
        priority: int | None = None,
        gpus: int | None = None,
    ) -> Job:
        """Change a pending job's time limit, priority or GPUs (pueue's edit, scontrol update)."""
        job = self._reads.get(job_id, actor)
        changes = _checked_changes(time_limit_s, priority, gpus)
        spec = replace(job.spec, **changes)  # type: ignore[arg-type]
        if spec.gpu_mem_mib and spec.gpus < 1:
            raise InvalidRequest(
                f"--gpus 0: job {job_id} shares GPUs by memory (--gpu-mem): it needs at least one",
                field="gpus",
            )
        check_shape(spec)
        self._admission.check_fits(spec)

        def updated(current: Job) -> Job | None:
            _pending(current, "updated (its resources are held: `gpuyard requeue` it first)")
            self._not_starting(job_id, "update")
            return current.with_changes(spec=replace(current.spec, **changes))  # type: ignore[arg-type]

        current = self._change(job_id, updated) or job
        self._desk.wake()
        return current

    def restart(self, job_id: int, actor: Principal) -> Job:
        """Run a finished job again: same spec and owner, a new id that names the old one."""
        job = self._reads.get(job_id, actor)
        if not job.state.is_terminal:
            raise Conflict(
                f"job {job_id} is {job.state.value}; only a finished job can be restarted "
                f"(`gpuyard requeue {job_id}` puts a running one back in the queue)"
            )
        stored = self._desk.store.get_job(job.id) or job  # the book keeps no finished script
        return self._submits.submit(stored.spec, Principal(job.owner), restart_of=job.id)

    def _not_starting(self, job_id: int, verb: str) -> None:
        """A job the policy chose waits only for the jobs it preempted to stop: the policy has
        started it already, so it can no longer be held or changed in the queue."""
        if self._desk.scheduler.reason_for(job_id) == REASON_PREEMPTING:
            raise Conflict(
                f"job {job_id} is starting (the jobs it preempted are stopping): to {verb} it, "
                f"`gpuyard requeue {job_id}` once it runs"
            )

    def _change(self, job_id: int, update: Callable[[Job], Job | None]) -> Job | None:
        return self._desk.journal.change(job_id, update, self._desk.clock())


def _pending(job: Job, verb: str) -> None:
    if job.state is not JobState.PENDING:
        state = "ended" if job.state.is_terminal else "is"
        raise Conflict(f"job {job.id} {state} {job.state.value}; only a pending job can be {verb}")


def _checked_changes(
    time_limit_s: int | None, priority: int | None, gpus: int | None
) -> dict[str, int]:
    changes = {
        name: value
        for name, value in (("time_limit_s", time_limit_s), ("priority", priority), ("gpus", gpus))
        if value is not None
    }
    if not changes:
        raise InvalidRequest("nothing to update: give --time, --priority or --gpus")
    if time_limit_s is not None and time_limit_s <= 0:
        raise InvalidRequest("--time must be more than 0", field="time_limit")
    if gpus is not None and not 0 <= gpus <= _MAX_GPUS:
        raise InvalidRequest(f"--gpus must be 0 to {_MAX_GPUS}", field="gpus")
    if priority is not None and abs(priority) > _MAX_PRIORITY:
        raise InvalidRequest(
            f"--priority must be -{_MAX_PRIORITY} to {_MAX_PRIORITY}", field="priority"
        )
    return changes


def _cancel_pending(now: float) -> Update:
    """A cancel's change: a pending job ends CANCELLED now; any other is left as it is (a
    running one is asked to stop instead)."""

    def cancel(current: Job) -> Job | None:
        if current.state is not JobState.PENDING:
            return None
        return current.transition(JobState.CANCELLED, ended_at=now, reason="Cancelled by user")

    return cancel
