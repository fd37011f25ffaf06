"""/api/v1/gpus: the GPUs, who holds each, and their telemetry."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.api.convert import gpu_to_wire
from gpuyard.api.deps import Actor, Server
from gpuyard.schemas.v1 import GpuOut

router = APIRouter(prefix="/api/v1/gpus", tags=["gpus"])


@router.get("")
def list_gpus(server: Server, actor: Actor) -> list[GpuOut]:
    """The GPUs, who holds each, and their latest telemetry (null fields: n/a); the GPU
    stream (`live.py`) sends the same list."""
    gpus = server.gpus
    sampled_at = gpus.telemetry().taken_at
    drains, hot = server.drains.current(), server.scheduler.hot
    return [
        gpu_to_wire(h, gpus.owner_of, sampled_at, drains.get(h.gpu.index), hot.get(h.gpu.index))
        for h in gpus.holdings()
    ]
