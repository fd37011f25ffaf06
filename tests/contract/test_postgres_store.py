"""What only the PostgreSQL store promises: its migrations (from an empty database, from the
previous release's schema, down and up again), durable commits that other sessions see, group
commit, psycopg 3 whatever the URL's form, and the advisory lock that keeps a second server off
the database until the first one's session ends. The rest is the contract suite, which runs
over PostgreSQL too (stores.py)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

import gpuyard.adapters.store.sql as sql_module
from gpuyard.adapters.store import tables
from gpuyard.adapters.store.advisory_lock import LOCK_KEY
from gpuyard.adapters.store.sql import SqlJobStore
from gpuyard.domain.accounts import Account, Team
from gpuyard.domain.errors import InvalidRequest, Unavailable
from gpuyard.domain.job import Attempt, Drain
from gpuyard.domain.limits import AccountLimits
from gpuyard.domain.states import JobState
from tests.contract.stores import pending_job
from tests.contract.test_sqlite_store import HEAD, bad_write_among_good_ones
from tests.contract.test_sqlite_store import (
    test_concurrent_writers_share_commits as writers_share_commits,
)
from tests.postgres_server import PostgresServer

_NAMES = itertools.count(1)


@pytest.fixture
def db(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database; its SQLAlchemy URL."""
    name = f"pg_store_{next(_NAMES)}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


@pytest.fixture
def store(db: str) -> Iterator[SqlJobStore]:
    s = SqlJobStore(db)
    yield s
    s.close()


