"""Store calls on the request path: off the event loop, each with a deadline, in a small pool.

A stalled database (PostgreSQL stopped, a hung disk under SQLite) does not fail a call: it never
returns. Made on the event loop, one such call froze every request, `/healthz` too, for as long
as the stall lasted (20 s measured, issue 22). Here a request's store call runs in one of a few
threads of its own and is awaited for `DB_REQUEST_DEADLINE_S`; past it, once the store has
answered no call for a whole deadline (a busy server's calls go on landing: those wait on, up to
`_BUSY_DEADLINES`), the request is answered 503 with Retry-After (`DatabaseStalled`) and the
call is left to finish in its thread (a thread cannot be interrupted; a call still queued when
its request gives up is dropped). The pool is bounded: past `workers + queue` calls in flight a
request is refused at once rather than queueing threads behind a database that is not answering.
What the server holds in memory and in files (the book, logs) never comes here, so it keeps
answering.

Worked example: PostgreSQL is SIGSTOPped; `GET /jobs?all=true` hands its page query to a worker,
waits 2 s and answers 503 "the database is not answering; try again in 5 s" while the worker
stays blocked; `GET /jobs/41` (a running job, in the book) answers in a millisecond meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from gpuyard.domain.errors import DatabaseStalled

DB_REQUEST_DEADLINE_S = 2.0  # how long a request waits for the database (the target)
RETRY_AFTER_S = 5  # what a refused request is told to wait
# Store calls of requests running at once, and waiting for a worker; past both, refused at
# once. 4 and 32 refused keyed submits of a healthy loaded server (bench/mixed_load.py, 50
# clients: their key lookups queued behind history pages); a stall holds at most 8 threads.
_WORKERS = 8
_QUEUE = 256
# A call the store is slow to reach (others answered meanwhile: a busy server, not a stalled
# one) waits up to this many deadlines (a show of a finished job took 2.03 s at load 5.7).
_BUSY_DEADLINES = 5.0

P = ParamSpec("P")
T = TypeVar("T")


def stalled_message(what: str = "") -> str:
    """The one line a refused request answers; `what` adds what it means for this request."""
    line = f"the database is not answering; try again in {RETRY_AFTER_S} s"
    return f"{line} ({what})" if what else line


class StoreCalls:
    """`await run(fn, *args)`: `fn(*args)` in a worker, within the deadline, else
    DatabaseStalled. `within(awaitable)`: the same deadline for a write already under way
    (a submit's group commit), which its own code keeps going once the request gives up."""

    def __init__(
        self,
        deadline_s: float = DB_REQUEST_DEADLINE_S,
        workers: int = _WORKERS,
        queue: int = _QUEUE,
    ) -> None:
        self.deadline_s = deadline_s
        self._limit = workers + queue
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gpuyard-store-call")
        self._lock = threading.Lock()  # leaf: a counter
        self._in_flight = 0
        self._answered_at = time.monotonic()  # when the store last answered a call

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run_long(1.0, fn, *args, **kwargs)

    async def run_long(
        self, times: float, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`run` waiting at least `times` the deadline: a call whose healthy answer may take
        longer (a page of 10,000 jobs)."""
        with self._lock:
            if self._in_flight >= self._limit:
                raise DatabaseStalled(stalled_message(), retry_after_s=RETRY_AFTER_S)
            self._in_flight += 1
        try:
            call: Future[T] = self._pool.submit(fn, *args, **kwargs)
        except BaseException:
            self._done(None)
            raise
        call.add_done_callback(self._done)
        return await self._answer(call, self.deadline_s * times)

    async def _answer(self, call: Future[T], first_s: float) -> T:
        """The call's answer; refused once it waited `first_s` and the store has answered no
        call for a whole deadline (a stalled database answers none; a busy one goes on
        answering others, so a call queued behind them waits on, up to `_BUSY_DEADLINES`)."""
        answer = asyncio.wrap_future(call)
        began = time.monotonic()
        cap_s = max(first_s, self.deadline_s * _BUSY_DEADLINES)
        wait_s = first_s
        try:
            while True:
                await asyncio.wait({answer}, timeout=wait_s)
                if answer.done():
                    return answer.result()
                now = time.monotonic()
                quiet_until = self._answered_at + self.deadline_s  # silent for a deadline
                if now >= quiet_until or now - began >= cap_s:
                    break
                wait_s = min(quiet_until, began + cap_s) - now
        finally:
            answer.cancel()  # drops the call if no worker has taken it yet; a running one goes on
        raise DatabaseStalled(stalled_message(), retry_after_s=RETRY_AFTER_S)

    async def within(self, write: Awaitable[T], what: str, *, times: float = 1.0) -> T:
        """`write` awaited up to `times` the deadline (a large write may take longer than a
        stalled database may hold a request); `what`: what the refusal means for the caller
        (the write itself must be shielded by its owner: it is cancelled here)."""
        try:  # a timeout scope, not `wait_for`: no task of its own, two loop turns fewer
            async with asyncio.timeout(self.deadline_s * times):
                return await write
        except TimeoutError:
            raise DatabaseStalled(stalled_message(what), retry_after_s=RETRY_AFTER_S) from None

    def close(self) -> None:
        """Stop taking calls; a call stuck in a stalled database is not waited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _done(self, call: Future[Any] | None) -> None:
        with self._lock:
            self._in_flight -= 1
            if call is not None and not call.cancelled():
                self._answered_at = time.monotonic()
