"""As whom a job runs (`RunAsPolicy`), with a hand-made user database."""

from __future__ import annotations

import pytest

from gpuyard.domain.errors import Forbidden, InvalidRequest
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.ports import RunAs

USERS = {
    "root": RunAs("root", 0, 0, (0,), "/root", "/bin/bash"),
    "ada": RunAs("ada", 1000, 1000, (1000, 27), "/home/ada"),
    "toor": RunAs("toor", 0, 0, (0,), "/root"),  # a second name for uid 0
    "me": RunAs("me", 1001, 1001, (1001,), "/home/me"),
}


def test_a_normal_users_server_runs_every_job_as_itself_with_its_own_umask() -> None:
    identities = RunAsPolicy(USERS.get, 1001, "me", server_umask=0o002)
    for owner in ("me", "ada", "someone-unknown"):
        assert identities.for_owner(owner) == RunAs("me", 1001, 1001, (1001,), "/home/me",
                                                    umask=0o002)  # fmt: skip
    assert not identities.switches_users


def test_a_root_server_runs_each_job_as_its_owner_and_refuses_what_cannot_run() -> None:
    identities = RunAsPolicy(USERS.get, 0, "root")
    assert identities.for_owner("ada") == USERS["ada"] and USERS["ada"].umask == 0o077
    # The server's own user (the single token's admin: `make run` as root) keeps running
    # its jobs as before.
    assert identities.for_owner("root").uid == 0 and identities.for_owner("root").umask == 0o022
    with pytest.raises(InvalidRequest, match=r"job owner 'carol' has no Unix user on this machine"):
        identities.check("carol")
    with pytest.raises(Forbidden, match=r"'toor' would run as root.*GPUYARD_ALLOW_ROOT_JOBS"):
        identities.check("toor")
    allowed = RunAsPolicy(USERS.get, 0, "root", allow_root_jobs=True)
    assert allowed.for_owner("toor").uid == 0