def libpq(url: str) -> str:
    """psycopg's own form of a SQLAlchemy URL."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def migrate(url: str, revision: str, *, down: bool = False) -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(sql_module.__file__).parent / "migrations"))
    engine = create_engine(url)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def query(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        done = conn.execute(sql, params)
        return done.fetchall() if done.description is not None else []


def columns(url: str, table: str) -> dict[str, tuple[object, ...]]:
    rows = query(url, "SELECT column_name, data_type, column_default FROM"
                 " information_schema.columns WHERE table_name = %s", table)  # fmt: skip
    return {str(r[0]): r[1:] for r in rows}


def test_an_empty_database_is_migrated_to_head_with_postgresql_types(store: SqlJobStore) -> None:
    url = store.url
    assert query(url, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    jobs = columns(url, "jobs")
    assert set(jobs) == set(tables.jobs.c.keys())
    # Free text is TEXT (PostgreSQL enforces VARCHAR lengths); times are doubles (a
    # microsecond survives), holds a boolean, byte counts 64-bit.
    assert {c: jobs[c][0] for c in ("name", "reason", "gpus", "node", "spec", "attempts")} == (
        dict.fromkeys(("name", "reason", "gpus", "node", "spec", "attempts"), "text")
    )
    assert jobs["submitted_at"][0] == jobs["attained_gpu_s"][0] == "double precision"
    assert jobs["held"] == ("boolean", "false")  # server_default '0', as PostgreSQL reads it
    assert jobs["log_dropped_bytes"][0] == "bigint"
    assert columns(url, "users")["disabled"] == ("boolean", "false")
    assert "nextval" in str(columns(url, "api_tokens")["id"][1])  # token ids: a sequence
    indexes = {r[0] for r in query(url, "SELECT indexname FROM pg_indexes WHERE"
                                   " tablename = 'jobs' AND indexname LIKE 'ix_%%'")}  # fmt: skip
    assert indexes == {index.name for index in tables.jobs.indexes}


def test_a_database_at_the_previous_release_keeps_its_jobs_and_accounts(db: str) -> None:
    migrate(db, "0009")
    spec = ('{"argv": ["true"], "workdir": "/", "gpus": 2, "cpus": 1, "mem_mib": 0,'
            ' "time_limit_s": null, "env": [["A", "1"]], "preemptible": true}')  # fmt: skip
    with psycopg.connect(libpq(db)) as conn:  # rows as the previous release wrote them
        conn.execute(
            "INSERT INTO jobs (id, name, owner, state, priority, spec, reason, gpus, node,"
            " submitted_at, ended_at, exit_code, version, attained_gpu_s, restarts) VALUES"
            " (3, 'old', 'ada', 'FAILED', 0, %s, 'Exit 1', '[0, 1]', 'local', 5.25, 9.5, 1,"
            " 3, 8.0, 1)",
            (spec,),
        )
        conn.execute("INSERT INTO teams VALUES ('default', 1.0)")
        conn.execute("INSERT INTO users (name, role, team, created_at) VALUES"
                     " ('ada', 'admin', 'default', 2.0)")  # fmt: skip
        conn.execute("INSERT INTO counters VALUES ('max_job_id', 12)")
    store = SqlJobStore(db)
    try:
        (job,) = store.load_jobs()
        assert (job.id, job.state, job.gpus, job.exit_code, job.spec.env) == (
            3, JobState.FAILED, (0, 1), 1, (("A", "1"),)
        )  # fmt: skip
        assert (job.submitted_at, job.ended_at, job.held, job.restart_of) == (5.25, 9.5, False,
                                                                               None)  # fmt: skip
        # The columns 0010 added, at their defaults.
        assert (job.attempts, job.idempotency_key, job.not_before, job.log_dropped_bytes) == (
            (),
            None,
            None,
            0,
        )
        assert store.load_accounts() == [Account("ada", "admin", "default", 2.0)]
        assert store.max_job_id() == 12
        # The new columns hold what they are for: a retried job, 3 GiB of lost log.
        again = pending_job(13)
        store.write([again], [])
        ran = again.transition(JobState.RUNNING, gpus=(0,), started_at=20.0)
        store.write([], [ran])
        ended = ran.transition(
            JobState.FAILED, ended_at=30.0, exit_code=2, log_dropped_bytes=3 << 30,
            attempts=(Attempt(1, 10.0, 11.0, JobState.NODE_FAIL, None, "GPU 0 lost", "b1",
                              (0,)),),
        )  # fmt: skip
        store.write([], [ended])
        assert store.get_job(13) == ended
    finally:
        store.close()
    assert query(db, "SELECT version_num FROM alembic_version") == [(HEAD,)]


def test_every_migration_goes_down_and_up_again(db: str) -> None:
    store = SqlJobStore(db)
    store.save_drain("index:5", Drain("old", "admin", 1.0))
    store.save_drain("GPU-abc", Drain("new", "auto", 2.0))
    store.add_team(Team("default", 1.0))
    store.close()
    migrate(db, "0004", down=True)  # drains keyed by index again: the UUID one cannot go back
    assert query(db, "SELECT * FROM gpu_drains") == [(5, "old", "admin", 1.0)]
    migrate(db, "base", down=True)
    assert query(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == [
        ("alembic_version",)
    ]
    again = SqlJobStore(db)
    try:
        again.write([pending_job(1)], [])
        assert [j.id for j in again.load_jobs()] == [1]
    finally:
        again.close()


def test_a_plain_postgresql_url_is_driven_by_psycopg_3(db: str) -> None:
    plain = SqlJobStore(libpq(db))
    try:
        assert plain.url == db
        assert plain._engine.dialect.driver == "psycopg"
    finally:
        plain.close()
    with pytest.raises(InvalidRequest) as refused:
        SqlJobStore("mysql://ada:secret@db.example/gpuyard")
    assert "\n" not in refused.value.message and "secret" not in refused.value.message
    assert "postgresql://" in refused.value.message


@pytest.mark.parametrize("exclusive", [False, True], ids=["pooled", "on-the-lock-session"])
def test_commits_are_durable_and_seen_at_once_by_another_session(db: str, exclusive: bool) -> None:
    # Even where the database says otherwise: `off` acknowledges commits a crash may lose.
    query(db, f"ALTER DATABASE {db.rsplit('/', 1)[1]} SET synchronous_commit = off")
    assert query(db, "SHOW synchronous_commit") == [("off",)]
    store = SqlJobStore(db, exclusive=exclusive)
    try:
        store.write([pending_job(1)], [])
        # Acknowledged only after its commit: another session sees it at once.
        assert query(store.url, "SELECT id, state FROM jobs") == [(1, "PENDING")]
        with store._engine.connect() as conn:  # a commit returns once it is on disk
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
            assert conn.exec_driver_sql("SHOW fsync").scalar() == "on"
        if exclusive:  # the session the writes go through
            lock_session = store._lock.connection  # type: ignore[union-attr]
            assert lock_session.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
    finally:
        store.close()


def test_concurrent_writers_share_commits(store: SqlJobStore) -> None:
    writers_share_commits(store)  # SQLite's test, on PostgreSQL


@pytest.mark.parametrize("exclusive", [False, True], ids=["pooled", "on-the-lock-session"])
def test_a_bad_write_does_not_fail_its_batch_neighbours(db: str, exclusive: bool) -> None:
    # On PostgreSQL a failed statement aborts the whole transaction: the batch is rolled back
    # and each write retried alone on the same connection (the lock's, if it holds it).
    store = SqlJobStore(db, exclusive=exclusive)
    try:
        bad_write_among_good_ones(store, duplicate_error="UniqueViolation")
    finally:
        store.close()


def lock_holders(url: str) -> list[int]:
    """The backend pids holding gpuyard's advisory lock on this database."""
    rows = query(url, "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                 " WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
                 " AND l.classid::bigint = %s AND l.objid::bigint = %s",
                 LOCK_KEY >> 32, LOCK_KEY & 0xFFFFFFFF)  # fmt: skip
    return [int(str(r[0])) for r in rows]


