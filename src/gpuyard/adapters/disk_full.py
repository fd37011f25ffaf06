"""A full state disk, told apart from every other storage failure.

SQLite says "database or disk is full" (SQLITE_FULL), PostgreSQL `disk_full` (SQLSTATE 53100),
the file system ENOSPC or EDQUOT. To the person submitting, all of these mean the same thing:
nothing was saved, and the server can do nothing about it until someone frees space. So they
become one domain error, `StateDiskFull` (HTTP 507, one line naming the disk's mount), instead
of "internal server error". Nothing else changes: the transaction was rolled back by the store
as for any failure (nothing half-written), the journal keeps and retries the changes it could
not write, and the next write after space returns simply works.

Only the adapters know where their disk is, so the translation lives here: the store installs
it by one call (`translate_disk_full`) on both ways it writes, SQLAlchemy's engine (accounts,
drains, GPU stats, clean) and the group-commit writer's raw driver cursor (every submit and job
change); the local executor calls `raise_if_disk_full` when it cannot write a job's folder at
launch (the controller then leaves the job pending, to be launched once there is room).
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, event

from gpuyard.domain.errors import StateDiskFull

Item = TypeVar("Item")

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13  # primary result code; extended codes keep it in the low byte
_PG_DISK_FULL = "53100"


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or anything it wraps (SQLAlchemy's `.orig`, a cause, a context), says the
    disk is full."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, StateDiskFull):
            return True
        if isinstance(err, OSError) and err.errno in _FULL_ERRNOS:
            return True
        if isinstance(err, sqlite3.Error) and _sqlite_full(err):
            return True
        if getattr(err, "sqlstate", None) == _PG_DISK_FULL:  # psycopg's DiskFull
            return True
        orig = getattr(err, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, err.__cause__,
                 err.__context__]  # fmt: skip
    return False


def _sqlite_full(err: sqlite3.Error) -> bool:
    code = getattr(err, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == _SQLITE_FULL
    return "database or disk is full" in str(err)


def disk_full(where: str) -> StateDiskFull:
    """The one line a user sees; `where` names the disk (a mount point, or the database
    server's)."""
    return StateDiskFull(
        f"the server's state disk is full: nothing was saved; free space on {where}, "
        "then try again (the server takes work again by itself, no restart needed)"
    )


def mount_of(path: Path) -> str:
    """The mount point of the file system holding `path` (or its nearest existing parent):
    what an admin frees space on, rather than the path of one file."""
    here = path.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        device = here.stat().st_dev
        while here != here.parent and here.parent.stat().st_dev == device:
            here = here.parent
    except OSError:
        pass
    return str(here)


def disk_of(engine: Engine) -> str:
    """Where a store's database lives, as `disk_full` names it."""
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database and database != ":memory:":
        return mount_of(Path(database))
    return "the database server's disk"


def translate_disk_full(
    engine: Engine, commit_batch: Callable[[Sequence[Item]], None]
) -> Callable[[Sequence[Item]], None]:
    """Make every write of a store answer `StateDiskFull` for a full disk: hooks the engine's
    errors (its statements) and returns `commit_batch` (the group-commit writer's, which runs on
    the driver's own cursor) wrapped the same way."""
    where = disk_of(engine)

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> None:
        if is_disk_full(context.original_exception):
            raise disk_full(where) from context.original_exception

    def commit(batch: Sequence[Item]) -> None:
        try:
            commit_batch(batch)
        except Exception as exc:
            if is_disk_full(exc) and not isinstance(exc, StateDiskFull):
                raise disk_full(where) from exc
            raise

    return commit


def raise_if_disk_full(exc: BaseException, path: Path) -> None:
    """For file writes outside the database (a job's folder at launch): `StateDiskFull`
    naming `path`'s mount when `exc` is a full disk; nothing otherwise."""
    if is_disk_full(exc):
        raise disk_full(mount_of(path)) from exc
