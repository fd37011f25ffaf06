"""Slurm's and pueue's everyday verbs on one job: hold/release, requeue, update, restart.

Each is a use case with its actor (the job's owner or an admin) and changes the job only
through the journal, so the change is durable before anything acts on it; the journal's
scheduler observer carries it to the scheduler (`observers.scheduler_events`):

    hold(7)      held=True, stored    -> the gate keeps 7 out of the policy (JobHeldUser)
    release(7)   held=False, stored   -> the gate lets it back in at the next pass
    requeue(7)   stop intent PENDING  -> stopped as a preemption is, then back in the queue
                                         (restarts + 1)
    update(7)    a new spec, pending  -> the policy forgets it and hears of it again, with
                                         its submit time kept
    restart(7)   a finished job       -> a new job, same spec and owner, restart_of=7
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuyard.domain.errors import Conflict, Forbidden, InvalidRequest
from gpuyard.domain.job import REASON_PREEMPTING, Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.spec_rules import check_shape
from gpuyard.domain.states import JobState

if TYPE_CHECKING:
    from gpuyard.services.jobs.service import JobService

REASON_REQUEUED = "Requeued by user"
_MAX_GPUS, _MAX_PRIORITY = 1024, 1_000_000


def hold(service: JobService, job_id: int, actor: Principal) -> Job:
    """Keep a pending job out of the queue until `release` (Slurm's `scontrol hold`)."""
    job = _own(service, job_id, actor, "hold")

    def held(current: Job) -> Job | None:
        _pending(current, "held (a running job holds its GPUs: `gpuyard requeue` it first)")
        _not_starting(service, job_id, "hold")
        return None if current.held else current.with_changes(held=True)

    return _change(service, job_id, held) or job


def release(service: JobService, job_id: int, actor: Principal) -> Job:
    """Let a held job back in the queue."""
    job = _own(service, job_id, actor, "release")

    def released(current: Job) -> Job | None:
        if not current.held or current.state is not JobState.PENDING:
            raise Conflict(f"job {job_id} is not held; there is nothing to release")
        return current.with_changes(held=False)

    return _change(service, job_id, released) or job


def requeue(service: JobService, job_id: int, actor: Principal) -> Job:
    """Stop a running job and put it back in the queue, as a preemption does."""
    job = _own(service, job_id, actor, "requeue")
    if job.state is JobState.PENDING:
        raise Conflict(f"job {job_id} is pending: it is in the queue already")
    if job.state.is_terminal:
        raise Conflict(
            f"job {job_id} already ended ({job.state.value}); `gpuyard restart {job_id}` runs "
            "it again"
        )
    current = service.stops.request(job_id, JobState.PENDING, reason=REASON_REQUEUED)
    if current is None or current.stop_intent is not JobState.PENDING:
        raise Conflict(f"job {job_id} is stopping already (cancelled or failing): not requeued")
    service.wake()
    return current


def update(
    service: JobService,
    job_id: int,
    actor: Principal,
    *,
    time_limit_s: int | None = None,
    priority: int | None = None,
    gpus: int | None = None,
) -> Job:
    """Change a pending job's time limit, priority or GPUs (pueue's edit, scontrol update)."""
    job = _own(service, job_id, actor, "update")
    changes = _checked_changes(time_limit_s, priority, gpus)
    spec = replace(job.spec, **changes)  # type: ignore[arg-type]
    if spec.gpu_mem_mib and spec.gpus < 1:
        raise InvalidRequest(
            f"--gpus 0: job {job_id} shares GPUs by memory (--gpu-mem): it needs at least one",
            field="gpus",
        )
    check_shape(spec)
    service.check_fits(spec)

    def updated(current: Job) -> Job | None:
        _pending(current, "updated (its resources are held: `gpuyard requeue` it first)")
        _not_starting(service, job_id, "update")
        return current.with_changes(spec=replace(current.spec, **changes))  # type: ignore[arg-type]

    current = _change(service, job_id, updated) or job
    service.wake()
    return current


def restart(service: JobService, job_id: int, actor: Principal) -> Job:
    """Run a finished job again: same spec and owner, a new id that names the old one."""
    job = _own(service, job_id, actor, "restart")
    if not job.state.is_terminal:
        raise Conflict(
            f"job {job_id} is {job.state.value}; only a finished job can be restarted "
            f"(`gpuyard requeue {job_id}` puts a running one back in the queue)"
        )
    stored = service.store.get_job(job.id) or job  # the book keeps no finished job's script
    return service.submit(stored.spec, Principal(job.owner), restart_of=job.id)


def _own(service: JobService, job_id: int, actor: Principal, verb: str) -> Job:
    job = service.get(job_id, actor)
    if not (actor.is_admin or job.owner == actor.user):
        raise Forbidden(f"job {job_id} is {job.owner}'s; only they or an admin may {verb} it")
    return job


def _pending(job: Job, verb: str) -> None:
    if job.state is not JobState.PENDING:
        state = "ended" if job.state.is_terminal else "is"
        raise Conflict(f"job {job.id} {state} {job.state.value}; only a pending job can be {verb}")


def _not_starting(service: JobService, job_id: int, verb: str) -> None:
    """A job the policy chose waits only for the jobs it preempted to stop: the policy has
    started it already, so it can no longer be held or changed in the queue."""
    if service.scheduler.reason_for(job_id) == REASON_PREEMPTING:
        raise Conflict(
            f"job {job_id} is starting (the jobs it preempted are stopping): to {verb} it, "
            f"`gpuyard requeue {job_id}` once it runs"
        )


def _change(service: JobService, job_id: int, update: Callable[[Job], Job | None]) -> Job | None:
    return service.journal.change(job_id, update, service.now())


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
