"""The JobStore port against the real SqlJobStore on a SQLite file: nothing acknowledged is lost."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gpuyard.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SqlJobStore]:
    s = SqlJobStore(sqlite_url(db_path))
    yield s
    s.close()


def pending_job(job_id: int, **spec_changes: object) -> Job:
    spec = JobSpec(argv=("python", "train.py"), name=f"job{job_id}", workdir="/home/ada")
    spec = dataclasses.replace(spec, **spec_changes)  # type: ignore[arg-type]
    return Job(id=job_id, spec=spec, owner="ada", state=JobState.PENDING, submitted_at=1000.5)


def finished_job_with_every_field_set() -> Job:
    spec = JobSpec(
        argv=("torchrun", "--nproc-per-node=2", "train.py", "--lr", "3e-4", "naïve ü 日本"),
        name="resnet 50 'quoted' \"x\"",
        workdir="/srv/data/ada/run-7",
        gpus=2,
        cpus=12,
        mem_mib=65536,
        time_limit_s=2 * 86400 + 5,
        priority=-3,
        env=(("A", "1"), ("EMPTY", ""), ("PATHS", "a:b=c")),
        preemptible=False,
        distributed="torchrun",
        gpu_mem_mib=20 * 1024,
        nodes=2,
    )
    return Job(
        id=41,
        spec=spec,
        owner="grace",
        state=JobState.CANCELLED,
        submitted_at=1_700_000_000.123456,
        reason="Cancelled by user",
        gpus=(3, 1),
        exit_code=-15,
        started_at=1_700_000_010.25,
        ended_at=1_700_000_999.75,
        pid=4_194_303,
        pid_started_at=123456.78,
        stop_intent=JobState.CANCELLED,
        version=9,
        node="gpu-box-2",
        attained_gpu_s=7_200.5,
        restarts=3,
    )


def test_a_new_database_is_empty(store: SqlJobStore) -> None:
    assert store.load_jobs() == []


def test_insert_and_load_round_trip_every_field(store: SqlJobStore) -> None:
    full = finished_job_with_every_field_set()
    bare = pending_job(2)
    store.write([full, bare], [])
    assert store.load_jobs() == [bare, full]  # ordered by id


def test_every_field_is_set_in_the_round_trip_fixture() -> None:
    # Guard: a new Job/JobSpec field must be added to the round-trip above.
    full = finished_job_with_every_field_set()
    default = pending_job(0)
    for f in dataclasses.fields(JobSpec):
        assert getattr(full.spec, f.name) != getattr(default.spec, f.name), f.name
    unset = {f.name for f in dataclasses.fields(Job)
             if getattr(full, f.name) == getattr(default, f.name)}  # fmt: skip
    assert unset == set(), "new Job fields must be set in finished_job_with_every_field_set"


def test_update_is_compare_and_set_on_version(store: SqlJobStore) -> None:
    job = pending_job(1, gpus=2)
    store.write([job], [])
    running = job.transition(JobState.RUNNING, gpus=(0, 1), started_at=1001.0, pid=77)
    store.write([], [running])
    assert store.load_jobs() == [running]
    done = running.transition(JobState.COMPLETED, exit_code=0, ended_at=1002.0)
    store.write([], [done])
    assert store.load_jobs() == [done]
    assert store.load_jobs()[0].version == 3


def test_stale_update_raises_conflict_and_changes_nothing(store: SqlJobStore) -> None:
    job = pending_job(1)
    store.write([job], [])
    winner = job.transition(JobState.CANCELLED, reason="Cancelled by user")
    store.write([], [winner])
    loser = job.transition(JobState.RUNNING, gpus=(0,))  # computed from version 1 too
    with pytest.raises(Conflict):
        store.write([], [loser])
    assert store.load_jobs() == [winner]


def test_update_of_a_missing_job_raises_conflict(store: SqlJobStore) -> None:
    with pytest.raises(Conflict):
        store.write([], [pending_job(5).with_changes(reason="x")])
    assert store.load_jobs() == []


def test_one_write_is_all_or_nothing(store: SqlJobStore) -> None:
    old = pending_job(1)
    store.write([old], [])
    good = old.with_changes(reason="Priority")
    store.write([], [good])
    # A requeue of job 2 that rides with a stale update of job 1: neither may land.
    with pytest.raises(Conflict):
        store.write([pending_job(2)], [old.with_changes(reason="stale")])
    assert store.load_jobs() == [good]


def test_duplicate_id_is_refused(store: SqlJobStore) -> None:
    store.write([pending_job(1)], [])
    with pytest.raises(Exception) as info:
        store.write([pending_job(1, gpus=8)], [])
    assert "UNIQUE" in str(info.value) or "Integrity" in type(info.value).__name__
    assert store.load_jobs() == [pending_job(1)]


class CommitSpy:
    """Records the size of each batch the writer tries to commit. It holds the first commit
    until `queued` writes wait, so the next batch deterministically holds several requests."""

    def __init__(self, store: SqlJobStore, queued: int) -> None:
        self.sizes: list[int] = []
        self.holding = threading.Event()
        self._writer = store._writer
        self._commit = self._writer._commit_batch
        self._queued = queued
        self._writer._commit_batch = self._commit_batch  # type: ignore[method-assign]

    def _commit_batch(self, batch: Sequence[object]) -> None:
        if not self.sizes and not self.holding.is_set():
            self.holding.set()
            deadline = time.monotonic() + 5
            while self._writer._queue.qsize() < self._queued and time.monotonic() < deadline:
                time.sleep(0.001)
        self.sizes.append(len(batch))
        self._commit(batch)  # type: ignore[arg-type]


def test_concurrent_writers_all_land_in_shared_commits(store: SqlJobStore) -> None:
    spy = CommitSpy(store, queued=7)
    next_id = iter(range(1, 10_000))
    id_lock = threading.Lock()
    errors: list[BaseException] = []
    per_thread = 25

    def writer() -> None:
        try:
            for _ in range(per_thread):
                with id_lock:
                    job_id = next(next_id)
                job = pending_job(job_id)
                store.write([job], [])
                store.write([], [job.with_changes(reason="Resources")])
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    jobs = store.load_jobs()
    assert [j.id for j in jobs] == list(range(1, 8 * per_thread + 1))
    assert all(j.version == 2 and j.reason == "Resources" for j in jobs)
    assert sum(spy.sizes) == 2 * 8 * per_thread  # no write committed twice
    assert max(spy.sizes) > 1, "writes from many threads should share one commit"


def test_a_bad_write_does_not_fail_its_batch_neighbours(store: SqlJobStore) -> None:
    store.write([pending_job(1)], [])
    spy = CommitSpy(store, queued=8)
    results: dict[str, str] = {}

    def write(label: str, job: Job) -> None:
        try:
            store.write([job], [])
            results[label] = "ok"
        except Exception as err:
            results[label] = type(err).__name__

    plug = threading.Thread(target=write, args=("plug", pending_job(100)))
    plug.start()
    assert spy.holding.wait(5)  # the writer is busy: what follows queues into one batch
    writes = [(f"job{i}", pending_job(i)) for i in range(2, 9)] + [("dup", pending_job(1, gpus=3))]
    threads = [threading.Thread(target=write, args=w) for w in writes]
    for t in threads:
        t.start()
    for t in [*threads, plug]:
        t.join(timeout=30)
    # One batch of the eight waiting writes; it fails, so each is retried alone.
    assert spy.sizes == [1, 8] + [1] * 8
    assert results.pop("dup") == "IntegrityError"
    assert set(results.values()) == {"ok"} and len(results) == 8
    assert [j.id for j in store.load_jobs()] == [*range(1, 9), 100]
    assert store.load_jobs()[0].spec.gpus == 0  # the duplicate did not overwrite job 1


def test_sqlite_is_in_wal_mode_with_full_sync(store: SqlJobStore, db_path: Path) -> None:
    store.write([pending_job(1)], [])
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # synchronous, busy_timeout and foreign_keys are per connection: ask the store's own.
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_reopening_sees_every_committed_job(db_path: Path) -> None:
    first = SqlJobStore(sqlite_url(db_path))
    job = pending_job(1)
    first.write([job, pending_job(2)], [])
    first.write([], [job.transition(JobState.RUNNING, gpus=(0,))])
    expected = first.load_jobs()
    first.close()

    for new_id in (3, 4):  # migrations run again on every open and must be a no-op
        again = SqlJobStore(sqlite_url(db_path))
        try:
            assert again.load_jobs() == expected
            again.write([pending_job(new_id)], [])
            expected = again.load_jobs()
            assert [j.id for j in expected] == list(range(1, new_id + 1))
        finally:
            again.close()
        with sqlite3.connect(db_path) as raw:
            assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [("0004",)]


def test_acknowledged_writes_are_visible_to_another_reader(
    store: SqlJobStore, db_path: Path
) -> None:
    # A write is acknowledged only after its commit: a separate connection sees it at once.
    store.write([pending_job(1)], [])
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT id, state FROM jobs").fetchall() == [(1, "PENDING")]


def test_writes_after_close_are_refused(db_path: Path) -> None:
    s = SqlJobStore(sqlite_url(db_path))
    s.close()
    with pytest.raises(RuntimeError):
        s.write([pending_job(1)], [])


def test_a_database_from_before_preemption_is_upgraded_with_its_jobs(db_path: Path) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    import gpuyard.adapters.store.sql as sql_module

    config = Config()
    config.set_main_option("script_location", str(Path(sql_module.__file__).parent / "migrations"))
    engine = create_engine(sqlite_url(db_path))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")
    engine.dispose()
    with sqlite3.connect(db_path) as raw:  # a job written by the first release
        raw.execute(
            "INSERT INTO jobs (id, name, owner, state, priority, spec, reason, gpus, node,"
            " submitted_at, version) VALUES (7, 'old', 'ada', 'PENDING', 0, ?, 'None', '[]',"
            " 'local', 5.0, 1)",
            ('{"argv": ["true"], "workdir": "/", "gpus": 1, "cpus": 1, "mem_mib": 0,'
             ' "time_limit_s": null, "env": []}',),
        )  # fmt: skip
    store = SqlJobStore(sqlite_url(db_path))
    try:
        (job,) = store.load_jobs()
    finally:
        store.close()
    assert (job.id, job.spec.gpus, job.restarts, job.attained_gpu_s) == (7, 1, 0, 0.0)
    assert job.spec.preemptible is True


def test_gpu_stats_and_drains_survive_a_reopen(db_path: Path) -> None:
    from gpuyard.domain.job import Drain

    first = SqlJobStore(sqlite_url(db_path))
    stats = {"samples": 12, "util_sum_pct": 960.0, "util_peak_pct": 99, "memory_peak_mib": 40960,
             "gpu_s": 24.0, "sampled_s": 12.0}  # fmt: skip
    first.save_gpu_stats(7, stats)
    first.save_gpu_stats(7, {**stats, "samples": 13})  # saved again: replaced, not doubled
    first.save_drain(1, Drain("fan", "admin", 5.0))
    first.close()
    again = SqlJobStore(sqlite_url(db_path))
    try:
        assert again.load_gpu_stats(limit=10) == {7: {**stats, "samples": 13}}
        assert again.load_drains() == {1: Drain("fan", "admin", 5.0)}
    finally:
        again.close()
