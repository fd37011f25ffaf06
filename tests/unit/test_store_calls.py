"""The request path's store calls (`services/store_calls.py`): a call the database does not
answer is given up at the deadline (503 with Retry-After) and left to finish in its thread; the
pool never grows past its bound, refusing at once beyond it; a call still queued when its
request gave up never runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from gpuyard.domain.errors import DatabaseStalled
from gpuyard.services.store_calls import StoreCalls

DEADLINE_S = 0.2
T = TypeVar("T")


def test_a_call_past_the_deadline_is_refused_and_finishes_in_its_thread() -> None:
    calls = StoreCalls(deadline_s=DEADLINE_S, workers=1, queue=0)
    release, finished = threading.Event(), threading.Event()

    def stalled_read() -> str:
        release.wait(30)
        finished.set()
        return "row"

    async def main() -> None:
        with pytest.raises(DatabaseStalled) as refused:
            await calls.run(stalled_read)
        assert refused.value.retry_after_s >= 1
        assert "the database is not answering; try again in" in refused.value.message
        release.set()
        assert await asyncio.to_thread(finished.wait, 30)  # it ran on, in its own thread
        # Its worker is free again: the next call answers.
        assert await _eventually(lambda: calls.run(lambda: 42)) == 42

    try:
        asyncio.run(main())
    finally:
        release.set()
        calls.close()


def test_past_its_workers_and_queue_a_call_is_refused_at_once_and_starts_no_thread() -> None:
    calls = StoreCalls(deadline_s=30, workers=1, queue=1)
    release = threading.Event()
    ran: list[str] = []

    def stalled(name: str) -> None:
        ran.append(name)
        release.wait(30)

    async def main() -> None:
        first = asyncio.ensure_future(calls.run(stalled, "first"))
        queued = asyncio.ensure_future(calls.run(stalled, "queued"))
        await asyncio.sleep(0)  # both handed to the pool
        threads = threading.active_count()
        began = time.monotonic()
        with pytest.raises(DatabaseStalled):
            await calls.run(stalled, "third")
        assert time.monotonic() - began < 1.0  # at once, not after the deadline
        assert threading.active_count() == threads
        release.set()
        await asyncio.gather(first, queued)
        assert ran == ["first", "queued"]

    try:
        asyncio.run(main())
    finally:
        release.set()
        calls.close()


def test_a_queued_call_whose_request_gave_up_never_runs() -> None:
    calls = StoreCalls(deadline_s=DEADLINE_S, workers=1, queue=1)
    release = threading.Event()
    ran: list[str] = []

    def stalled(name: str) -> None:
        ran.append(name)
        release.wait(30)

    async def main() -> None:
        results = await asyncio.gather(
            calls.run(stalled, "running"), calls.run(stalled, "queued"), return_exceptions=True
        )
        assert all(isinstance(r, DatabaseStalled) for r in results)
        release.set()
        assert await _eventually(lambda: calls.run(lambda: "next")) == "next"
        assert ran == ["running"]

    try:
        asyncio.run(main())
    finally:
        release.set()
        calls.close()


async def _eventually(call: Callable[[], Awaitable[T]]) -> T:
    """The call's answer once the pool has room again (its finished calls counted out)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await call()
        except DatabaseStalled:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


def test_a_call_behind_a_busy_store_waits_while_the_calls_ahead_of_it_land() -> None:
    """A loaded server is not a stalled one: a call queued behind others that keep coming back
    waits past the deadline and is answered (a show of a finished job took 2.03 s at load 5.7
    and was refused before)."""
    calls = StoreCalls(deadline_s=DEADLINE_S, workers=1, queue=10)

    def busy_read(i: int) -> int:
        time.sleep(DEADLINE_S / 2)  # the work of one call: 6 of them take 3 deadlines
        return i

    async def main() -> list[int]:
        return await asyncio.gather(*(calls.run(busy_read, i) for i in range(6)))

    try:
        assert asyncio.run(main()) == list(range(6))
    finally:
        calls.close()
