"""A submit with an Idempotency-Key makes one job per owner and key, however often it is sent:
again at once, concurrently, after a restart, after the job ended, after the book evicted it.
The live server's wiring (`LiveRig`: build_core over a real SQLite file)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gpuyard.domain.errors import InvalidRequest, Unavailable
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from tests.services.live_harness import LiveRig

ADA, BOB = Principal("ada"), Principal("bob")


def _rig(tmp_path: Path) -> LiveRig:
    return LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=2)


def _spec(workdir: str = "/", **changes: object) -> JobSpec:
    spec = JobSpec(argv=("python", "train.py"), name="train", workdir=workdir, gpus=1)
    return replace(spec, **changes)  # type: ignore[arg-type]


def _submit(rig: LiveRig, key: str, spec: JobSpec | None = None, who: Principal = ADA):
    return asyncio.run(rig.submits.submit_once_async(spec or _spec(), who, key))


def test_the_same_key_answers_the_same_job(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    try:
        job, replayed = _submit(rig, "k1")
        again, replayed_again = _submit(rig, "k1")
        assert (replayed, replayed_again) == (False, True)
        assert again.id == job.id and again.idempotency_key == "k1"
        other, _ = _submit(rig, "k2")
        assert other.id != job.id
        assert [j.id for j in rig.store.load_jobs()] == [job.id, other.id]
    finally:
        rig.close()


def test_a_key_outlives_a_restart_and_the_jobs_end(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    job, _ = _submit(rig, "k1")
    rig.processes.work_s[job.id] = 5
    rig.settle()
    assert rig.state(job.id) is JobState.RUNNING
    rig.close()

    rig = _rig(tmp_path)  # a restarted server: the book is rebuilt from the store
    try:
        again, replayed = _submit(rig, "k1")
        assert replayed and again.id == job.id
        rig.store.write([], [again.transition(JobState.COMPLETED, ended_at=9.0, exit_code=0)])
    finally:
        rig.close()

    rig = _rig(tmp_path)
    try:
        done, replayed = _submit(rig, "k1")
        assert replayed and done.id == job.id and done.state is JobState.COMPLETED
        assert len(rig.store.load_jobs()) == 1
    finally:
        rig.close()


def test_a_finished_job_the_book_evicted_is_found_in_the_store(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    try:
        rig.book.keep_finished = 1
        first, _ = _submit(rig, "old")
        second, _ = _submit(rig, "new", _spec(name="later"))
        for job in (first, second):
            rig.verbs.cancel(job.id, ADA)
        assert rig.book.get(first.id) is None  # evicted: only the store has it
        again, replayed = _submit(rig, "old")
        assert replayed and again.id == first.id and again.state is JobState.CANCELLED
        assert len(rig.store.load_jobs()) == 2
    finally:
        rig.close()


def test_the_same_key_with_another_job_is_refused(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    try:
        job, _ = _submit(rig, "k1")
        with pytest.raises(
            InvalidRequest, match=f"already used for another submission \\(job {job.id}\\)"
        ) as err:
            _submit(rig, "k1", _spec(gpus=2))
        assert err.value.field == "Idempotency-Key"
        assert len(rig.store.load_jobs()) == 1
    finally:
        rig.close()


def test_keys_are_per_owner(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    try:
        ada_job, _ = _submit(rig, "shared-key")
        bob_job, replayed = _submit(rig, "shared-key", who=BOB)
        assert not replayed and bob_job.id != ada_job.id and bob_job.owner == "bob"
        # Different specs under one key, but different owners: no refusal either.
        carol_job, replayed = _submit(rig, "shared-key", _spec(gpus=2), Principal("carol"))
        assert not replayed and carol_job.id not in (ada_job.id, bob_job.id)
    finally:
        rig.close()


def test_concurrent_submits_with_one_key_make_one_job(tmp_path: Path) -> None:
    rig = _rig(tmp_path)

    async def burst() -> list[tuple[Job, bool]]:
        return list(
            await asyncio.gather(
                *(rig.submits.submit_once_async(_spec(), ADA, "burst") for _ in range(8))
            )
        )

    try:
        answers = asyncio.run(burst())
        assert len({job.id for job, _ in answers}) == 1
        assert sorted(replayed for _, replayed in answers) == [False] + [True] * 7
        assert len(rig.store.load_jobs()) == 1
    finally:
        rig.close()


def test_concurrent_submits_from_several_event_loops_make_one_job(tmp_path: Path) -> None:
    """Tests and tools may run several loops over one service: the claim is a thread lock's."""
    rig = _rig(tmp_path)
    answers: list[tuple[Job, bool]] = []
    start = threading.Barrier(4)

    def one_loop() -> None:
        start.wait()
        answers.append(_submit(rig, "threads"))

    try:
        threads = [threading.Thread(target=one_loop) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({job.id for job, _ in answers}) == 1
        assert sorted(replayed for _, replayed in answers) == [False, True, True, True]
        assert len(rig.store.load_jobs()) == 1
    finally:
        rig.close()


def test_a_refused_submit_does_not_use_up_its_key(tmp_path: Path) -> None:
    """Nothing written, nothing remembered: the same request with the same key is judged again
    (here: its working directory exists by then), and concurrent ones are each refused."""
    rig = _rig(tmp_path)
    workdir = tmp_path / "run"
    spec = _spec(str(workdir))

    async def two() -> list[object]:
        calls = (rig.submits.submit_once_async(spec, ADA, "k") for _ in range(2))
        return list(await asyncio.gather(*calls, return_exceptions=True))

    try:
        refusals = asyncio.run(two())
        assert all(isinstance(r, InvalidRequest) and r.field == "workdir" for r in refusals)
        workdir.mkdir()
        job, replayed = _submit(rig, "k", spec)
        assert not replayed and rig.store.load_jobs() == [job]
    finally:
        rig.close()


def test_a_key_the_database_cannot_look_up_is_503_and_queues_nothing(tmp_path: Path) -> None:
    """No guess either way: answering "new" could make a second job, "seen" has no job."""
    rig = _rig(tmp_path)
    try:
        with contextlib.closing(sqlite3.connect(tmp_path / "gpuyard.db")) as db:
            db.execute("ALTER TABLE jobs RENAME TO jobs_away")  # the lookup fails for real
            with pytest.raises(Unavailable, match="could not look up this Idempotency-Key"):
                _submit(rig, "k1")
            db.execute("ALTER TABLE jobs_away RENAME TO jobs")
        job, replayed = _submit(rig, "k1")  # the key was not used up
        assert not replayed and rig.store.load_jobs() == [job]
    finally:
        rig.close()


def test_a_finished_script_job_is_replayed_though_the_book_dropped_its_script(
    tmp_path: Path,
) -> None:
    """The book keeps a finished job without its script copy (the store has it): a retry
    carrying the script is the same submission, not another."""
    rig = _rig(tmp_path)
    spec = _spec(argv=("./job.sh",), script="#!/bin/sh\necho hi\n")
    try:
        job, _ = _submit(rig, "script-key", spec)
        rig.verbs.cancel(job.id, ADA)
        kept = rig.book.get(job.id)
        assert kept is not None and kept.spec.script is None
        again, replayed = _submit(rig, "script-key", spec)
        assert replayed and again.id == job.id
        with pytest.raises(InvalidRequest, match="already used"):
            _submit(rig, "script-key", replace(spec, argv=("./other.sh",)))
    finally:
        rig.close()


def test_a_submit_whose_request_is_cancelled_mid_write_is_still_queued(tmp_path: Path) -> None:
    # Without a key: the client went away while the group commit was writing. What landed on
    # disk must be in the queue too, not only in the database until the next restart.
    rig = _rig(tmp_path)

    async def cancelled_submit() -> None:
        # A first submit from the same folder: the second then goes straight to the group
        # commit (its folder was just checked), where one turn of the loop leaves it waiting.
        await rig.submits.submit_async(_spec(), ADA)
        task = asyncio.ensure_future(rig.submits.submit_async(_spec(), ADA))
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for _ in range(200):  # the write lands on the writer's thread
            if len(rig.store.load_jobs()) == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)

    try:
        asyncio.run(cancelled_submit())
        stored = rig.store.load_jobs()
        assert len(stored) == 2, "the cancelled submit was never written: the test proves nothing"
        assert all(rig.book.get(job.id) is not None for job in stored), "on disk but not queued"
    finally:
        rig.close()
