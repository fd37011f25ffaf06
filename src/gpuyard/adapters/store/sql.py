"""SqlJobStore: jobs in SQLite (embedded default) or PostgreSQL, written by group commit."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    create_engine,
    delete,
    event,
    func,
    insert,
    make_url,
    select,
)
from sqlalchemy.exc import DBAPIError

from gpuyard.adapters.disk_full import translate_disk_full
from gpuyard.adapters.store.accounts_sql import SqlAccounts
from gpuyard.adapters.store.advisory_lock import AdvisoryLock
from gpuyard.adapters.store.bundle import every_port
from gpuyard.adapters.store.codec import job_to_row, rows_to_jobs, spec_to_json
from gpuyard.adapters.store.events_sql import SqlEvents
from gpuyard.adapters.store.filelock import ExclusiveFileLock
from gpuyard.adapters.store.gpu_history_sql import SqlGpuHistory
from gpuyard.adapters.store.group_commit import GroupCommitWriter
from gpuyard.adapters.store.limits_sql import SqlLimits
from gpuyard.adapters.store.notify_sql import SqlNotify
from gpuyard.adapters.store.progress_sql import SqlProgress
from gpuyard.adapters.store.sweeps_sql import SqlSweeps
from gpuyard.adapters.store.tables import counters, gpu_drains, job_gpu_stats, job_progress, jobs
from gpuyard.adapters.store.usage_sql import SqlUsage
from gpuyard.domain.errors import Conflict, InvalidRequest
from gpuyard.domain.job import Drain, Job, JobSpec
from gpuyard.domain.states import TERMINAL_STATES, JobState
from gpuyard.services.stores import Stores

_Batch = tuple[Sequence[Job], Sequence[Job]]
_COLUMNS = tuple(jobs.c.keys())
_ACTIVE = (JobState.PENDING.value, JobState.RUNNING.value)
_FINISHED = tuple(sorted(state.value for state in TERMINAL_STATES))
_MAX_JOB_ID = "max_job_id"
_DELETE_CHUNK = 500  # ids per DELETE (SQLite's default limit on bound parameters is 32,766)


class SqlJobStore(
    SqlAccounts, SqlLimits, SqlUsage, SqlGpuHistory, SqlProgress, SqlSweeps, SqlNotify, SqlEvents
):
    """Implements every store port (`stores()`; accounts: `accounts_sql.py`...). One server
    process per database (`lock_exclusive`).

    `exclusive=True` takes that lock before the migrations run, so a second server never
    upgrades the schema under a running one."""

    def __init__(self, url: str, *, exclusive: bool = False) -> None:
        self._engine = _make_engine(url)
        # Reads on the same pool, their transactions begun deferred on SQLite (`_make_engine`).
        self._reader = self._engine.execution_options(**{READ_ONLY: True})
        self.url = url if self._engine.dialect.name == "sqlite" else _postgres_url(url)
        self._lock = _database_lock(self._engine)
        try:
            if exclusive:
                self.lock_exclusive()
            _migrate(self._engine)
        except BaseException:  # no half-opened store keeps the lock or a connection
            if self._lock is not None:
                self._lock.release()
            self._engine.dispose()
            raise
        self._conn: Connection | None = None  # used by the writer thread only
        self._insert_sql = _compiled_insert(self._engine)
        self._update_sql = _compiled_update(self._engine)
        commit = translate_disk_full(self._engine, self._commit_batch)  # StateDiskFull: 507
        self._writer: GroupCommitWriter[_Batch] = GroupCommitWriter(commit)

    def stores(self) -> Stores:
        """This store by port: it implements every one."""
        return every_port(self)

    def lock_exclusive(self) -> None:
        """Claim the database for this server until `close()`; Unavailable if another has it.
        SQLite: an flock on `<database file>.lock`. PostgreSQL: `pg_try_advisory_lock` on a
        session of its own held open until close (`advisory_lock.py`); an in-memory SQLite
        database has no other user, so there is nothing to lock."""
        if self._lock is not None:
            self._lock.acquire()

    def load_jobs(self) -> list[Job]:
        """Every job ever, by id: for tests and tools. The server loads `load_active`."""
        return self._select(select(jobs).order_by(jobs.c.id))

    def load_active(self, recent_finished: int) -> list[Job]:
        """Every pending and running job, and the `recent_finished` finished jobs that ended
        last (latest `ended_at`), by id: what the server keeps in memory. A finished job with
        no end time (none is written so) is left to `get_job` and `page_jobs`."""
        active = select(jobs).where(jobs.c.state.in_(_ACTIVE))
        recent = (
            select(jobs)
            .where(jobs.c.state.not_in(_ACTIVE), jobs.c.ended_at.is_not(None))
            .order_by(jobs.c.ended_at.desc(), jobs.c.id.desc())
            .limit(max(0, recent_finished))
        )
        found = self._select(active) + self._select(recent)
        return sorted(found, key=lambda j: j.id)

    def get_job(self, job_id: int) -> Job | None:
        found = self._select(select(jobs).where(jobs.c.id == job_id))
        return found[0] if found else None

    def find_by_idempotency_key(self, owner: str, key: str) -> Job | None:
        """The job `owner` submitted with `key` (index ix_jobs_owner_idempotency_key). Asked
        on the event loop by every submit whose key the server's book does not know (every
        new one), so a miss is a pooled driver connection, its own cursor and a statement
        written out: ~10-20 us on SQLite, where Core's select cost ~250 us and a Connection's
        machinery another ~15 us."""
        first, second = _marks(self._engine, 2)
        sql = (
            f"SELECT id FROM jobs WHERE owner = {first} AND idempotency_key = {second} "
            "ORDER BY id LIMIT 1"
        )
        raw = self._engine.raw_connection()
        try:
            cursor = raw.cursor()
            try:
                cursor.execute(sql, (owner, key))
                row = cursor.fetchone()
            finally:
                cursor.close()
        except BaseException:
            # Its session may be gone (a database restart): never back to the pool, whose
            # rollback of it would log a traceback; the next call gets a fresh connection.
            raw.invalidate()
            raise
        finally:
            raw.close()  # back to the pool (rolled back: nothing is left open)
        return None if row is None else self.get_job(int(row[0]))

    def array_tasks(self, array_job_id: int) -> list[Job]:
        """An array's tasks by index (index ix_jobs_array_job_id)."""
        query = (
            select(jobs)
            .where(jobs.c.array_job_id == array_job_id)
            .order_by(jobs.c.array_task_id, jobs.c.id)
        )
        return self._select(query)

    def max_job_id(self) -> int:
        """The highest id ever given (0 for none), deleted jobs' included: new ids start above."""
        with self._reader.connect() as conn:
            return self._stored_max(conn)

    def delete_finished(
        self, *, ended_before: float | None = None, owner: str | None = None
    ) -> list[int]:
        """Delete finished jobs (and their GPU stats) that ended before `ended_before`, of
        `owner` (None: anyone's), in one transaction; a pending or running job never, whatever
        is asked. The highest id stays given. Returns the deleted ids, ascending."""
        where: list[ColumnElement[bool]] = [jobs.c.state.in_(_FINISHED)]
        if ended_before is not None:
            where.append(jobs.c.ended_at < ended_before)
        if owner is not None:
            where.append(jobs.c.owner == owner)
        with self._engine.begin() as conn:
            ids = list(conn.execute(select(jobs.c.id).where(*where).order_by(jobs.c.id)).scalars())
            if not ids:
                return []
            mark = max(self._stored_max(conn), ids[-1])
            conn.execute(delete(counters).where(counters.c.name == _MAX_JOB_ID))
            conn.execute(insert(counters).values(name=_MAX_JOB_ID, value=mark))
            for at in range(0, len(ids), _DELETE_CHUNK):
                chunk = ids[at : at + _DELETE_CHUNK]
                conn.execute(delete(job_gpu_stats).where(job_gpu_stats.c.job_id.in_(chunk)))
                conn.execute(delete(job_progress).where(job_progress.c.job_id.in_(chunk)))
                conn.execute(delete(jobs).where(jobs.c.id.in_(chunk), *where))
        return ids

    @staticmethod
    def _stored_max(conn: Connection) -> int:
        stored = conn.execute(select(func.max(jobs.c.id))).scalar() or 0
        mark = conn.execute(select(counters.c.value).where(counters.c.name == _MAX_JOB_ID))
        return max(int(stored), int(mark.scalar() or 0))

    def page_jobs(
        self,
        *,
        limit: int,
        before_id: int | None = None,
        since: float | None = None,
        states: Collection[JobState] | None = None,
        owner: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """One page of history, newest first by id (keyset: pass the last id seen as
        `before_id` for the next page); `since` bounds `submitted_at`, the rest are exact.

        Each filter walks an index ending in id, so a page costs `limit` index entries. Two
        cases where SQLite's planner, which knows only average counts, would scan the whole
        table instead (measured on a million jobs: 116 ms and 176 ms, 2 ms this way): several
        states are one query per state, merged here; a `since` that few jobs pass is first
        looked up in its own index (`_since_ids`)."""
        if limit <= 0 or (states is not None and not states):
            return []
        query = select(jobs).order_by(jobs.c.id.desc()).limit(limit)
        if before_id is not None:
            query = query.where(jobs.c.id < before_id)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        if name is not None:
            query = query.where(jobs.c.name == name)
        with self._reader.connect() as conn:
            if since is not None:
                query = query.where(jobs.c.submitted_at >= since)
                few = _since_ids(conn, since)
                if few is not None:
                    query = query.where(jobs.c.id.in_(few))
            if states is None:
                return _decoded(conn.execute(query))
            found: list[Job] = []
            for state in sorted({JobState(s).value for s in states}):
                found += _decoded(conn.execute(query.where(jobs.c.state == state)))
        return sorted(found, key=lambda j: j.id, reverse=True)[:limit]

    def load_drains(self) -> dict[str, Drain]:
        """GPUs out of service, by GPU UUID ("index:N" for drains recorded before UUIDs)."""
        with self._reader.connect() as conn:
            rows = conn.execute(select(gpu_drains))
            return {r.gpu_uuid: Drain(r.reason, r.source, r.drained_at) for r in rows}

    def save_drain(self, gpu_uuid: str, drain: Drain | None) -> None:
        """Record a GPU drained (or resumed, with None), durably; rare, so not group-committed."""
        with self._engine.begin() as conn:
            conn.execute(delete(gpu_drains).where(gpu_drains.c.gpu_uuid == gpu_uuid))
            if drain is not None:
                conn.execute(
                    insert(gpu_drains).values(
                        gpu_uuid=gpu_uuid, reason=drain.reason, source=drain.source,
                        drained_at=drain.drained_at,
                    )
                )  # fmt: skip

    def load_gpu_stats(self, limit: int) -> dict[int, dict[str, Any]]:
        """The last `limit` jobs' GPU stats (as saved), by job id."""
        query = select(job_gpu_stats).order_by(job_gpu_stats.c.job_id.desc()).limit(limit)
        with self._reader.connect() as conn:
            rows = list(conn.execute(query))
        return {row.job_id: json.loads(row.stats) for row in reversed(rows)}

    def save_gpu_stats(self, job_id: int, stats: dict[str, Any]) -> None:
        """A finished job's GPU stats, durably (once per job: not group-committed)."""
        with self._engine.begin() as conn:
            conn.execute(delete(job_gpu_stats).where(job_gpu_stats.c.job_id == job_id))
            conn.execute(insert(job_gpu_stats).values(job_id=job_id, stats=json.dumps(stats)))

    def write(self, inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        if inserts or updates:
            self._writer.submit((inserts, updates))

    def write_future(self, inserts: Sequence[Job], updates: Sequence[Job]) -> Future[None]:
        return self._writer.submit_future((inserts, updates))

    def close(self) -> None:
        """Flush and stop the writer, then let the database go (and its lock)."""
        self._writer.close()
        if self._conn is not None:
            self._conn.close()
        if isinstance(self._lock, AdvisoryLock):
            self._lock.release()  # on a connection of the engine: before it goes
        self._engine.dispose()
        if self._lock is not None:
            self._lock.release()

    def hold_problem(self, within_s: float = 3.0) -> str | None:
        """Why this server may not write its database now (one line), or None. On PostgreSQL
        the lock's session is asked (an empty transaction, on the writer's thread: the one
        that uses that session); its end (a database restart, `pg_terminate_backend`, a
        network cut seen) loses the lock. No answer within `within_s` is a stall, not a loss
        (None: the request path's deadline answers for a stall). SQLite's lock is a file
        lock, which nothing but the process's end takes away."""
        lock = self._lock
        if not isinstance(lock, AdvisoryLock) or not (lock.held or lock.lost):
            return None
        if not lock.lost:
            try:
                self._writer.submit_future(([], [])).result(timeout=within_s)
            except Exception:  # lost (said below), stalled, or closed: nothing to add
                pass
        return lock.lost_message() if lock.lost else None

    def _select(self, query: Select[Any]) -> list[Job]:
        with self._reader.connect() as conn:
            return _decoded(conn.execute(query))

    def _commit_batch(self, batch: Sequence[_Batch]) -> None:
        """One transaction for the whole batch, on the writer thread's own connection (on
        PostgreSQL under the exclusive lock, the lock's session: `advisory_lock.py`)."""
        specs: _SpecCache = {}  # an array's tasks share one spec: encoded once
        inserts = [_values(job, specs) for inserts, _ in batch for job in inserts]
        updates = [(*_values(job), job.id, job.version - 1) for _, ups in batch for job in ups]
        lock = self._lock
        if isinstance(lock, AdvisoryLock) and (lock.held or lock.lost):
            try:
                self._commit_on(lock.connection, inserts, updates)
            except Exception:
                lock.check_alive()
                raise
            return
        if self._conn is None:
            self._conn = self._engine.connect()
        conn = self._conn
        try:
            self._commit_on(conn, inserts, updates)
        except Exception:
            # A broken connection (database restarted, network blip) must not break every
            # later write: start the next batch on a fresh one.
            self._conn = None
            conn.close()
            raise

    def _commit_on(
        self, conn: Connection, inserts: list[tuple[Any, ...]], updates: list[tuple[Any, ...]]
    ) -> None:
        """The hot path of every submit and every start, on the driver's own connection with
        statements built once (through SQLAlchemy's execute, a batch of a few rows spent more
        time in its transaction and statement machinery than in SQLite)."""
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cursor = raw.cursor()
        sqlite = self._engine.dialect.name == "sqlite"
        begin = "BEGIN IMMEDIATE" if sqlite else "BEGIN"
        own_transaction = sqlite or raw.autocommit  # PostgreSQL: the lock's session is
        try:
            if own_transaction:  # autocommit driver mode: the transaction is ours
                cursor.execute(begin)
            if inserts:
                cursor.executemany(self._insert_sql, inserts)
            for params in updates:
                cursor.execute(self._update_sql, params)
                if cursor.rowcount != 1:
                    raise Conflict(f"job {params[-2]} changed meanwhile; try again")
            if own_transaction:
                cursor.execute("COMMIT")  # synchronous=FULL, synchronous_commit=on: on disk
            else:
                raw.commit()
        except BaseException:
            if sqlite:
                if raw.in_transaction:
                    cursor.execute("ROLLBACK")
            elif own_transaction:
                try:
                    cursor.execute("ROLLBACK")
                except Exception:  # a broken connection: the server rolled back already
                    pass
            else:
                try:
                    raw.rollback()
                except Exception:  # a broken connection: the server rolled back already
                    pass
            raise
        finally:
            cursor.close()


_SpecCache = dict[int, tuple[JobSpec, str]]  # id(spec) -> (the spec, kept alive; its JSON)


def _values(job: Job, specs: _SpecCache | None = None) -> tuple[Any, ...]:
    spec_json = None
    if specs is not None:
        known = specs.get(id(job.spec))
        if known is None or known[0] is not job.spec:
            known = specs[id(job.spec)] = (job.spec, spec_to_json(job.spec))
        spec_json = known[1]
    row = job_to_row(job, spec_json)
    return tuple(row[c] for c in _COLUMNS)


# Below this many jobs submitted since a time, a page looks them up by id rather than walking
# the whole history newest first in search of them.
_SINCE_PROBE = 5_000


def _since_ids(conn: Connection, since: float) -> list[int] | None:
    """The ids of the jobs submitted at or after `since` if there are few, else None."""
    probe = select(jobs.c.id).where(jobs.c.submitted_at >= since).limit(_SINCE_PROBE)
    ids = list(conn.execute(probe).scalars())
    return ids if len(ids) < _SINCE_PROBE else None


def _compiled_insert(engine: Engine) -> str:
    """The INSERT in the driver's own positional form, columns in `_COLUMNS` order."""
    marks = _marks(engine, len(_COLUMNS))
    return f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join(marks)})"


