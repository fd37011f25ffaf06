"""Streams for live pages (server-sent events): the GPUs once a second, and recent events.

`GET /api/v1/gpus/stream`: every GPU's latest telemetry and holders (as `GET /api/v1/gpus`),
sent when it changes, at most once a second. One sampler for all subscribers (`GpuSampler`):
the list is built and serialised once a tick, whatever the number of open dashboards, and the
sampler stops when the last one leaves.

`GET /api/v1/events` and `GET /api/v1/events/stream`: the events ring
(`services/machine/event_ring.py`),
filled by `collect` from the journal's change feed and from the drains as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from gpuyard.api.deps import Actor
from gpuyard.api.routers.gpus import list_gpus
from gpuyard.domain.principal import Principal
from gpuyard.services.machine.event_ring import KINDS, EventLog
from gpuyard.services.server import ServerFacade

log = logging.getLogger("gpuyard.server")

router = APIRouter(prefix="/api/v1", tags=["live"])

TICK_S = 1.0  # the GPU stream's period
DRAIN_POLL_S = 0.5  # how often the collector compares the drains (events within 1 s)
HEARTBEAT_S = 15.0  # a comment line on a quiet stream: a gone client is found out
_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


class GpuSampler:
    """The GPU list as SSE bytes, rebuilt once a tick while anyone subscribes."""

    def __init__(self, server: ServerFacade, period_s: float = TICK_S) -> None:
        self._server = server
        self._period_s = period_s
        self._subscribers: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None
        self.frame: bytes = b""
        self.seq = 0
        self.ticks = 0  # lists built (one per tick, whatever the subscribers: the bench's)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Event]:
        woken = asyncio.Event()
        self._subscribers.add(woken)
        if self._task is None or self._task.done():
            await self._sample()  # the first frame at once, not a tick later
            self._task = asyncio.create_task(self._run())
        woken.set()
        try:
            yield woken
        finally:
            self._subscribers.discard(woken)
            if not self._subscribers and self._task is not None:
                self._task.cancel()
                self._task = None

    async def _run(self) -> None:
        while self._subscribers:
            await asyncio.sleep(self._period_s)
            try:
                await self._sample()
            except Exception:  # a bad tick must not end every dashboard's stream
                log.exception("GPU stream: sampling failed")

    async def _sample(self) -> None:
        frame = await asyncio.to_thread(self._build)
        self.ticks += 1
        if frame != self.frame:
            self.frame, self.seq = frame, self.seq + 1
            for woken in tuple(self._subscribers):
                woken.set()

    def _build(self) -> bytes:
        gpus = list_gpus(self._server.service, self._server.auth.principal)
        data = json.dumps([g.model_dump(mode="json") for g in gpus], separators=(",", ":"))
        return f"event: gpus\ndata: {data}\n\n".encode()


async def collect(server: ServerFacade, events: EventLog) -> None:
    """Fill the events ring for the app's life: job changes from the journal's feed (as they
    commit), drains and hot GPUs compared every `DRAIN_POLL_S`."""

    async def drains() -> None:
        while True:
            service = server.service
            try:
                events.drains_now(service.drains(), service.hot_gpus())
            except Exception:
                log.exception("events: reading the drains failed")
            await asyncio.sleep(DRAIN_POLL_S)

    watcher = asyncio.create_task(drains())
    try:
        async with server.feed.subscribe() as sub:
            while True:
                events.job_change(await sub.get())
    finally:
        watcher.cancel()


def _sampler(request: Request) -> GpuSampler:
    sampler: GpuSampler = request.app.state.gpu_sampler
    return sampler


def _events(request: Request) -> EventLog:
    found: EventLog = request.app.state.events
    return found


@router.get("/gpus/stream", response_class=StreamingResponse, tags=["gpus"])
async def gpu_stream(request: Request, actor: Actor) -> StreamingResponse:
    """Server-sent events: `event: gpus`, `data`: the GPUs as `GET /api/v1/gpus` lists them
    (telemetry, holders, drains), at once and then whenever they change, at most once a
    second."""
    return StreamingResponse(
        _gpu_frames(_sampler(request)), media_type="text/event-stream", headers=_SSE_HEADERS
    )


async def _gpu_frames(sampler: GpuSampler) -> AsyncIterator[bytes]:
    async with sampler.subscribe() as woken:
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
    request: Request,
    actor: Actor,
    since: Since = None,
    after: After = 0,
    kind: Kind = None,
) -> list[EventOut]:
    """Recent events (the last 1,000 the server saw since it started), oldest first."""
    found = _events(request).recent(after, _since_at(since))
    return [EventOut(**e.to_wire()) for e in found if kind is None or e.kind in kind]


@router.get("/events/stream", response_class=StreamingResponse, tags=["events"])
async def event_stream(
    request: Request,
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
        _event_frames(_events(request), actor, after, _since_at(since)),
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
        if sent > events.last_id:  # an id of the server's previous life (ids restart at 1)
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


def live_state(server: ServerFacade) -> dict[str, Any]:
    """What create_app keeps on app.state for these routes."""
    return {"gpu_sampler": GpuSampler(server), "events": EventLog()}
