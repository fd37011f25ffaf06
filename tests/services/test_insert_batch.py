"""Submits of one event-loop turn are written together; each is acknowledged only once durable,
a bad job does not fail its neighbours, and a cancelled submit does not cancel theirs."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.services.jobs.insert_batch import InsertBatcher
from tests.contract.stores import pending_job


def _store(tmp_path: Path) -> SqlJobStore:
    return SqlJobStore(sqlite_url(tmp_path / "gpuyard.db"))


def test_one_turns_submits_are_one_write_and_durable_when_acknowledged(tmp_path: Path) -> None:
    store = _store(tmp_path)
    writes: list[list[int]] = []
    write_future = store.write_future

    def counted(inserts, updates):  # type: ignore[no-untyped-def]
        writes.append([job.id for job in inserts])
        return write_future(inserts, updates)

    store.write_future = counted  # type: ignore[method-assign]
    batcher = InsertBatcher(store)

    async def main() -> None:
        await asyncio.gather(*(batcher.insert(pending_job(i)) for i in (1, 2, 3)))
        assert [j.id for j in store.load_jobs()] == [1, 2, 3]  # on disk before acknowledged
        await batcher.insert(pending_job(4))

    try:
        asyncio.run(main())
    finally:
        store.close()
    assert writes == [[1, 2, 3], [4]]


def test_a_bad_job_fails_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write([pending_job(2)], [])
    batcher = InsertBatcher(store)

    async def main() -> list[BaseException | None]:
        results = await asyncio.gather(
            *(batcher.insert(pending_job(i)) for i in (1, 2, 3)), return_exceptions=True
        )
        return list(results)

    try:
        first, duplicate, third = asyncio.run(main())
        assert first is None and third is None
        assert isinstance(duplicate, Exception)  # id 2 is taken: the database refuses it
        assert [j.id for j in store.load_jobs()] == [1, 2, 3]
    finally:
        store.close()


def test_a_cancelled_submit_does_not_cancel_its_neighbours(tmp_path: Path) -> None:
    store = _store(tmp_path)
    batcher = InsertBatcher(store)

    async def main() -> None:
        tasks = [asyncio.create_task(batcher.insert(pending_job(i))) for i in (1, 2)]
        await asyncio.sleep(0)  # both queued, the write under way
        tasks[0].cancel()
        await tasks[1]
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]

    try:
        asyncio.run(main())
        assert [j.id for j in store.load_jobs()] == [1, 2]  # the write itself went ahead
    finally:
        store.close()


def test_a_closed_store_fails_the_submit(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(InsertBatcher(store).insert(pending_job(1)))


def test_event_loops_in_several_threads_never_share_a_batch(tmp_path: Path) -> None:
    store = _store(tmp_path)
    batcher = InsertBatcher(store)
    errors: list[BaseException] = []

    def run(first: int) -> None:
        async def main() -> None:
            for start in range(first, first + 100, 10):
                await asyncio.gather(
                    *(batcher.insert(pending_job(i)) for i in range(start, start + 10))
                )

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(1000 * t,)) for t in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert errors == []
        assert len(store.load_jobs()) == 400
    finally:
        store.close()
