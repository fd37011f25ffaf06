"""Streams for live pages (server-sent events): the GPUs once a second, and recent events.

`GET /api/v1/gpus/stream`: every GPU's latest telemetry and holders (as `GET /api/v1/gpus`),
sent when it changes, at most once a second. One sampler for all subscribers (the server's
`GpuSampler`, `services/machine/gpu_stream.py`): the list is built and serialised once a tick,
whatever the number of open dashboards, and the sampler stops when the last one leaves.

`GET /api/v1/events` and `GET /api/v1/events/stream`: the events ring
(`services/machine/event_ring.py`), told by the journal, the drains and the telemetry as things
happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from gpuyard.api.deps import Actor, Server
from gpuyard.api.openapi_doc import EVENT_STREAM
from gpuyard.api.routers.gpus import list_gpus
from gpuyard.domain.principal import Principal
from gpuyard.services.machine.event_ring import KINDS, EventLog
from gpuyard.services.server import ServerFacade

router = APIRouter(prefix="/api/v1", tags=["live"])

HEARTBEAT_S = 15.0  # a comment line on a quiet stream: a gone client is found out
_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _gpu_frame(server: ServerFacade) -> bytes:
    """The GPU stream's frame: the GPUs as `GET /api/v1/gpus` lists them, as one SSE event."""
    gpus = list_gpus(server, server.auth.principal)
    data = json.dumps([g.model_dump(mode="json") for g in gpus], separators=(",", ":"))
    return f"event: gpus\ndata: {data}\n\n".encode()


@router.get(
    "/gpus/stream", response_class=StreamingResponse, tags=["gpus"], responses={200: EVENT_STREAM}
)
async def gpu_stream(server: Server, actor: Actor) -> StreamingResponse:
    """Server-sent events: `event: gpus`, `data`: the GPUs as `GET /api/v1/gpus` lists them
    (telemetry, holders, drains), at once and then whenever they change, at most once a
    second."""
    return StreamingResponse(
        _gpu_frames(server), media_type="text/event-stream", headers=_SSE_HEADERS
    )


async def _gpu_frames(server: ServerFacade) -> AsyncIterator[bytes]:
    sampler = server.gpu_sampler
    async with sampler.subscribe(partial(_gpu_frame, server)) as woken:
        yield b": gpuyard gpus\n\n"
        sent = -1
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), HEARTBEAT_S)
            woken.clear()  # before reading: a frame made meanwhile wakes the next wait
            if sampler.seq != sent:
                sent = sampler.seq
                yield sampler.frame
            else:
                yield b": still here\n\n"


class EventOut(BaseModel):
    """One event: `kind` one of drain, resume, xid, hot, oom_kill, idle_cancel, preemption,
    requeue, node_fail; `job_id`/`owner`/`name` for a job's, `gpu` for a GPU's."""

    id: int
    at: float
    kind: str
    message: str
    job_id: int | None
    owner: str | None
    name: str | None
    gpu: int | None


Since = Annotated[
    float | None,
    Query(
        ge=0,
        le=1e11,
        description="only events this many seconds back, or at or after this epoch time "
        "(a value above 1e9)",
    ),
]
After = Annotated[
    int, Query(ge=0, le=2**62, description="only events with a larger id (to resume a page)")
]
Kind = Annotated[list[str] | None, Query(description=f"only these kinds ({', '.join(KINDS)})")]


def _since_at(since: float | None) -> float | None:
    if since is None:
        return None
    return since if since > 1e9 else time.time() - since


@router.get("/events", tags=["events"])
async def list_events(
    server: Server,
    actor: Actor,
    since: Since = None,
    after: After = 0,
    kind: Kind = None,
) -> list[EventOut]:
    """Recent events (the last 1,000, kept across the server's restarts), oldest first."""
    found = server.events.recent(after, _since_at(since))
    return [EventOut(**e.to_wire()) for e in found if kind is None or e.kind in kind]


@router.get(
    "/events/stream",
    response_class=StreamingResponse,
    tags=["events"],
    responses={200: EVENT_STREAM},
)
async def event_stream(
    server: Server,
    actor: Actor,
    since: Since = None,
    after: After = 0,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=32,
            description="sent by a reconnecting EventSource: resume after it",
        ),
    ] = None,
) -> StreamingResponse:
    """Server-sent events: `event: event` per event (`id:` its id; `data` as in `GET
    /api/v1/events`): those kept after `after` (or `since`), then each as it happens;
    `event: resync` (as the change feed says it) when some went from the ring unsent:
    re-read `GET /api/v1/events`."""
    if last_event_id is not None and last_event_id.isdigit():
        after = max(after, int(last_event_id))
    return StreamingResponse(
        _event_frames(server.events, actor, after, _since_at(since)),
        media_type="text/event-stream",
        headers=_SSE_HEADERS,
    )


async def _event_frames(
    events: EventLog, actor: Principal, after: int, since_at: float | None
) -> AsyncIterator[bytes]:
    del actor  # events say what the queue shows everyone: no one's details
    async with events.subscribe() as woken:
        yield b": gpuyard events\n\n"
        sent = after
        if sent > events.last_id:  # an id of another state dir's (this one's count lower)
            yield b"event: resync\ndata: {}\n\n"
            sent = 0
        while True:
            woken.clear()  # before reading: an event added meanwhile wakes the next wait
            if sent and events.oldest_id() > sent + 1:
                yield b"event: resync\ndata: {}\n\n"
            for event in events.recent(sent, since_at):
                sent = event.id
                data = json.dumps(event.to_wire(), separators=(",", ":"))
                yield f"id: {event.id}\nevent: event\ndata: {data}\n\n".encode()
            since_at = None
            try:
                await asyncio.wait_for(woken.wait(), HEARTBEAT_S)
            except TimeoutError:
                yield b": still here\n\n"
