"""/api/v1/arrays/{array_id}: a job array's tasks, and cancelling all of them (scancel A).

An array is made by `POST /api/v1/jobs` with `array` (api/submit_route.py); its id is its first
task's job id. Another user's array does not exist for the caller (404), as with jobs.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import TypeAdapter

from gpuyard.api.convert import job_to_wire
from gpuyard.api.deps import Actor, Reads, Server
from gpuyard.domain.job import Job
from gpuyard.schemas.v1 import JobOut
from gpuyard.services.jobs.reads import JobReads

router = APIRouter(prefix="/api/v1/arrays", tags=["arrays"])

_TASKS = TypeAdapter(list[JobOut])


def _tasks(reads: JobReads, tasks: list[Job]) -> Response:
    body = _TASKS.dump_json(
        [job_to_wire(job, reads.reason(job), reads.log_path(job.id)) for job in tasks]
    )
    return Response(body, media_type="application/json")


@router.get("/{array_id}", response_model=list[JobOut])
def get_array(array_id: int, reads: Reads, actor: Actor) -> Response:
    """The array's tasks (jobs), by task index: pending, running and ended ones."""
    return _tasks(reads, reads.array_tasks(array_id, actor))


@router.post("/{array_id}/cancel", response_model=list[JobOut])
def cancel_array(array_id: int, server: Server, actor: Actor) -> Response:
    """Cancel every pending task at once and stop every running one (their stop signal,
    grace, KILL); ended tasks stay as they ended. The answer: the tasks, by index."""
    return _tasks(server.reads, server.verbs.cancel_array(array_id, actor))
