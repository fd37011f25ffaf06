"""GPU telemetry history for charts: a GPU's (`/api/v1/gpus/{index}/history`, everyone
authenticated, as `gpuyard gpus`) and a job's on the GPUs it held (`/api/v1/jobs/{id}/
gpu-history`, a job detail: another user's job is not found, admins see all).

A server whose GPUs are declared, not detected, samples nothing: its answers have no samples.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query

from gpuyard.api.deps import Actor, Server
from gpuyard.domain.errors import NotFound
from gpuyard.schemas.charts_v1 import GpuHistoryOut, JobGpuHistoryOut
from gpuyard.services.machine.gpu_history import GpuHistory, GpuSeries
from gpuyard.services.machine.gpus import GpuDesk

router = APIRouter(tags=["gpus"])

_EPOCH = 1e9  # a `since` above this is a time, not seconds back
MaxPoints = Annotated[int, Query(ge=1, le=10_000, description="at most this many samples")]


@router.get("/api/v1/gpus/{index}/history")
def gpu_history(
    index: int,
    server: Server,
    actor: Actor,
    since: Annotated[
        float,
        Query(ge=0, description="seconds back from now, or a Unix time if above 1e9"),
    ] = 3600.0,
    max_points: MaxPoints = 600,
) -> GpuHistoryOut:
    """GPU `index`'s utilisation, memory, temperature and power since then, oldest first,
    as bucket means (1 s samples for the last 24 h, 60 s buckets before, kept 90 days)."""
    gpu = next((g for g in server.gpus.inventory.gpus if g.index == index), None)
    if gpu is None:
        raise NotFound(f"GPU {index} not found: `gpuyard gpus` lists them")
    now = time.time()
    start = since if since > _EPOCH else now - since
    history = _history(server.gpus)
    if history is None or not history.knows(index):
        return GpuHistoryOut(index=index, uuid=gpu.uuid, resolution_s=0.0, samples=[])
    return _wire(history.gpu_series(index, start, now, max_points))


@router.get("/api/v1/jobs/{job_id}/gpu-history")
def job_gpu_history(
    job_id: int, server: Server, actor: Actor, max_points: MaxPoints = 600
) -> JobGpuHistoryOut:
    """The GPUs the job held, over its runs (earlier attempts' too; past jobs included)."""
    job = server.reads.get(job_id, actor)
    history = _history(server.gpus)
    series = [] if history is None else history.job_series(job, max_points)
    return JobGpuHistoryOut(job_id=job.id, gpus=[_wire(s) for s in series])


def _history(gpus: GpuDesk) -> GpuHistory | None:
    return gpus.monitor.history if gpus.monitor is not None else None


def _wire(series: GpuSeries) -> GpuHistoryOut:
    return GpuHistoryOut(
        index=series.index, uuid=series.uuid, resolution_s=series.resolution_s,
        samples=[(p.t, p.util_pct, p.mem_used_mib, p.temp_c, p.power_w) for p in series.points],
    )  # fmt: skip
