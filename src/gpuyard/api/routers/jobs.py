"""/api/v1/jobs: submit, list, show, cancel, read the log, follow changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from gpuyard.api.convert import (
    dry_run_to_wire,
    expected_run_fields,
    job_fields,
    spec_from_wire,
    wire_reason,
)
from gpuyard.api.deps import Actor, Reads, Server, Submits, Verbs
from gpuyard.api.openapi_doc import EVENT_STREAM, LOG_ANSWER
from gpuyard.api.submit_route import (
    IDEMPOTENCY_KEY,
    MAX_KEY_CHARS,
    REPLAYED_HEADER,
    idempotency_key_of,
    submit,
)
from gpuyard.api.wire_json import WireList
from gpuyard.domain.job import Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.signals import parse_signal
from gpuyard.domain.states import JobState
from gpuyard.domain.units import parse_duration_s
from gpuyard.scheduling.projection import StartEstimates
from gpuyard.schemas.v1 import (
    CancelManyIn,
    CancelManyOut,
    CancelRefusedOut,
    CleanOut,
    DryRunOut,
    JobOut,
    JobSubmitIn,
)
from gpuyard.services.access.rules import reason_code, redact_job
from gpuyard.services.jobs.change_feed import ChangeFeed
from gpuyard.services.jobs.reads import MAX_PAGE, JobReads, LogReader
from gpuyard.services.scheduler.live import LiveScheduler
from gpuyard.services.server import ServerFacade

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

_LOG_CHUNK = 1 << 16
_STREAM_CHUNK = 1 << 20
_FOLLOW_POLL_S = 0.2
_JOB_LIST = WireList(JobOut)  # the same bytes as TypeAdapter(list[JobOut]), without models


def _out(
    server: ServerFacade,
    job: Job,
    estimates: StartEstimates | None,
    ranks: Mapping[int, tuple[int, int]] | None = None,
) -> JobOut:
    return JobOut.model_construct(**_details(server, job, estimates, ranks, plain=False))


def _details(
    server: ServerFacade,
    job: Job,
    estimates: StartEstimates | None,
    ranks: Mapping[int, tuple[int, int]] | None,
    *,
    plain: bool,
) -> dict[str, Any]:
    """JobOut's fields of a job the actor may see in full: log, GPU stats, health."""
    start = estimates.starts.get(job.id) if estimates else None
    reads, gpus, health = server.reads, server.gpus, server.health
    return job_fields(
        job, reads.reason(job), reads.log_path(job.id), start, gpus.job_stats(job.id),
        gpus.idle_since(job),
        estimate_assumes="preemption" if estimates and estimates.assumes_preemption(job.id)
        else None,
        service_health=health.of(job) if health else None,
        rank=_rank(job, ranks), plain=plain,
    )  # fmt: skip


def _rank(job: Job, ranks: Mapping[int, tuple[int, int]] | None) -> tuple[int, int] | None:
    return ranks.get(job.id) if ranks and job.state is JobState.PENDING else None


def _listed(
    server: ServerFacade,
    actor: Principal,
    job: Job,
    estimates: StartEstimates | None,
    ranks: Mapping[int, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """A listed job's fields (already as the actor may see it, `JobReads.list_jobs`), its
    records as dicts (`_JOB_LIST`), with its log, GPU stats and health only where
    `shows_details` says they are the actor's to see; a pending job's rank in the policy's
    order for everyone (the queue's order is public)."""
    if server.reads.shows_details(actor, job):
        return _details(server, job, estimates, ranks, plain=True)
    start = estimates.starts.get(job.id) if estimates else None
    reason = reason_code(server.reads.reason(job))
    return job_fields(job, reason, "", start, rank=_rank(job, ranks), plain=True)


async def _estimates(scheduler: LiveScheduler, jobs: list[Job]) -> StartEstimates | None:
    """Projected starts, only when a pending job is listed (a projection costs a copy of the
    scheduler's state), off the event loop."""
    pending = [job.id for job in jobs if job.state is JobState.PENDING]
    if not pending:
        return None
    return await asyncio.to_thread(scheduler.start_estimates, pending)


# Routes that only read memory or await the group commit are async: no thread hop.
# They return pre-serialised JSON; `response_model` still documents the shape.
# Served by `SubmitFastPath` (api/submit_route.py) in front of the router; this route documents
# it in OpenAPI and is what the tests hold that path to.
_REPLAY = {
    "model": JobOut,
    "description": f"a retried submit: an earlier request with this {IDEMPOTENCY_KEY} made the "
    "job, answered as it is now; nothing new was queued",
    "headers": {REPLAYED_HEADER: {"description": "true", "schema": {"type": "string"}}},
}


@router.post("", status_code=201, response_model=JobOut, responses={200: _REPLAY})
async def submit_job(
    request: Request,
    body: JobSubmitIn,
    server: Server,
    actor: Actor,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_KEY,
            description=f"1 to {MAX_KEY_CHARS} printable ASCII characters, e.g. a fresh uuid4 "
            "per job: a retry of this submit with the same key (same user, same job) answers "
            "the job it made (200) instead of queueing another; the same key with another "
            "job is 422, a malformed key 400",
        ),
    ] = None,
) -> Response:
    # Every value, as the fast path sees them (the parameter above is the last one's).
    key = idempotency_key_of(request.headers.getlist(IDEMPOTENCY_KEY))
    answer, replayed = await submit(server, body, actor, str(Path.home()), key)
    if replayed:
        return _json(answer, headers={REPLAYED_HEADER: "true"})
    return _json(answer, status=201)


