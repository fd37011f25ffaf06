"""Which storage failures are a full state disk (507), and which are not: real errors as the
drivers raise them, where they can be made here; PostgreSQL's by its SQLSTATE."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from sqlalchemy.exc import OperationalError

from gpuyard.adapters.disk_full import is_disk_full, mount_of


class _PgDiskFull(Exception):
    sqlstate = "53100"  # psycopg's errors.DiskFull carries this


def _sqlite_error(code: int) -> sqlite3.Error:
    err = sqlite3.OperationalError("database or disk is full")
    err.sqlite_errorcode = code  # type: ignore[attr-defined]
    return err


def test_full_disks_are_told_apart_from_other_failures() -> None:
    assert is_disk_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert is_disk_full(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)))
    assert is_disk_full(_sqlite_error(13))  # SQLITE_FULL
    assert not is_disk_full(_sqlite_error(10))  # SQLITE_IOERR: not a full disk
    assert is_disk_full(OperationalError("INSERT", {}, _sqlite_error(13)))  # SQLAlchemy's wrap
    assert is_disk_full(_PgDiskFull())
    assert not is_disk_full(OSError(errno.EACCES, "denied"))
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    try:
        try:
            raise OSError(errno.ENOSPC, "no space")
        except OSError as inner:
            raise RuntimeError("writing the launch file") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)  # found through the cause


def test_the_mount_named_is_the_file_systems_not_a_files(tmp_path: Path) -> None:
    deep = tmp_path / "state" / "jobs" / "7" / "launch.json"  # need not exist
    mount = Path(mount_of(deep))
    assert deep.is_relative_to(mount)
    assert os.path.ismount(mount)
