"""The GPU stream's one sampler: the GPUs' frame (SSE bytes) rebuilt once a tick while anyone
follows it, whatever the number of open dashboards, and stopped when the last one leaves.

The frame is made by the caller's `build` (the API's: the GPU list as `GET /api/v1/gpus`
serialises it), in a worker thread; subscribers are woken when it changes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

log = logging.getLogger("gpuyard.server")

TICK_S = 1.0  # the GPU stream's period


class GpuSampler:
    """The GPU frame, rebuilt once a tick while anyone subscribes."""

    def __init__(self, period_s: float = TICK_S) -> None:
        self._period_s = period_s
        self._subscribers: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None
        self._build: Callable[[], bytes] = lambda: b""
        self.frame: bytes = b""
        self.seq = 0
        self.ticks = 0  # frames built (one per tick, whatever the subscribers: the bench's)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @contextlib.asynccontextmanager
    async def subscribe(self, build: Callable[[], bytes]) -> AsyncIterator[asyncio.Event]:
        """An asyncio.Event set when `frame` changes; `build` makes a frame (the same for every
        subscriber: the latest one given is used)."""
        self._build = build
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
