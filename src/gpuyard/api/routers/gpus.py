"""/api/v1/gpus: the GPUs, who holds each, and their telemetry."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.api.convert import gpu_to_wire
from gpuyard.api.deps import Actor, Service
from gpuyard.schemas.v1 import GpuOut

router = APIRouter(prefix="/api/v1/gpus", tags=["gpus"])


@router.get("")
def list_gpus(service: Service, actor: Actor) -> list[GpuOut]:
    """The GPUs, who holds each, and their latest telemetry (null fields: n/a)."""
    sampled_at = service.telemetry().taken_at
    drains, hot = service.drains(), service.hot_gpus()

    def owner_of(job_id: int) -> str | None:
        job = service.book.get(job_id)
        return None if job is None else job.owner

    return [
        gpu_to_wire(h, owner_of, sampled_at, drains.get(h.gpu.index), hot.get(h.gpu.index))
        for h in service.gpus()
    ]
