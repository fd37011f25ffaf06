"""A job's progress and metric series (`gpuyard.progress()`, the `::gpuyard progress` line, the
bars and logs the server reads: `services/workflows/progress.py`). Job details: another user's job
is
not found, admins see all (as `show`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, cast

from fastapi import APIRouter, Query

from gpuyard.api.deps import Actor, Server
from gpuyard.schemas.charts_v1 import ProgressOut, ProgressSource, SeriesOut

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

_MAX_NAMES = 64


@router.get("/{job_id}/progress")
def job_progress(job_id: int, server: Server, actor: Actor) -> ProgressOut:
    """The job's latest progress: step of total, rate (steps/s over recent steps), ETA, the
    latest value of each metric, when and how it was last reported (all null: nothing yet)."""
    job = server.reads.get(job_id, actor)
    if server.progress is None:
        return ProgressOut(job_id=job.id)
    view = server.progress.progress(job)
    return ProgressOut(
        job_id=job.id, step=view.step, total=view.total, fraction=view.fraction,
        rate_per_s=view.rate_per_s, eta_s=view.eta_s, metrics=view.metrics,
        updated_at=_iso(view.updated_at), source=cast(ProgressSource | None, view.source),
    )  # fmt: skip


@router.get("/{job_id}/series")
def job_series(
    job_id: int,
    server: Server,
    actor: Actor,
    names: Annotated[
        str | None,
        Query(max_length=4096, description="comma-separated names, e.g. loss,step; all if none"),
    ] = None,
    max_points: Annotated[int, Query(ge=1, le=10_000, description="points per series")] = 500,
) -> SeriesOut:
    """The job's series, `[[t, value], ...]` oldest first (t: Unix time): "step" and each
    metric, downsampled to `max_points` (the server keeps at most 2,000 points a series)."""
    job = server.reads.get(job_id, actor)
    wanted = None
    if names is not None:
        wanted = [n.strip() for n in names.split(",") if n.strip()][:_MAX_NAMES]
    if server.progress is None:
        return SeriesOut(job_id=job.id, series={})
    return SeriesOut(job_id=job.id, series=server.progress.series(job, wanted, max_points))


def _iso(ts: float | None) -> str | None:
    try:
        return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        return None