def _compiled_update(engine: Engine) -> str:
    """The UPDATE of a whole row, positional: every column in `_COLUMNS` order, then the id
    and the version it must still have (optimistic: a row changed meanwhile is not updated)."""
    marks = _marks(engine, len(_COLUMNS) + 2)
    sets = ", ".join(f"{c} = {m}" for c, m in zip(_COLUMNS, marks, strict=False))
    return f"UPDATE jobs SET {sets} WHERE id = {marks[-2]} AND version = {marks[-1]}"


def _marks(engine: Engine, count: int) -> list[str]:
    style = engine.dialect.paramstyle
    mark = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":{}"}[style]
    return [mark.format(i + 1) for i in range(count)]


def _database_lock(engine: Engine) -> ExclusiveFileLock | AdvisoryLock | None:
    """PostgreSQL: its advisory lock; SQLite on disk: the lock file beside the database; an
    in-memory SQLite database: none."""
    if engine.dialect.name != "sqlite":
        return AdvisoryLock(engine)
    database = engine.url.database
    if not database or database == ":memory:":
        return None
    return ExclusiveFileLock(Path(database).absolute())


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


_POSTGRES_DRIVERS = ("postgresql", "postgresql+psycopg")


def _postgres_url(url: str) -> str:
    """`url` for psycopg 3, SQLAlchemy's `postgresql+psycopg` (a plain `postgresql://` would
    mean psycopg2 to SQLAlchemy); InvalidRequest for any other kind of database."""
    try:
        parsed = make_url(url)
    except Exception:
        parsed = None
    if parsed is None or parsed.drivername not in _POSTGRES_DRIVERS:
        shown = url.split("://", 1)[0] + "://..." if "://" in url else repr(url)
        raise InvalidRequest(
            f"unsupported database URL {shown}: gpuyard stores its jobs in SQLite"
            " (sqlite:///PATH) or PostgreSQL (postgresql://USER@HOST:PORT/DATABASE)"
        )
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


