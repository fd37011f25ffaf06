"""Jobs run as their owner (issue 11): on a root server alice's job has alice's uid, gid and
groups, her HOME and a 077 umask; its log is hers alone, so she cannot read bob's; its folder
stays the server's, so she cannot write her supervisor's files. Real Unix users (useradd),
real supervisors, through `LocalExecutor` and the same `RunAsPolicy` the controller uses."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.identity import unix_identity
from gpuyard.domain.errors import Forbidden, InvalidRequest
from gpuyard.services.launch.run_as import RunAsPolicy
from tests.e2e.executor_rig import Rig
from tests.e2e.unix_users import UnixUsers


@pytest.fixture
def rig() -> Iterator[Rig]:
    """A rig in a folder others may cross but not list, as a root server's state dir (pytest's
    own tmp folders are root's alone: every job would be shut out of everything)."""
    state = Path(tempfile.mkdtemp(prefix="gpuyard-runas-", dir="/tmp"))
    state.chmod(0o711)
    r = Rig(state)
    yield r
    r.executor.close()
    shutil.rmtree(state, ignore_errors=True)


def policy() -> RunAsPolicy:
    return RunAsPolicy(unix_identity, 0, "root")


def test_alices_job_runs_as_alice_and_cannot_read_bobs_log(rig: Rig, users: UnixUsers):
    bob = rig.start(1, "echo bob-secret", run_as=policy().for_owner(users.bob), workdir=Path("/"))
    assert rig.wait_end(bob.id).exit_code == 0
    bob_log = Path(rig.executor.log_path(bob.id))
    own_log = rig.executor.log_path(2)
    jobdir = rig.executor.job_dir(2)
    script = (
        'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME $SHELL"; umask; '
        f"cat {bob_log} 2>/dev/null || echo cannot-read-bob; "
        f"test -r {own_log} && echo reads-own-log; "
        f"touch {jobdir}/status.json 2>/dev/null || echo cannot-write-folder; "
        f"ls {jobdir.parent} >/dev/null 2>&1 || echo cannot-list-jobs"
    )
    rig.start(2, script, run_as=policy().for_owner(users.alice), workdir=Path("/"))
    assert rig.wait_end(2).exit_code == 0
    alice = pwd.getpwnam(users.alice)
    team = grp.getgrnam(users.team).gr_gid
    lines = rig.log(2).splitlines()
    assert lines[0] == str(alice.pw_uid) and lines[1] == str(alice.pw_gid)
    assert set(map(int, lines[2].split())) == {alice.pw_gid, team}
    assert lines[3] == f"{alice.pw_dir} {users.alice} {users.alice} /bin/sh"
    assert lines[4] == "0077"
    assert lines[5:] == ["cannot-read-bob", "reads-own-log", "cannot-write-folder",
                         "cannot-list-jobs"]  # fmt: skip
    # Each log is its owner's alone; the folder stays the server's, crossable, not listable.
    for job_id, name in ((bob.id, users.bob), (2, users.alice)):
        info = os.stat(rig.executor.log_path(job_id))
        assert (pwd.getpwuid(info.st_uid).pw_name, stat.S_IMODE(info.st_mode)) == (name, 0o600)
        folder = os.stat(rig.executor.job_dir(job_id))
        assert (folder.st_uid, stat.S_IMODE(folder.st_mode)) == (0, 0o711)


def test_a_root_server_refuses_owners_that_cannot_run(users: UnixUsers):
    identities = policy()
    assert identities.for_owner("root").uid == 0  # the server's own user: its admin
    assert identities.for_owner(users.alice).user == users.alice
    with pytest.raises(InvalidRequest, match="has no Unix user on this machine"):
        identities.check("nobody-by-this-name")
    # Another account that maps to root is refused unless the admin allows root jobs.
    as_root = RunAsPolicy(lambda owner: unix_identity("root"), 0, "gpuyard-admin")
    with pytest.raises(Forbidden, match="would run as root"):
        as_root.check("mallory")
    allowed = RunAsPolicy(lambda o: unix_identity("root"), 0, "admin", allow_root_jobs=True)
    assert allowed.for_owner("mallory").uid == 0


def test_a_users_job_has_none_of_the_servers_powers(rig: Rig, users: UnixUsers):
    """The audit's defect: a job run as the server's user read its token, killed it, and
    replaced the supervisor's bytecode that later jobs run. As its owner, it can do none."""
    token = rig.tmp / "token"
    token.write_text("the-servers-token\n")
    token.chmod(0o600)
    pyc = rig.tmp / "jobs" / ".supervisor.pyc"
    assert pyc.exists()
    script = (
        f"cat {token} 2>/dev/null || echo cannot-read-token; "
        f"kill -0 {os.getpid()} 2>/dev/null || echo cannot-signal-server; "
        f"printf x 2>/dev/null >> {pyc} || echo cannot-touch-supervisor"
    )
    rig.start(3, script, run_as=policy().for_owner(users.alice), workdir=Path("/"))
    assert rig.wait_end(3).exit_code == 0
    assert rig.log(3).split() == ["cannot-read-token", "cannot-signal-server",
                                  "cannot-touch-supervisor"]  # fmt: skip