@router.post("/dry-run")
def dry_run(body: JobSubmitIn, submits: Submits, actor: Actor) -> DryRunOut:
    """Whether the job can ever run here and when it would start, without queueing it."""
    spec = spec_from_wire(body, submits.owner_home(actor), submits.preemptible_default)
    return dry_run_to_wire(submits.dry_run(spec, actor))


@router.get("", response_model=list[JobOut])
async def list_jobs(
    server: Server,
    actor: Actor,
    response: Response,
    all: Annotated[bool, Query(description="include finished jobs (a page of history)")] = False,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE, description="at most this many")] = None,
    before_id: Annotated[int | None, Query(ge=1, description="older than this job")] = None,
    since: Annotated[float | None, Query(description="submitted at or after (Unix time)")] = None,
    state: Annotated[list[JobState] | None, Query(description="only these states")] = None,
    user: Annotated[str | None, Query(max_length=256, description="only this owner")] = None,
    name: Annotated[str | None, Query(max_length=1024, description="only this name")] = None,
) -> Response:
    jobs = await server.reads.list_jobs_async(
        actor, include_finished=all, limit=limit, before_id=before_id, since=since,
        states=state, owner=user, name=name,
    )  # fmt: skip
    estimates = await _estimates(server.scheduler, jobs)

    # Off the event loop: 10,000 jobs are ~150 ms of Python (their reasons and ranks read the
    # last pass's snapshot, no lock), during which submits would wait.
    def listed() -> bytes:
        pending = any(job.state is JobState.PENDING for job in jobs)
        ranks = server.scheduler.ranks() if pending else None
        return _JOB_LIST.dump_json([_listed(server, actor, job, estimates, ranks) for job in jobs])

    body = await asyncio.to_thread(listed)
    headers = {}
    if all and jobs and len(jobs) == min(limit or MAX_PAGE, MAX_PAGE):
        headers["X-Next-Before-Id"] = str(jobs[0].id)  # the cursor of the next (older) page
    return _json(body, headers=headers)


@router.get("/changes", response_class=StreamingResponse, responses={200: EVENT_STREAM})
async def job_changes(server: Server, actor: Actor) -> StreamingResponse:
    """Server-sent events: one `job` event per committed change of any job in the queue
    (`data`: what the queue shows everyone: its id, name, owner, state, version and reason;
    never another user's command, log or environment); `resync` when the stream lost some."""
    return StreamingResponse(_changes(server.feed, actor), media_type="text/event-stream")


async def _changes(feed: ChangeFeed, actor: Principal) -> AsyncIterator[bytes]:
    async with feed.subscribe() as sub:
        yield b": gpuyard job changes\n\n"
        while True:
            change = await sub.get()
            if sub.overflowed:
                sub.overflowed = False
                yield b"event: resync\ndata: {}\n\n"
            if change.removed:  # `clean` forgot a finished job: the queue has not changed
                continue
            # Every job, as the queue lists it to everyone (`_listed`): a live queue page moves
            # other users' jobs too; their details are fetched (and refused) one by one.
            job = redact_job(actor, change.after)
            data = {"id": job.id, "name": job.spec.name, "owner": job.owner,
                    "state": job.state.value, "version": job.version,
                    "reason": wire_reason(job.reason),
                    "at": change.at}  # fmt: skip
            yield f"event: job\ndata: {json.dumps(data)}\n\n".encode()


