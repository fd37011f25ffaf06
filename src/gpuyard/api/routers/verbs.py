"""The everyday verbs on one job (hold, release, requeue, update, restart) and who the caller
is (`queue --me`); the decisions are the services' (`services/jobs/verbs.py`)."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.api.convert import job_to_wire
from gpuyard.api.deps import Actor, Reads, Verbs
from gpuyard.domain.job import Job
from gpuyard.domain.units import parse_duration_s
from gpuyard.schemas.v1 import JobOut, JobUpdateIn, WhoAmIOut
from gpuyard.services.jobs.reads import JobReads

router = APIRouter(prefix="/api/v1", tags=["jobs"])


def _out(reads: JobReads, job: Job) -> JobOut:
    return job_to_wire(job, reads.reason(job), reads.log_path(job.id))


@router.get("/whoami")
async def whoami(actor: Actor) -> WhoAmIOut:
    """The account the token acts as: whose jobs `queue --me` lists."""
    return WhoAmIOut(user=actor.user, role=actor.role, team=actor.team, scope=actor.scope)


@router.post("/jobs/{job_id}/hold")
def hold_job(job_id: int, verbs: Verbs, reads: Reads, actor: Actor) -> JobOut:
    """Keep a pending job out of the queue (reason JobHeldUser) until it is released."""
    return _out(reads, verbs.hold(job_id, actor))


@router.post("/jobs/{job_id}/release")
def release_job(job_id: int, verbs: Verbs, reads: Reads, actor: Actor) -> JobOut:
    """Let a held job back in the queue."""
    return _out(reads, verbs.release(job_id, actor))


@router.post("/jobs/{job_id}/requeue")
def requeue_job(job_id: int, verbs: Verbs, reads: Reads, actor: Actor) -> JobOut:
    """Stop a running job and put it back in the queue (restarts + 1), as a preemption does."""
    return _out(reads, verbs.requeue(job_id, actor))


@router.post("/jobs/{job_id}/restart", status_code=201)
def restart_job(job_id: int, verbs: Verbs, reads: Reads, actor: Actor) -> JobOut:
    """Run a finished job again: a new job with the same spec, `restart_of` the old id."""
    return _out(reads, verbs.restart(job_id, actor))


@router.patch("/jobs/{job_id}")
def update_job(job_id: int, body: JobUpdateIn, verbs: Verbs, reads: Reads, actor: Actor) -> JobOut:
    """Change a pending job's time limit, priority or GPUs; 409 once it runs."""
    limit = (
        None if body.time_limit is None else parse_duration_s(body.time_limit, field="time_limit")
    )
    job = verbs.update(job_id, actor, time_limit_s=limit, priority=body.priority, gpus=body.gpus)
    return _out(reads, job)
