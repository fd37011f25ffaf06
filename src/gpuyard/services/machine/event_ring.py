"""What happened to the machine and its jobs lately, for the dashboard's events page: GPUs
drained and resumed (an XID, a GPU too hot, an admin), jobs killed for GPU memory, cancelled
for idling, preempted, requeued, ended by a GPU failure.

A bounded ring in memory (the last `size` events, ids counting up from 1), cheap to add to
(from the journal's lock too): a store given (`EventStore`), the ring is kept there as well,
written a batch at a time by the saver's thread (`EventSaver`: every second, and at stop) and
pruned to the same last `size`, so after a restart the page shows what happened before it,
and ids go on from the last one kept. The journal (job states, reasons, attempts) and the
drains table remain the record events are told from.
Events are told as they happen: by the journal (`job_change`, an in-order observer), by the
drain service (`drain_changed`, a drain listener) and by each telemetry sample
(`hot_now`, the GPUs placed last), each compared with what the ring last heard.

Subscribers (an SSE stream each) are woken, never queued to: each reads the ring from the
last id it sent, so a slow one costs nothing and, fallen more than `size` behind, is told so
(`resync`)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from gpuyard.domain.job import REASON_PREEMPTED, Drain, Job
from gpuyard.domain.states import JobState
from gpuyard.services.access.rules import public_name
from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.stores import Event, EventStore
from gpuyard.services.ticker import Ticker

log = logging.getLogger("gpuyard.events")

RING_SIZE = 1_000

# Event kinds (stable: the page and the API's clients filter on them).
DRAIN, RESUME, XID, HOT = "drain", "resume", "xid", "hot"
OOM_KILL, IDLE_CANCEL, PREEMPTION, REQUEUE, NODE_FAIL = (
    "oom_kill", "idle_cancel", "preemption", "requeue", "node_fail",
)  # fmt: skip
NODE_JOIN = "node_join"  # a machine joined the running cluster
KINDS = (DRAIN, RESUME, XID, HOT, OOM_KILL, IDLE_CANCEL, PREEMPTION, REQUEUE, NODE_FAIL, NODE_JOIN)


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
    return f"job {job.id} ({public_name(job)}, {job.owner})"  # every user reads the events


class EventLog:
    """The ring. `add` and the listeners from any thread; `subscribe` on the subscriber's
    event loop."""

    def __init__(
        self,
        size: int = RING_SIZE,
        clock: Callable[[], float] = time.time,
        store: EventStore | None = None,
    ) -> None:
        self._size = size
        self._ring: deque[Event] = deque(maxlen=size)
        self._next_id = 1
        self._lock = threading.Lock()
        self._store = store
        self._unsaved: list[Event] = []  # added since the last `save`, under `_lock`
        if store is not None:  # the events of the server's earlier lives
            self._ring.extend(store.load_events(size))
            self._next_id = self._ring[-1].id + 1 if self._ring else 1
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
                public_name(job) if job else None, gpu,
            )  # fmt: skip
            self._next_id += 1
            self._ring.append(event)
            if self._store is not None:
                self._unsaved.append(event)
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

    def save(self) -> None:
        """Write the events added since the last save to the store in one transaction, and
        forget there those the ring no longer holds (the saver's thread; a failed write is
        tried again with the next)."""
        if self._store is None:
            return
        with self._lock:
            batch, self._unsaved = self._unsaved, []
            oldest = self._ring[0].id if self._ring else self._next_id
        if not batch:
            return
        try:
            self._store.save_events(batch)
            self._store.prune_events(oldest)
        except Exception:
            with self._lock:
                self._unsaved[:0] = [e for e in batch if e.id >= oldest]
            raise

    def drains_in_force(self, drains: Mapping[int, Drain]) -> None:
        """The drains still in force at a start, told once so the page shows why a GPU is out
        (a restart is no other news: a drain the kept events told already is not told
        again)."""
        with self._lock:
            told = {(e.gpu, e.at) for e in self._ring if e.kind in (DRAIN, XID)}
        for index, drain in sorted(drains.items()):
            if (index, drain.drained_at) in told:
                with self._seen_lock:
                    self._drains[index] = drain
                continue
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


class EventSaver:
    """The thread that keeps the ring in its store (a server's background thread): a save a
    second, and a last one at stop."""

    def __init__(self, events: EventLog, period_s: float = 1.0) -> None:
        self._events = events
        self._ticker = Ticker(
            "gpuyard-events", events.save, lambda: period_s, log, "saving events failed"
        )

    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()
        try:
            self._events.save()
        except Exception:
            log.exception("saving events failed")
