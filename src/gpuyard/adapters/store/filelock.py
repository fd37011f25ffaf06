"""The exclusive lock of an embedded database: one gpuyard server per SQLite file.

Two servers on one database would both run every pending job and hand out the same job ids;
an `flock` on `<database>.lock` beside the file stops the second one. The kernel drops the lock
when the process dies, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

from gpuyard.domain.errors import Unavailable


class ExclusiveFileLock:
    """An `flock` held from `acquire()` until `release()` (or the process's end)."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.path = database.with_name(database.name + ".lock")
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lock, or raise Unavailable naming the database if another holder has it."""
        if self._file is not None:
            return
        lock_file = open(self.path, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise Unavailable(
                f"another gpuyard server already uses {self.database}; stop it or pass another"
                " --state-dir"
            ) from None
        self._file = lock_file

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None