# libpq's options unless the URL sets them: the name finds the server's sessions in
# pg_stat_activity; keepalives and a TCP user timeout let gpuyard notice a database server
# gone silent (powered off, network cut) in about 30 s, not after the kernel's hours.
_PG_CONNECT: dict[str, Any] = {
    "application_name": "gpuyard",
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # ms: sent data left unacknowledged that long ends it
}


def _durable_commits(dbapi_conn: Any, _record: Any) -> None:
    """A commit is on disk when it returns, as SQLite's synchronous=FULL: PostgreSQL's
    default (synchronous_commit on). A database or role set to `off` (which acknowledges
    commits that a crash may then lose) is set back to `on` for gpuyard's sessions; the
    other settings all wait for the local disk (some for a replica too) and are kept."""
    with dbapi_conn.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        if cursor.fetchone()[0] == "off":
            cursor.execute("SET synchronous_commit = on")
    dbapi_conn.commit()


READ_ONLY = "gpuyard_read_only"  # an execution option: this connection only reads


def _make_engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        postgres = make_url(_postgres_url(url))
        given = {k: v for k, v in _PG_CONNECT.items() if k not in postgres.query}
        pg_engine = create_engine(postgres, pool_pre_ping=True, connect_args=given)
        event.listen(pg_engine, "connect", _durable_commits)
        return pg_engine
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide where transactions begin.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A write takes the write lock at its BEGIN (IMMEDIATE: waits out another writer
        # under busy_timeout, where a deferred one upgrading later could fail at once). A read
        # (`SqlJobStore._reader`) must not: with WAL it reads its snapshot beside the writer.
        # Begun IMMEDIATE too, a history page read held the write lock as long as it took,
        # and the group commit's writes waited behind it (bench/mixed_load.py: `show` p99
        # 745 ms with it, 58 ms without).
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


_VERSIONS = Path(__file__).parent / "migrations" / "versions"


def head_revision() -> str:
    """The newest migration's revision: each is `NNNN_what.py` with revision "NNNN", each
    revising the one before (tests/unit/test_store_migrations.py holds it to Alembic's)."""
    return max(path.name[:4] for path in _VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))


def _at_head(engine: Engine) -> bool:
    """Whether the database is at the newest revision already (a start then needs no Alembic:
    importing it and reading every migration cost each start ~0.1 s)."""
    try:
        with engine.connect() as conn:
            found = [
                row[0] for row in conn.exec_driver_sql("SELECT version_num FROM alembic_version")
            ]
    except DBAPIError:  # no such table: a new database
        return False
    return found == [head_revision()]


def _migrate(engine: Engine) -> None:
    if _at_head(engine):
        return
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def _decoded(result: Any) -> list[Job]:
    """A query's jobs, decoded by position (`rows_to_jobs`: the columns looked up once)."""
    return rows_to_jobs(list(result.keys()), result)
