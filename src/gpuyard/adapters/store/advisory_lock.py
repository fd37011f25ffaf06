"""The exclusive lock of a PostgreSQL database: one gpuyard server per database.

The PostgreSQL twin of `filelock.py`: a session-level advisory lock (`pg_try_advisory_lock`)
on a connection of its own, held from `acquire()` until `release()`. PostgreSQL drops it when
that session ends, so a server that dies (or whose machine does) never leaves a stale lock: a
standby waiting for it takes over. Advisory locks are per database, so several gpuyard
servers may share one PostgreSQL server, each with its own database.

The same session is the fence: the store commits its job writes on it (`connection`). Should
the session end while the server lives (a network cut, `pg_terminate_backend`), a standby may
take over; the old server's next write then fails on the dead session instead of landing
beside the new server's, and every later one is refused (`lost`, `WritesPaused`). This lock is
never taken again, since another server may have driven the database meanwhile: the server
takes a new store with a new lock when it is free and reloads from it as a restart does, or
exits when another server holds it (`services/store_hold.py`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, text

from gpuyard.domain.errors import WRITES_PAUSED_RETRY_S, Unavailable, WritesPaused

# The lock's key, the same for every gpuyard server: the bytes of "gpuyard" (a bigint). In
# pg_locks it shows as locktype 'advisory', classid = key >> 32, objid = key & 0xffffffff.
LOCK_KEY = int.from_bytes(b"gpuyard", "big")

_HOLDER = text(
    "SELECT a.pid, a.client_addr, a.application_name FROM pg_locks l"
    " JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND CAST(l.classid AS bigint) = :hi AND CAST(l.objid AS bigint) = :lo"
)


# The server side of the lock's session probes a silent client (its machine lost power, its
# network cut without a reset) after 10 s idle, every 5 s, 3 times: PostgreSQL then ends the
# session and a standby takes over within about 25 s, not after the kernel's default of two
# hours and more. (Ignored over a Unix socket, where a dead client is seen at once.)
_KEEPALIVE = (
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
)


class AdvisoryLock:
    """`pg_try_advisory_lock(LOCK_KEY)` on a dedicated connection of `engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Connection | None = None
        self._lost = False

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._lost

    @property
    def lost(self) -> bool:
        """Its session ended while held: the database may be another server's now."""
        return self._lost

    @property
    def connection(self) -> Connection:
        """The lock's session (autocommit: open a transaction on it); Unavailable once it
        has ended."""
        if self._lost or self._conn is None:
            raise WritesPaused(self.lost_message())
        return self._conn

    def check_alive(self) -> None:
        """After an error on `connection`: if its session is gone, so is the lock (`lost`),
        and Unavailable says so."""
        raw = self._conn.connection.dbapi_connection if self._conn is not None else None
        if raw is None or raw.closed or getattr(raw, "broken", False):
            self._lost = True
            raise WritesPaused(self.lost_message())

    def acquire(self) -> None:
        """Take the lock, or raise Unavailable naming the database and the session that
        holds it (to find its server) if another has it."""
        if self._lost:
            raise WritesPaused(self.lost_message())
        if self._conn is not None:
            return
        # Autocommit: the session holds the lock, not a transaction (an idle transaction
        # held for days would keep VACUUM from cleaning up behind it).
        conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            taken = conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": LOCK_KEY})
            if not taken.scalar():
                raise Unavailable(self._refusal(conn))
            for setting in _KEEPALIVE:
                conn.exec_driver_sql(setting)
            if (conn.dialect.server_version_info or (0,)) >= (14,):
                # A database's idle_session_timeout would end this session (and the lock)
                # whenever the server has nothing to write for a while.
                conn.exec_driver_sql("SET idle_session_timeout = 0")
        except BaseException:
            conn.invalidate()  # never back to the pool: its session may hold the lock
            conn.close()
            raise
        self._conn = conn

    def release(self) -> None:
        """Give the lock back (at once, not when the server notices the session's end), then
        end its session."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LOCK_KEY})
        except Exception:
            pass  # the session is gone already, and the lock with it
        finally:
            conn.invalidate()
            conn.close()

    def lost_message(self) -> str:
        """One line: why nothing is written, what the server does about it, when to retry."""
        url = self._engine.url
        return (
            f"this gpuyard server lost its hold on PostgreSQL database {url.database} (its"
            " database session ended: a restart or a network cut), so it writes nothing until"
            " it has taken the database back (it exits if another server holds it now); try"
            f" again in {WRITES_PAUSED_RETRY_S} s"
        )

    def _refusal(self, conn: Connection) -> str:
        """One line: which database is taken, by which session, and how to go on."""
        url = self._engine.url
        where = (
            f"PostgreSQL database {url.database} on {url.host or 'localhost'}:{url.port or 5432}"
        )
        holder = conn.execute(_HOLDER, {"hi": LOCK_KEY >> 32, "lo": LOCK_KEY & 0xFFFFFFFF}).first()
        session = "" if holder is None else f" (its session: {_describe(holder)})"
        return (
            f"another gpuyard server already uses {where}{session}; stop that server first,"
            " or pass another --db"
        )


def _describe(holder: Any) -> str:
    client = holder.client_addr or "a local socket"
    name = f" {holder.application_name!r}" if holder.application_name else ""
    return f"backend pid {holder.pid}{name} from {client}"
