"""What only the SQLite store promises: WAL with full sync, group commit, its migrations (from
an empty file and from every earlier release's schema), and the lock file beside the database."""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, select

import gpuyard.adapters.store.sql as sql_module
from gpuyard.adapters.store import tables
from gpuyard.adapters.store.filelock import ExclusiveFileLock
from gpuyard.adapters.store.group_commit import GroupCommitWriter
from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.accounts import Account, Team
from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import Drain, Job, JobStep
from gpuyard.domain.states import JobState
from tests.contract.stores import pending_job

HEAD = "0017"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gpuyard.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SqlJobStore]:
    s = SqlJobStore(sqlite_url(db_path))
    yield s
    s.close()


def migrate(db_path: Path, revision: str, *, down: bool = False) -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(sql_module.__file__).parent / "migrations"))
    engine = create_engine(sqlite_url(db_path))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def schema(db_path: Path) -> dict[str, object]:
    with sqlite3.connect(db_path) as raw:
        return {
            "version": raw.execute("SELECT version_num FROM alembic_version").fetchone()[0],
            "jobs": {r[1]: r[2] for r in raw.execute("PRAGMA table_info(jobs)")},
            "drains": {r[1]: r[2] for r in raw.execute("PRAGMA table_info(gpu_drains)")},
            "indexes": {r[1] for r in raw.execute("PRAGMA index_list(jobs)")},
        }


def test_an_empty_database_gets_text_columns_uuid_drains_and_history_indexes(
    store: SqlJobStore, db_path: Path
) -> None:
    got = schema(db_path)
    assert got["version"] == HEAD
    jobs = got["jobs"]
    assert isinstance(jobs, dict)
    assert {c: jobs[c] for c in ("name", "reason", "gpus", "node", "spec")} == dict.fromkeys(
        ("name", "reason", "gpus", "node", "spec"), "TEXT"
    )
    assert got["drains"] == {"gpu_uuid": "TEXT", "reason": "TEXT", "source": "VARCHAR(16)",
                             "drained_at": "FLOAT"}  # fmt: skip
    # The migrations build exactly the indexes the schema module declares.
    assert got["indexes"] == {index.name for index in tables.jobs.indexes}
    assert "ix_jobs_owner_state_id" in got["indexes"]


def test_a_database_at_the_previous_head_keeps_its_jobs_and_drains(db_path: Path) -> None:
    migrate(db_path, "0004")
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            "INSERT INTO jobs (id, name, owner, state, priority, spec, reason, gpus, node,"
            " submitted_at, ended_at, version, attained_gpu_s, restarts) VALUES (3, 'old',"
            " 'ada', 'FAILED', 0, ?, 'Exit 1', '[0, 1]', 'local', 5.0, 9.0, 3, 8.0, 1)",
            ('{"argv": ["true"], "workdir": "/", "gpus": 2, "cpus": 1, "mem_mib": 0,'
             ' "time_limit_s": null, "env": [["A", "1"]], "preemptible": false}',),
        )  # fmt: skip
        raw.execute("INSERT INTO gpu_drains VALUES (2, 'fan', 'admin', 5.0)")
        raw.execute("INSERT INTO job_gpu_stats VALUES (3, '{\"samples\": 4}')")
    store = SqlJobStore(sqlite_url(db_path))
    try:
        (job,) = store.load_jobs()
        assert (job.id, job.state, job.gpus, job.spec.env, job.spec.preemptible) == (
            3, JobState.FAILED, (0, 1), (("A", "1"),), False
        )  # fmt: skip
        assert (job.spec.gpu_mem_mib, job.spec.nodes, job.restarts) == (0, 1, 1)  # defaults
        assert store.load_drains() == {"index:2": Drain("fan", "admin", 5.0)}
        assert store.load_gpu_stats(limit=5) == {3: {"samples": 4}}
        # What overflowed VARCHAR(255) before: now stored whole.
        reason = "x" * 2_000
        big = pending_job(4, gpus=128).transition(JobState.RUNNING, gpus=tuple(range(128)))
        store.write([pending_job(4, gpus=128)], [])
        store.write([], [big])
        store.write([], [ended := big.transition(JobState.FAILED, reason=reason, ended_at=1.0)])
        assert store.get_job(4) == ended
    finally:
        store.close()
    assert schema(db_path)["version"] == HEAD


def test_the_migration_goes_back_to_index_keyed_drains(db_path: Path) -> None:
    store = SqlJobStore(sqlite_url(db_path))
    store.save_drain("index:5", Drain("old", "admin", 1.0))
    store.save_drain("GPU-abc", Drain("new", "auto", 2.0))
    store.close()
    migrate(db_path, "0004", down=True)
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT * FROM gpu_drains").fetchall() == [(5, "old", "admin", 1.0)]
    migrate(db_path, HEAD)
    again = SqlJobStore(sqlite_url(db_path))
    try:
        assert again.load_drains() == {"index:5": Drain("old", "admin", 1.0)}
    finally:
        again.close()


