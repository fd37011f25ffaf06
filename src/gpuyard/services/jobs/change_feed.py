"""The live feed of job changes: a journal observer that hands each committed change to the
asyncio subscribers (a streaming HTTP route), so a client follows the queue without polling it.

Publishing never blocks the journal: each subscriber has a bounded queue on its own event loop,
filled with `call_soon_threadsafe`; a subscriber too slow to keep up loses changes and is told
so once (`overflowed`), so it can re-read the queue instead of trusting a partial stream.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gpuyard.services.jobs.journal import JobChange

_QUEUE_SIZE = 10_000


class Subscription:
    """One subscriber's changes, in commit order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[JobChange] = asyncio.Queue(size)
        self.overflowed = False

    def offer(self, change: JobChange) -> None:
        """From any thread."""
        try:
            self._loop.call_soon_threadsafe(self._put, change)
        except RuntimeError:  # its loop is closed: the subscriber has gone
            pass

    def _put(self, change: JobChange) -> None:
        try:
            self._queue.put_nowait(change)
        except asyncio.QueueFull:
            self.overflowed = True

    async def get(self) -> JobChange:
        return await self._queue.get()


class ChangeFeed:
    """Registered on the journal as an in-order observer."""

    def __init__(self, queue_size: int = _QUEUE_SIZE) -> None:
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._queue_size = queue_size

    def __call__(self, change: JobChange) -> None:
        with self._lock:
            subscribers = tuple(self._subscribers)
        for subscriber in subscribers:
            subscriber.offer(change)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Subscription]:
        """`async with feed.subscribe() as sub:` on the subscriber's event loop; it is removed
        when the block is left (client gone, server stopping)."""
        sub = Subscription(asyncio.get_running_loop(), self._queue_size)
        with self._lock:
            self._subscribers.add(sub)
        try:
            yield sub
        finally:
            with self._lock:
                self._subscribers.discard(sub)