def test_a_second_server_is_refused_in_one_line_naming_the_first(db: str) -> None:
    # A database that ends idle sessions must not end the lock's (a server with nothing to
    # write for a while would lose its hold).
    query(db, f"ALTER DATABASE {db.rsplit('/', 1)[1]} SET idle_session_timeout = '1h'")
    first = SqlJobStore(db, exclusive=True)
    try:
        (holder,) = lock_holders(db)
        with pytest.raises(Unavailable) as refused:
            SqlJobStore(db, exclusive=True)
        message = refused.value.message
        assert "\n" not in message
        assert message.startswith("another gpuyard server already uses PostgreSQL database")
        assert db.rsplit("/", 1)[1] in message and f"backend pid {holder}" in message
        assert "--db" in message
        # A dead holder's machine is noticed in seconds, not the kernel's two hours.
        lock_session = first._lock.connection  # type: ignore[union-attr]
        assert lock_session.exec_driver_sql("SHOW tcp_keepalives_idle").scalar() == "10"
        assert lock_session.exec_driver_sql("SHOW idle_session_timeout").scalar() == "0"
        # Reading is not driving: a store that does not ask for the lock opens beside it.
        beside = SqlJobStore(db)
        beside.close()
        assert lock_holders(db) == [holder]
    finally:
        first.close()
    assert lock_holders(db) == []  # given back with close, not left to the session's end
    second = SqlJobStore(db, exclusive=True)
    second.close()


def test_the_lock_goes_with_its_session_and_fences_its_old_holder(db: str) -> None:
    first = SqlJobStore(db, exclusive=True)
    first.write([pending_job(1)], [])  # the holder's writes go through the lock's session
    (holder,) = lock_holders(db)
    # The first server's connection dies (its machine or the network): PostgreSQL ends the
    # session and drops the lock with it, so a standby can take over.
    assert query(db, "SELECT pg_terminate_backend(%s)", holder) == [(True,)]
    # The old holder, still running, writes nothing more: not before the standby takes over,
    # nor after (this store never takes the lock back: the database may have moved on
    # meanwhile; a server opens a new store instead, services/store_hold.py).
    for job_id in (2, 3):  # the write that finds the session dead, and the next
        with pytest.raises(Unavailable) as refused:
            first.write([pending_job(job_id)], [])
        assert "lost its hold on PostgreSQL database" in refused.value.message
        assert "\n" not in refused.value.message
    with pytest.raises(Unavailable):
        first.lock_exclusive()
    deadline = time.monotonic() + 30  # the backend exits a moment after its signal
    while True:
        try:
            second = SqlJobStore(db, exclusive=True)
            break
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        with pytest.raises(Unavailable):
            first.write([pending_job(4)], [])
        assert [j.id for j in second.load_jobs()] == [1]
        first.close()  # its lock session is gone: closing says nothing and frees nothing
        assert len(lock_holders(db)) == 1
        with pytest.raises(Unavailable):
            SqlJobStore(db, exclusive=True)
    finally:
        second.close()


def test_an_exclusive_open_refused_does_not_migrate_the_database(db: str) -> None:
    # A newer server started beside a running one must not upgrade the schema under it.
    migrate(db, "0009")
    with psycopg.connect(libpq(db), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        with pytest.raises(Unavailable):
            SqlJobStore(db, exclusive=True)
        assert query(db, "SELECT version_num FROM alembic_version") == [("0009",)]


def test_lists_are_in_code_point_order_whatever_the_database_collation(
    postgres_server: PostgresServer,
) -> None:
    # A database made with a language's collation (as en_US.UTF-8 clusters are) sorts
    # "alice" before "Zed"; the store lists as SQLite and the memory store do.
    name = f"pg_store_icu_{next(_NAMES)}"
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu"
                     " ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")  # fmt: skip
    store = SqlJobStore(postgres_server.url(name))
    try:
        names = ["alice", "Zed", "_x", "Émile", "bob"]
        for team in names:
            store.add_team(Team(team, 1.0))
            store.add_account(Account(team, "user", team, 1.0))
            store.save_limits(AccountLimits("team", team, max_gpus=1, updated_at=1.0))
        assert [t.name for t in store.load_teams()] == sorted(names)
        assert [a.name for a in store.load_accounts()] == sorted(names)
        assert [e.name for e in store.load_limits()] == sorted(names)
    finally:
        store.close()
        postgres_server.drop_database(name)
