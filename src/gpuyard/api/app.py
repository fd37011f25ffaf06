"""The FastAPI app: thin routes over the JobService, bearer-token auth on every route but
/healthz."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import TypeAdapter

from gpuyard import __version__
from gpuyard.api.convert import dry_run_to_wire, gpu_to_wire, job_to_wire, spec_from_wire
from gpuyard.api.errors import install_error_handlers
from gpuyard.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gpuyard.api.metrics import render_metrics
from gpuyard.bootstrap import Server
from gpuyard.domain.errors import Unauthorized
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.schemas.v1 import (
    DrainIn,
    DrainOut,
    DryRunOut,
    ErrorOut,
    GpuOut,
    JobOut,
    JobSubmitIn,
    ServerInfoOut,
)

_LOG_CHUNK = 1 << 16
_FOLLOW_POLL_S = 0.2
_JOB_LIST = TypeAdapter(list[JobOut])
_ERRORS = {code: {"model": ErrorOut} for code in (401, 404, 409, 422)}


def create_app(server: Server, *, manage_lifecycle: bool = True) -> FastAPI:
    """The API over one Server; with `manage_lifecycle`, the app starts and closes it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle:
            server.start()
        yield
        if manage_lifecycle:
            server.close()

    app = FastAPI(title="gpuyard", version=__version__, lifespan=lifespan, responses=_ERRORS)  # type: ignore[arg-type]
    install_error_handlers(app)
    service = server.service
    expected = f"Bearer {server.token}".encode()

    async def require_token(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            raise Unauthorized(
                "missing or wrong API token: the CLI reads it from the server's state dir "
                "(or set GPUYARD_TOKEN)"
            )

    def out(job: Job, estimates: dict[int, float | None] | None = None) -> JobOut:
        start = estimates.get(job.id) if estimates else None
        return job_to_wire(
            job, service.reason(job), server.executor.log_path(job.id), start,
            service.gpu_stats(job.id), service.idle_since(job),
        )  # fmt: skip

    def owner_of(job_id: int) -> str | None:
        job = service.book.get(job_id)
        return None if job is None else job.owner

    async def estimates_for(jobs: list[Job]) -> dict[int, float | None] | None:
        """Projected starts, only when a pending job is listed (the projection costs a copy
        of the scheduler's state), off the event loop."""
        pending = [job.id for job in jobs if job.state is JobState.PENDING]
        if not pending:
            return None
        return await asyncio.to_thread(service.estimated_starts, pending)

    @app.get("/healthz", include_in_schema=True)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    auth = [Depends(require_token)]

    # Routes that only read memory or await the group commit are async: no thread hop.
    # They return pre-serialised JSON; `response_model` still documents the shape.
    @app.post("/api/v1/jobs", status_code=201, dependencies=auth, response_model=JobOut)
    async def submit_job(body: JobSubmitIn) -> Response:
        job = await service.submit_async(spec_from_wire(body), server.owner)
        # No pass has seen it yet: its reason is the record's ("None"), and asking the
        # scheduler would only make the hottest route wait for its lock.
        fresh = job_to_wire(job, job.reason, server.executor.log_path(job.id))
        fresh.hint = service.hint(job.spec, job.owner)
        return _json(fresh.model_dump_json(), status=201)

    @app.post("/api/v1/jobs/dry-run", dependencies=auth)
    def dry_run(body: JobSubmitIn) -> DryRunOut:
        """Whether the job can ever run here and when it would start, without queueing it."""
        return dry_run_to_wire(service.dry_run(spec_from_wire(body), server.owner))

    @app.get("/api/v1/jobs", dependencies=auth, response_model=list[JobOut])
    async def list_jobs(
        all: Annotated[bool, Query(description="include finished jobs")] = False,
    ) -> Response:
        jobs = service.list_jobs(include_finished=all)
        estimates = await estimates_for(jobs)
        return _json(_JOB_LIST.dump_json([out(job, estimates) for job in jobs]))

    @app.get("/api/v1/jobs/{job_id}", dependencies=auth, response_model=JobOut)
    async def get_job(job_id: int) -> Response:
        job = service.get(job_id)
        return _json(out(job, await estimates_for([job])).model_dump_json())

    @app.post("/api/v1/jobs/{job_id}/cancel", dependencies=auth)
    def cancel_job(job_id: int) -> JobOut:
        return out(service.cancel(job_id))

    @app.get("/api/v1/jobs/{job_id}/log", dependencies=auth, response_class=Response)
    async def job_log(
        job_id: int,
        offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
        follow: bool = False,
    ) -> Response:
        job = service.get(job_id)
        path = server.executor.log_path(job_id)
        if not follow:
            data = await asyncio.to_thread(_read_from, path, offset, None)
            return Response(
                data, media_type="text/plain; charset=utf-8",
                headers={"X-Log-Offset": str(offset + len(data)), "X-Job-State": job.state.value},
            )  # fmt: skip
        return StreamingResponse(_follow(job_id, path, offset), media_type="text/plain")

    async def _follow(job_id: int, path: str, offset: int) -> AsyncIterator[bytes]:
        while True:
            ended = service.get(job_id).state.is_terminal
            data = await asyncio.to_thread(_read_from, path, offset, _LOG_CHUNK)
            offset += len(data)
            if data:
                yield data
            elif ended:
                return
            else:
                await asyncio.sleep(_FOLLOW_POLL_S)

    @app.get("/api/v1/gpus", dependencies=auth)
    def list_gpus() -> list[GpuOut]:
        """The GPUs, who holds each, and their latest telemetry (null fields: n/a)."""
        sampled_at = service.telemetry().taken_at
        drains, hot = service.drains(), service.hot_gpus()
        return [
            gpu_to_wire(h, owner_of, sampled_at, drains.get(h.gpu.index), hot.get(h.gpu.index))
            for h in service.gpus()
        ]

    @app.post("/api/v1/gpus/{index}/drain", dependencies=auth)
    def drain_gpu(index: int, body: DrainIn) -> DrainOut:
        """Take a GPU out of service; jobs running on it are stopped and end NODE_FAIL."""
        failed = service.drain(index, body.reason)
        return DrainOut(gpu=index, drained=True, failed_jobs=[j.id for j in failed])

    @app.post("/api/v1/gpus/{index}/resume", dependencies=auth)
    def resume_gpu(index: int) -> DrainOut:
        """Put a drained GPU back in service."""
        service.resume(index)
        return DrainOut(gpu=index, drained=False, failed_jobs=[])

    @app.get("/metrics", dependencies=auth, response_class=Response)
    def metrics() -> Response:
        """Prometheus text format: dcgm-exporter's GPU metrics and gpuyard_* queue metrics."""
        body = render_metrics(service, service.inventory.node.name)
        return Response(body, media_type=METRICS_CONTENT_TYPE)

    @app.get("/api/v1/info", dependencies=auth)
    def info() -> ServerInfoOut:
        inv = service.inventory
        return ServerInfoOut(
            version=__version__, gpus_source=inv.source, num_gpus=len(inv.gpus),
            cpus=inv.node.cpus, mem_mib=inv.node.mem_mib, owner=server.owner,
            policy=server.settings.policy,
        )  # fmt: skip

    return app


def _json(body: str | bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")


def _read_from(path: str, offset: int, limit: int | None) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit if limit is not None else -1)
    except FileNotFoundError:
        return b""