def test_a_database_from_the_first_release_is_upgraded_with_its_jobs(db_path: Path) -> None:
    migrate(db_path, "0001")
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
    # It never opted in: preemption is opt-in now (issue 15), whatever the first release did.
    assert job.spec.preemptible is False


def test_the_lock_is_a_file_beside_the_database(store: SqlJobStore, db_path: Path) -> None:
    store.lock_exclusive()
    assert (db_path.parent / "gpuyard.db.lock").exists()
    with pytest.raises(Unavailable) as refused:
        SqlJobStore(sqlite_url(db_path), exclusive=True)
    assert str(db_path) in refused.value.message


def test_an_exclusive_open_refused_does_not_migrate_the_database(db_path: Path) -> None:
    # A newer server started beside a running one must not upgrade the schema under it.
    migrate(db_path, "0004")
    holder = ExclusiveFileLock(db_path)
    holder.acquire()
    try:
        with pytest.raises(Unavailable):
            SqlJobStore(sqlite_url(db_path), exclusive=True)
        assert schema(db_path)["version"] == "0004"
    finally:
        holder.release()


def test_sqlite_is_in_wal_mode_with_full_sync(store: SqlJobStore, db_path: Path) -> None:
    store.write([pending_job(1)], [])
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # synchronous, busy_timeout and foreign_keys are per connection: ask the store's own.
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert (conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) >= 1000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_a_read_under_way_never_holds_back_a_durable_write(store: SqlJobStore) -> None:
    # A history page read while submits land: the read's transaction reads its snapshot (WAL)
    # and takes no write lock, so the group commit's write is acknowledged at once. Begun
    # IMMEDIATE as writes are, the read held the write lock until it ended, and every submit
    # waited behind it (busy_timeout, then "database is locked").
    store.write([pending_job(1)], [])
    with store._reader.connect() as reading:
        before = reading.execute(select(tables.jobs.c.id)).scalars().all()
        store.write([pending_job(2)], [])  # acknowledged while the read is still open
        still = reading.execute(select(tables.jobs.c.id)).scalars().all()
    assert before == still == [1]  # one snapshot for the whole read
    assert [job.id for job in store.load_jobs()] == [1, 2]


def test_acknowledged_writes_are_visible_to_another_reader(
    store: SqlJobStore, db_path: Path
) -> None:
    # A write is acknowledged only after its commit: a separate connection sees it at once.
    store.write([pending_job(1)], [])
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT id, state FROM jobs").fetchall() == [(1, "PENDING")]


class CommitSpy:
    """Records the size of each batch the writer tries to commit. It holds the first commit
    until `queued` writes wait, so the next batch deterministically holds several requests."""

    def __init__(self, store: SqlJobStore, queued: int) -> None:
        self.sizes: list[int] = []
        self.holding = threading.Event()
        self._writer = store._writer
        self._commit = self._writer._commit_batch
        self._queued = queued
        self._writer._commit_batch = self._commit_batch

    def _commit_batch(self, batch: Sequence[object]) -> None:
        if not self.sizes and not self.holding.is_set():
            self.holding.set()
            deadline = time.monotonic() + 5
            while self._writer._queue.qsize() < self._queued and time.monotonic() < deadline:
                time.sleep(0.001)
        self.sizes.append(len(batch))
        self._commit(batch)  # type: ignore[arg-type]


def test_concurrent_writers_share_commits(store: SqlJobStore) -> None:
    spy = CommitSpy(store, queued=7)
    errors: list[BaseException] = []

    def writer(first_id: int) -> None:
        try:
            for job_id in range(first_id, first_id + 10):
                store.write([pending_job(job_id)], [])
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(100 * t,)) for t in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(store.load_jobs()) == 80
    assert sum(spy.sizes) == 80  # no write committed twice
    assert max(spy.sizes) > 1, "writes from many threads should share one commit"


def test_a_bad_write_does_not_fail_its_batch_neighbours(store: SqlJobStore) -> None:
    bad_write_among_good_ones(store, duplicate_error="IntegrityError")


def bad_write_among_good_ones(store: SqlJobStore, *, duplicate_error: str) -> None:
    """A duplicate id in a batch of eight waiting writes: it alone fails (`duplicate_error`,
    the driver's name for it), its neighbours land, job 1 is not overwritten."""
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
    assert results.pop("dup") == duplicate_error
    assert set(results.values()) == {"ok"} and len(results) == 8
    assert [j.id for j in store.load_jobs()] == [*range(1, 9), 100]
    assert store.load_jobs()[0].spec.gpus == 0  # the duplicate did not overwrite job 1


