"""What happened to the machine and its jobs lately, for the dashboard's events page: GPUs
drained and resumed (an XID, a GPU too hot, an admin), jobs killed for GPU memory, cancelled
for idling, preempted, requeued, ended by a GPU failure.

A bounded ring in memory (the last `size` events, ids counting up from 1 for the server's
life): cheap to keep, and the journal (job states, reasons, attempts) and the drains table
remain the durable record; after a restart the page starts from the drains still in force.
Events are told as they happen: by the journal (`job_change`, an in-order observer), by the
drain service (`drain_changed`, a drain listener) and by each telemetry sample
(`hot_now`, the GPUs placed last), each compared with what the ring last heard.

Subscribers (an SSE stream each) are woken, never queued to: each reads the ring from the
last id it sent, so a slow one costs nothing and, fallen more than `size` behind, is told so
(`resync`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gpuyard.domain.job import REASON_PREEMPTED, Drain, Job
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.journal import JobChange

RING_SIZE = 1_000

# Event kinds (stable: the page and the API's clients filter on them).
DRAIN, RESUME, XID, HOT = "drain", "resume", "xid", "hot"
OOM_KILL, IDLE_CANCEL, PREEMPTION, REQUEUE, NODE_FAIL = (
    "oom_kill", "idle_cancel", "preemption", "requeue", "node_fail",
)  # fmt: skip
KINDS = (DRAIN, RESUME, XID, HOT, OOM_KILL, IDLE_CANCEL, PREEMPTION, REQUEUE, NODE_FAIL)


@dataclass(frozen=True, slots=True)
class Event:
    """One event. `job_id`/`owner`/`name` for a job's (what the queue shows everyone: never
    the command or the log), `gpu` for a GPU's."""

    id: int
    at: float  # epoch seconds
    kind: str
    message: str
    job_id: int | None = None
    owner: str | None = None
    name: str | None = None
    gpu: int | None = None

    def to_wire(self) -> dict[str, object]:
        return {
            "id": self.id, "at": self.at, "kind": self.kind, "message": self.message,
            "job_id": self.job_id, "owner": self.owner, "name": self.name, "gpu": self.gpu,
        }  # fmt: skip


def classify(change: JobChange) -> tuple[str, str] | None:
    """The event a committed job change is, as (kind, message), or None (most changes)."""
    before, job = change.before, change.after
    if before is None or (before.state is job.state and before.restarts == job.restarts):
        return None
    who = _who(job)
    if job.state is JobState.OUT_OF_MEMORY:
        return OOM_KILL, f"{who} was ended: out of GPU memory ({job.reason})"
    if job.state is JobState.NODE_FAIL:
        return NODE_FAIL, f"{who} ended: its GPU failed ({job.reason})"
    if job.state is JobState.CANCELLED and "idle" in job.reason.lower():
        return IDLE_CANCEL, f"{who} was cancelled for idling: {job.reason}"
    if job.state is JobState.PENDING and before.state is JobState.RUNNING:
        if job.reason == REASON_PREEMPTED or before.stop_intent is JobState.PENDING:
            return PREEMPTION, f"{who} was preempted and requeued"
        return REQUEUE, f"{who} was requeued ({job.reason})"
    return None


def _who(job: Job) -> str:
    return f"job {job.id} ({job.spec.name}, {job.owner})"


class EventLog:
    """The ring. `add` and the listeners from any thread; `subscribe` on the subscriber's
    event loop."""

    def __init__(self, size: int = RING_SIZE, clock: Callable[[], float] = time.time) -> None:
        self._ring: deque[Event] = deque(maxlen=size)
        self._next_id = 1
        self._lock = threading.Lock()
        self._clock = clock
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        # What the ring last heard of drains and hot GPUs (what is news), under `_seen_lock`.
        self._seen_lock = threading.Lock()
        self._drains: dict[int, Drain] = {}
        self._hot: dict[int, str] = {}

    def add(
        self,
        kind: str,
        message: str,
        *,
        at: float | None = None,
        job: Job | None = None,
        gpu: int | None = None,
    ) -> Event:
        with self._lock:
            event = Event(
                self._next_id, self._clock() if at is None else at, kind, message,
                job.id if job else None, job.owner if job else None,
                job.spec.name if job else None, gpu,
            )  # fmt: skip
            self._next_id += 1
            self._ring.append(event)
            waiters = tuple(self._waiters)
        for loop, woken in waiters:
            try:
                loop.call_soon_threadsafe(woken.set)
            except RuntimeError:  # its loop closed: the subscriber has gone
                pass
        return event

    def job_change(self, change: JobChange) -> None:
        """A journal observer: the change as an event, when it is one."""
        found = classify(change)
        if found is not None:
            self.add(found[0], found[1], at=change.at, job=change.after)

    def drains_in_force(self, drains: Mapping[int, Drain]) -> None:
        """The drains still in force at a start, told once so the page shows why a GPU is out
        (a restart is no other news)."""
        for index, drain in sorted(drains.items()):
            self.drain_changed(index, drain)

    def drain_changed(self, gpu_index: int, drain: Drain | None) -> None:
        """A drain listener: a GPU drained (`drain`) or back in service (None), as an event
        unless the ring knew it so already (a resume only of a drain it told)."""
        with self._seen_lock:
            before = self._drains.get(gpu_index)
            if drain is None:
                if gpu_index in self._drains:
                    del self._drains[gpu_index]
                    self.add(RESUME, f"GPU {gpu_index} resumed", gpu=gpu_index)
                return
            if before == drain:
                return
            self._drains[gpu_index] = drain
            auto = drain.source == "auto"
            kind = XID if auto and "xid" in drain.reason.lower() else DRAIN
            by = "automatically" if auto else f"by {drain.source}"
            self.add(kind, f"GPU {gpu_index} drained {by}: {drain.reason}", at=drain.drained_at,
                     gpu=gpu_index)  # fmt: skip

    def hot_now(self, hot: Mapping[int, str]) -> None:
        """The GPUs placed last and why, after a telemetry sample: a GPU newly hot, or hot for
        another reason, is an event (one cooling down is not)."""
        with self._seen_lock:
            for index, why in sorted(hot.items()):
                if self._hot.get(index) != why:
                    self.add(HOT, f"GPU {index} placed last: {why}", gpu=index)
            self._hot = dict(hot)

    def recent(self, after_id: int = 0, since_at: float | None = None) -> list[Event]:
        """The events kept with an id above `after_id` and at or after `since_at`, oldest
        first."""
        with self._lock:
            events = list(self._ring)
        return [e for e in events if e.id > after_id and (since_at is None or e.at >= since_at)]

    @property
    def last_id(self) -> int:
        return self._next_id - 1

    def oldest_id(self) -> int:
        with self._lock:
            return self._ring[0].id if self._ring else self._next_id

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Event]:
        """An asyncio.Event set whenever an event is added (clear it, then read `recent`)."""
        woken = asyncio.Event()
        waiter = (asyncio.get_running_loop(), woken)
        with self._lock:
            self._waiters.add(waiter)
        try:
            yield woken
        finally:
            with self._lock:
                self._waiters.discard(waiter)
