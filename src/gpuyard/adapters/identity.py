"""The Unix identity of a job's owner, from the system's user database (`pwd`, groups)."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable

from gpuyard.services.ports import IdentityResolver, RunAs


def mapped_identity(unix_user_of: Callable[[str], str | None]) -> IdentityResolver:
    """The identity of the Unix user an account maps its owner to (`admin user add
    --unix-user U`), else of the Unix user of the owner's own name."""

    def resolve(owner: str) -> RunAs | None:
        return unix_identity(unix_user_of(owner) or owner)

    return resolve


def unix_identity(owner: str) -> RunAs | None:
    """The Unix user named `owner`: uid, primary gid, every group it belongs to (as
    `initgroups` would give a login), home and shell; None when there is no such user."""
    try:
        entry = pwd.getpwnam(owner)
    except (KeyError, UnicodeEncodeError):
        return None
    groups = tuple(dict.fromkeys([entry.pw_gid, *os.getgrouplist(owner, entry.pw_gid)]))
    return RunAs(
        user=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups,
        home=entry.pw_dir or "/", shell=entry.pw_shell or "/bin/sh",
    )  # fmt: skip
