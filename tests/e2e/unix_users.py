"""Real Unix users for the multi-user tests: made with `useradd` (root only), removed after.

Names carry the test process's pid and a count of the sets it made, so parallel runs on one
machine (two pytest-xdist workers) never share a user, nor do two sets alive at once in one
process (the dashboard's session-wide pair and a module's)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class UnixUsers:
    """Two users, alice and bob, and a group only alice is in (a supplementary group)."""

    alice: str
    bob: str
    team: str


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


_MADE = itertools.count()


@contextmanager
def unix_users() -> Iterator[UnixUsers]:
    """Skips unless root with useradd; always removes what it made."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("real Unix users need root and useradd")
    tag = f"{os.getpid() % 100_000}x{next(_MADE)}"
    users = UnixUsers(f"gyalice{tag}", f"gybob{tag}", f"gyteam{tag}")
    made: list[tuple[str, ...]] = []
    try:
        _run("groupadd", users.team)
        made.append(("groupdel", users.team))
        for name, extra in ((users.alice, ("-G", users.team)), (users.bob, ())):
            _run("useradd", "--create-home", "--shell", "/bin/sh", *extra, name)
            made.append(("userdel", "--remove", name))
        yield users
    finally:
        for undo in reversed(made):
            subprocess.run(undo, capture_output=True)
