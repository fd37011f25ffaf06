"""The Unix identity of a job's owner, from the system's user database (`pwd`, groups)."""

from __future__ import annotations

import os
import pwd

from gpuyard.services.ports import RunAs


def unix_identity(owner: str) -> RunAs | None:
    """`owner`'s Unix user (the owner's name is the user's name: accounts with a `unix_user`
    mapping extend this one function): uid, primary gid, every group it belongs to (as
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