@router.post("/clean")
def clean_jobs(
    verbs: Verbs,
    actor: Actor,
    older_than: Annotated[
        str | None,
        Query(max_length=32, description="only jobs that ended longer ago (7d, 12h, 1-00:00)"),
    ] = None,
    user: Annotated[
        str | None, Query(max_length=256, description="only this user's (an admin's choice)")
    ] = None,
) -> CleanOut:
    """Forget finished jobs, their records and folders (pueue's clean): an admin's for
    everyone, a user's own; pending and running jobs are never touched."""
    age_s = None if older_than is None else parse_duration_s(older_than, field="older_than")
    done = verbs.clean(actor, older_than_s=age_s, owner=user)
    return CleanOut(cleaned=done.jobs, folders_kept=list(done.folders_kept))


@router.post("/cancel")
def cancel_jobs(body: CancelManyIn, server: Server, actor: Actor) -> CancelManyOut:
    """Cancel many jobs in one request: each as `POST /jobs/{id}/cancel` would, the pending
    ones in one durable write per 1,000; a job refused (not found, ended) is listed with why."""
    stop_signal = None if body.signal is None else parse_signal(body.signal, field="signal")
    done = server.verbs.cancel_many(body.ids, actor, stop_signal, whole_arrays=body.whole_arrays)
    refused = [CancelRefusedOut(id=i, code=exc.code, message=exc.message)
               for i, exc in done.refused.items()]  # fmt: skip
    return CancelManyOut(
        cancelled=list(done.cancelled), stopping=list(done.stopping), refused=refused
    )


@router.get("/{job_id}", response_model=JobOut)
async def get_job(job_id: int, server: Server, actor: Actor) -> Response:
    job = await server.reads.get_async(job_id, actor)
    out = _out(server, job, await _estimates(server.scheduler, [job]))
    if job.state in (JobState.PENDING, JobState.RUNNING):
        expected = server.scheduler.expected_run(
            job.owner, job.spec.gpus, job.spec.time_limit_s, job.id
        )
        out = out.model_copy(update=expected_run_fields(expected))
    if job.state is JobState.PENDING:  # why it ranks where it does: under the scheduler's
        # lock, so from a thread (a pass may hold it)
        why = await asyncio.to_thread(server.scheduler.explain, job.id)
        if why is not None:
            out = out.model_copy(update=why.fields())
    return _json(out.model_dump_json())


@router.post("/{job_id}/cancel")
def cancel_job(
    job_id: int,
    server: Server,
    actor: Actor,
    signal: Annotated[
        str | None,
        Query(
            max_length=16,
            description="what a running job's processes get instead of its own stop signal "
            "(a name such as USR1, or a number); SIGKILL follows after the grace period",
        ),
    ] = None,
) -> JobOut:
    stop_signal = None if signal is None else parse_signal(signal, field="signal")
    return _out(server, server.verbs.cancel(job_id, actor, stop_signal), None)


@router.get("/{job_id}/log", response_class=Response, responses={200: LOG_ANSWER})
async def job_log(
    job_id: int,
    reads: Reads,
    actor: Actor,
    offset: Annotated[int, Query(ge=0, le=2**62, description="from this byte")] = 0,
    tail: Annotated[
        int | None, Query(ge=0, le=10**9, description="only the last N lines (then follow)")
    ] = None,
    follow: bool = False,
) -> Response:
    """The job's output, streamed: from `offset`, or its last `tail` lines; `X-Log-Start` is
    where the body starts, `X-Log-Offset` (not following) where to ask for the rest."""
    job = await reads.get_async(job_id, actor)  # from memory while the database is stalled
    log = await asyncio.to_thread(reads.open_job_log, job, offset, tail)
    headers = {"X-Log-Start": str(log.start), "X-Job-State": log.state.value}
    if not follow:
        headers["X-Log-Offset"] = str(log.end)
        return StreamingResponse(
            _stream(log), media_type="text/plain; charset=utf-8", headers=headers
        )
    start = log.start
    log.close()
    return StreamingResponse(
        _follow(reads, actor, job_id, start), media_type="text/plain", headers=headers
    )


async def _stream(log: LogReader) -> AsyncIterator[bytes]:
    """The open log up to its size when opened, a block per thread hop, never all of it in
    memory (a 200 MB log used to be read whole)."""
    try:
        while data := await asyncio.to_thread(log.read, _STREAM_CHUNK):
            yield data
    finally:
        log.close()


async def _follow(
    reads: JobReads, actor: Principal, job_id: int, offset: int
) -> AsyncIterator[bytes]:
    while True:
        job = await reads.get_async(job_id, actor)
        chunk = await asyncio.to_thread(reads.read_job_log, job, offset, _LOG_CHUNK)
        offset = chunk.next_offset
        if chunk.data:
            yield chunk.data
        elif chunk.state.is_terminal:
            return
        else:
            await asyncio.sleep(_FOLLOW_POLL_S)


def _json(body: str | bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type="application/json", headers=headers)
