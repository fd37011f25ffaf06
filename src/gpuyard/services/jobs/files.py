"""Opening what a job wrote, without following what it planted.

A job can write its own folder: it can replace `output.log` with a symlink to `/etc/hostname`
(or the server's token), or a FIFO that would hang the reader. The server opens such a file
the way `openat` walks do: the job's folder with O_NOFOLLOW|O_DIRECTORY (a folder replaced by
a link is refused), the file relative to that folder's descriptor with O_NOFOLLOW|O_NONBLOCK,
then checks that what it opened is a regular file. Everything above the job's folder (the
state dir, `jobs/`) is the server's and trusted.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class PlantedFile(OSError):
    """A link, FIFO, device or socket where a job's file should be."""


def open_job_file(path: str) -> BinaryIO:
    """`path` (`<job folder>/<name>`) opened for reading, never through a link the job made;
    FileNotFoundError when absent, PlantedFile for a link or a file that is not regular."""
    folder, _, name = path.rpartition("/")
    try:
        dir_fd = os.open(folder or ".", _DIR_FLAGS)
    except OSError as exc:
        raise _planted(exc, "its folder is a symbolic link") from None
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _planted(exc, "a symbolic link") from None
    finally:
        os.close(dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
            raise PlantedFile(errno.EINVAL, f"{kind}, not a file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _planted(exc: OSError, what: str) -> OSError:
    """ELOOP (O_NOFOLLOW met a link) in words; anything else as it was."""
    if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and "folder" in what):
        return PlantedFile(
            exc.errno, f"{what}: the server never follows a link a job planted in its folder"
        )
    return exc
