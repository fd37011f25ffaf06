"""A real small filesystem for disk-full tests: a size-limited tmpfs mounted by the test (as
root), filled to its last page by a filler file, unmounted at the end whatever happened."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.needs import missing


@contextlib.contextmanager
def small_disk(mount: Path, size_mib: int = 8) -> Iterator[Path]:
    """`mount` (made here) as a tmpfs of `size_mib` MiB, mode 0700 (a state dir others may
    write is refused). Skipped without root or tmpfs; under CI that fails instead."""
    mount.mkdir(parents=True)
    why = None
    if os.geteuid() != 0:
        why = "mounting a small filesystem needs root"
    else:
        made = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(mount)],
            capture_output=True, text=True,
        )  # fmt: skip
        if made.returncode != 0:
            why = f"cannot mount a tmpfs: {made.stderr.strip()}"
    if why is not None:
        missing(why, "the disk-full tests")
    try:
        yield mount
    finally:
        _unmount(mount)


def _unmount(mount: Path) -> None:
    for _ in range(50):  # a process being killed may still hold a folder for a moment
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has not one byte left for it; returns the file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    block = b"\0" * (1 << 20)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = memoryview(block)[:size]
            with contextlib.suppress(OSError):
                while os.write(fd, chunk):
                    pass
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler


def full_line(disk: Path) -> str:
    """The one line a refused write answers, for a state dir on `disk`."""
    return (
        f"the server's state disk is full: nothing was saved; free space on {disk}, then try "
        "again (the server takes work again by itself, no restart needed)"
    )
