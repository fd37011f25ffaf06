"""The database: which one the settings name, opening it under the one-server lock (a standby
waits there), and its errors told in one line."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import make_url
from sqlalchemy.exc import DBAPIError

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.errors import Unavailable
from gpuyard.settings import Settings, masked_url

STANDBY_POLL_S = 1.0  # how often a standby asks for the database's lock


def database_of(settings: Settings) -> str:
    """The URL of the server's database: `--db`, else `gpuyard.db` in the state dir."""
    return settings.database_url or sqlite_url(settings.state_dir / "gpuyard.db")


def describe_database(url: str) -> str:
    """The database as the start banner names it; a password never shown."""
    if url.startswith("sqlite"):
        return f"SQLite {url.partition(':///')[2] or url}"
    return f"PostgreSQL {masked_url(url)}"


def open_store(settings: Settings, say: Callable[[str], object] | None = None) -> SqlJobStore:
    """The server's store, locked for it before its migrations run (a second server must
    neither upgrade the schema under a running one nor run its jobs twice): one line and no
    server when another holds it. A standby (`--standby`) waits instead: it asks again every
    `STANDBY_POLL_S` (the lock goes with the active server's process or database session)
    and says once that it waits. A database it cannot reach is one line naming it, its
    password masked."""
    url = database_of(settings)
    say = say or _say
    waiting = False
    while True:
        try:
            store = SqlJobStore(url, exclusive=True)
        except Unavailable as exc:
            if not settings.standby:
                raise Unavailable(
                    f"{exc.message} (or start this one with --standby: it waits, then takes "
                    "over when that server stops)"
                ) from None
            if not waiting:
                say(
                    f"standby: another gpuyard server holds {describe_database(url)}; waiting "
                    f"for it to stop (asking every {STANDBY_POLL_S:g} s), then taking over"
                )
                waiting = True
            time.sleep(STANDBY_POLL_S)
            continue
        except DBAPIError as exc:
            raise Unavailable(
                f"cannot use the database {describe_database(url)}: {_db_reason(exc, url)}; "
                "check --db (or GPUYARD_DATABASE_URL) and that the database server is up"
            ) from None
        if waiting:
            say("standby: the database is free (its server is gone); taking over")
        return store


def _say(line: str) -> None:
    print(line, flush=True)


def _db_reason(exc: DBAPIError, url: str) -> str:
    """The driver's own reason, on one line, any password in the URL scrubbed from it."""
    reason = " ".join(str(exc.orig or exc).split()) or type(exc).__name__
    password = make_url(url).password
    return reason.replace(str(password), "***") if password else reason