@pytest.mark.parametrize("probe", [1, 3, 5_000])
def test_a_since_page_is_the_same_whether_few_or_many_jobs_pass(
    store: SqlJobStore, monkeypatch: pytest.MonkeyPatch, probe: int
) -> None:
    # Few jobs since: looked up by the submit-time index; many: walked newest first.
    monkeypatch.setattr(sql_module, "_SINCE_PROBE", probe)
    jobs = [dataclasses.replace(pending_job(i), submitted_at=float(i % 7)) for i in range(1, 30)]
    store.write(jobs, [])
    for since in (0.0, 4.0, 6.0, 7.0):
        expected = [j.id for j in reversed(jobs) if j.submitted_at >= since]
        got = [j.id for j in store.page_jobs(limit=100, since=since)]
        assert got == expected
        assert [j.id for j in store.page_jobs(limit=2, since=since)] == expected[:2]


def test_the_writer_fails_a_batch_on_system_exit_without_retrying_and_keeps_going() -> None:
    # The writer behind every SqlJobStore write: a SystemExit raised in a commit is not an
    # error to retry item by item; it fails that batch's writes and nothing after them.
    commits: list[list[str]] = []
    release = threading.Event()

    def commit(items: Sequence[str]) -> None:
        commits.append(list(items))
        if items == ["plug"]:
            release.wait(5)  # hold the writer while the next batch queues up
        if "exit" in items:
            raise SystemExit(3)

    writer: GroupCommitWriter[str] = GroupCommitWriter(commit)
    try:
        plug = writer.submit_future("plug")
        while not commits:
            time.sleep(0.001)
        batch = [writer.submit_future(item) for item in ("a", "exit", "b")]
        release.set()
        plug.result(5)
        for done in batch:
            assert isinstance(done.exception(5), SystemExit)
        writer.submit("next")
    finally:
        writer.close()
    assert commits == [["plug"], ["a", "exit", "b"], ["next"]]


def test_accounts_come_with_0008_and_go_with_its_downgrade(db_path: Path) -> None:
    migrate(db_path, "0007")
    with sqlite3.connect(db_path) as raw:
        raw.execute("INSERT INTO counters VALUES ('max_job_id', 12)")
    store = SqlJobStore(sqlite_url(db_path))
    try:
        store.add_team(Team("default", 1.0))
        store.add_account(Account("ada", "admin", "default", 2.0))
        store.add_token("ada", "submit", "f" * 64, 3.0, None)
        assert store.max_job_id() == 12
    finally:
        store.close()
    migrate(db_path, "0007", down=True)
    with sqlite3.connect(db_path) as raw:
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert not names & {"teams", "users", "api_tokens"} and "counters" in names
    migrate(db_path, HEAD)
    again = SqlJobStore(sqlite_url(db_path))
    try:
        assert again.load_accounts() == [] and again.max_job_id() == 12
    finally:
        again.close()


def test_steps_come_with_0017_and_go_with_its_downgrade(db_path: Path) -> None:
    migrate(db_path, "0016")
    with sqlite3.connect(db_path) as raw:  # a job that ended before steps were recorded
        raw.execute(
            "INSERT INTO jobs (id, name, owner, state, priority, spec, reason, gpus, node,"
            " submitted_at, version) VALUES (7, 'old', 'ada', 'COMPLETED', 0, ?, 'None', '[]',"
            " 'local', 5.0, 1)",
            ('{"argv": ["true"], "workdir": "/", "gpus": 0, "cpus": 1, "mem_mib": 0,'
             ' "time_limit_s": null, "env": []}',),
        )  # fmt: skip
    store = SqlJobStore(sqlite_url(db_path))
    try:
        (old,) = store.load_jobs()
        assert old.steps == ()
        step = JobStep(0, "train", 2, 6.0, 9.5, 3)
        store.write([pending_job(8)], [])
        store.write([], [with_steps := store.get_job(8).with_changes(steps=(step,))])  # type: ignore[union-attr]
        assert store.get_job(8) == with_steps
    finally:
        store.close()
    migrate(db_path, "0016", down=True)
    assert "steps" not in schema(db_path)["jobs"]  # type: ignore[operator]
    migrate(db_path, HEAD)
    again = SqlJobStore(sqlite_url(db_path))
    try:
        assert sorted(j.id for j in again.load_jobs()) == [7, 8]
        assert again.get_job(8).steps == ()  # type: ignore[union-attr]
    finally:
        again.close()


def test_the_head_revision_is_the_newest_migration_alembic_knows() -> None:
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(sql_module.__file__).parent / "migrations"))
    assert sql_module.head_revision() == ScriptDirectory.from_config(config).get_current_head()
    assert sql_module.head_revision() == HEAD


def test_a_database_at_the_head_opens_without_loading_alembic(db_path: Path) -> None:
    """A server's every start on its up-to-date database: no migration to run, none read."""
    SqlJobStore(sqlite_url(db_path)).close()  # a new database: migrated to the head
    opened = (
        "import sys\n"
        "from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url\n"
        f"SqlJobStore(sqlite_url({str(db_path)!r})).close()\n"
        "print('alembic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", opened], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "False"
    assert schema(db_path)["version"] == HEAD
