"""What only an admin may do: take GPUs out of service and put them back."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.api.deps import Actor, Service
from gpuyard.schemas.v1 import DrainIn, DrainOut

router = APIRouter(prefix="/api/v1/gpus", tags=["admin"])


@router.post("/{index}/drain")
def drain_gpu(index: int, body: DrainIn, service: Service, actor: Actor) -> DrainOut:
    """Take a GPU out of service: no new job goes there; the jobs running on it finish, or
    with `now` are stopped and requeued."""
    jobs = [j.id for j in service.drain(index, body.reason, actor, now=body.now)]
    if body.now:
        return DrainOut(gpu=index, drained=True, failed_jobs=[], requeued_jobs=jobs)
    return DrainOut(gpu=index, drained=True, failed_jobs=[], running_jobs=jobs)


@router.post("/{index}/resume")
def resume_gpu(index: int, service: Service, actor: Actor) -> DrainOut:
    """Put a drained GPU back in service."""
    service.resume(index, actor)
    return DrainOut(gpu=index, drained=False, failed_jobs=[])
