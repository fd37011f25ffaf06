"""Group commit: many request threads hand their rows to one writer, which commits a batch in
one transaction (one fsync) and then acknowledges every request in it.

With `synchronous=FULL` one fsync per request would cap submits at the disk's fsync rate;
batching keeps every acknowledgement durable while throughput grows with concurrency.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")


@dataclass(slots=True)
class _Ticket(Generic[Item]):
    item: Item
    done: Future[None] = field(default_factory=Future)
    error: BaseException | None = None


class GroupCommitWriter(Generic[Item]):
    """Runs `commit_batch(items)` on one thread; `submit(item)` blocks until its batch is
    committed (`submit_future` returns a Future instead, for async callers). If a batch
    fails, each of its items is retried alone so one bad item cannot fail its neighbours."""

    def __init__(
        self, commit_batch: Callable[[Sequence[Item]], None], *, max_batch: int = 512
    ) -> None:
        self._commit_batch = commit_batch
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Ticket[Item] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="gpuyard-writer", daemon=True)
        self._closed = False
        self._lock = threading.Lock()
        self._thread.start()

    def submit(self, item: Item) -> None:
        self.submit_future(item).result()

    def submit_future(self, item: Item) -> Future[None]:
        ticket: _Ticket[Item] = _Ticket(item)
        with self._lock:
            if self._closed:
                raise RuntimeError("the store is closed")
            self._queue.put(ticket)
        return ticket.done

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)  # after this, nothing else can be queued
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Ticket[Item]]) -> None:
        settled = 0  # tickets whose fate is known, in batch order
        try:
            try:
                self._commit_batch([t.item for t in batch])
                settled = len(batch)
            except Exception as err:
                if len(batch) == 1:
                    batch[0].error = err
                    settled = 1
                else:  # retry each alone: one bad item must not fail its neighbours
                    for ticket in batch:
                        try:
                            self._commit_batch([ticket.item])
                        except Exception as one:
                            ticket.error = one
                        settled += 1
        except BaseException as err:  # SystemExit and the like: never retried, never lost
            for ticket in batch[settled:]:
                ticket.error = err
        for ticket in batch:
            try:
                if ticket.error is None:
                    ticket.done.set_result(None)
                else:
                    ticket.done.set_exception(ticket.error)
            except InvalidStateError:  # its caller cancelled the wait: the writer goes on
                pass
