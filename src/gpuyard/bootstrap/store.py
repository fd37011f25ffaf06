"""The database: which one the settings name, opening it under the one-server lock (a standby
waits there), and its errors told in one line."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.errors import Unavailable
from gpuyard.settings import Settings, masked_url

STANDBY_POLL_S = 1.0  # how often a standby asks for the database's lock
# A standby that cannot reach the database (it restarts, shuts down, starts up, the network
# is cut) asks again after a backoff that doubles from STANDBY_POLL_S up to this cap, so
# that it takes over within a few seconds of the database's return; it says so once a minute.
STANDBY_BACKOFF_CAP_S = 3.0
STANDBY_SAY_EVERY_S = 60.0


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
    password masked; a standby waits through that too (a database restarting must not end
    the one server ready to take over): it asks again with a backoff capped at
    `STANDBY_BACKOFF_CAP_S`, saying so once a minute."""
    url = database_of(settings)
    say = say or _say
    waiting = False
    backoff_s = STANDBY_POLL_S
    said_unreachable_at: float | None = None
    while True:
        try:
            store = SqlJobStore(url, exclusive=True)
        except (OperationalError, InterfaceError) as exc:
            if not settings.standby:
                raise Unavailable(_unusable(exc, url)) from None
            # A standby waits through anything: a database that is down, shutting down or
            # starting up is "not yet", as a lock held by another server is.
            now = time.monotonic()
            if said_unreachable_at is None or now - said_unreachable_at >= STANDBY_SAY_EVERY_S:
                say(
                    f"standby: cannot use {describe_database(url)} yet ({_db_reason(exc, url)});"
                    f" still waiting (asking again every {STANDBY_BACKOFF_CAP_S:g} s at most)"
                )
                said_unreachable_at = now
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, STANDBY_BACKOFF_CAP_S)
            continue
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
            backoff_s = STANDBY_POLL_S  # the database answers: back to asking every second
            time.sleep(STANDBY_POLL_S)
            continue
        except DBAPIError as exc:
            raise Unavailable(_unusable(exc, url)) from None
        if waiting:
            say("standby: the database is free (its server is gone); taking over")
        return store


def retake_store(settings: Settings) -> SqlJobStore | None:
    """The database taken back after the server lost its hold on it (`StoreHold`): a new
    store, locked; None while the database cannot be reached yet (down, shutting down,
    starting up); Unavailable, naming the holder, when another server took it meanwhile."""
    try:
        return SqlJobStore(database_of(settings), exclusive=True)
    except DBAPIError:
        return None


def _unusable(exc: DBAPIError, url: str) -> str:
    return (
        f"cannot use the database {describe_database(url)}: {_db_reason(exc, url)}; "
        "check --db (or GPUYARD_DATABASE_URL) and that the database server is up"
    )


def _say(line: str) -> None:
    print(line, flush=True)


def _db_reason(exc: DBAPIError, url: str) -> str:
    """The driver's own reason, on one line, any password in the URL scrubbed from it."""
    reason = " ".join(str(exc.orig or exc).split()) or type(exc).__name__
    password = make_url(url).password
    return reason.replace(str(password), "***") if password else reason
