"""A root server's state dir is one its users' jobs can reach (issue 26): by default a folder
under /var/lib, never root's home; one closed to them refuses their submits in one line
instead of queueing jobs that end "Permission denied". The default is injected here: no test
touches the machine's own."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard import locations
from gpuyard.adapters.identity import unix_identity
from gpuyard.bootstrap.state_dir import closed_to_owners, writable_state_dir
from gpuyard.domain.errors import InvalidRequest
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.settings import Settings

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a root server's rules")


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder every user may cross to (as /var/lib is), standing in for the root default."""
    folder = Path(tempfile.mkdtemp(prefix="gpuyard-root-default-"))
    os.chmod(folder, 0o711)
    try:
        yield folder / "gpuyard"
    finally:
        import shutil

        shutil.rmtree(folder)


def test_the_default_state_dir_is_under_var_lib_for_root_and_the_home_for_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GPUYARD_STATE_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert locations.state_dir_path(euid=0) == "/var/lib/gpuyard"
    assert locations.state_dir_path(euid=0, root_state_dir="/srv/x") == "/srv/x"
    assert locations.state_dir_path(euid=1000) == str(tmp_path / ".local/share/gpuyard")
    monkeypatch.setenv("GPUYARD_STATE_DIR", "/elsewhere")
    assert locations.state_dir_path(euid=0) == "/elsewhere"  # what the admin says wins


@as_root
def test_a_root_server_on_its_default_state_dir_lets_its_users_jobs_reach_their_folders(
    monkeypatch: pytest.MonkeyPatch, open_root: Path
) -> None:
    monkeypatch.delenv("GPUYARD_STATE_DIR", raising=False)
    monkeypatch.setattr(locations, "ROOT_STATE_DIR", str(open_root))
    state = Settings().state_dir
    assert state == open_root
    writable_state_dir(state)
    assert closed_to_owners(state) is None
    policy = RunAsPolicy(unix_identity, 0, "root", closed_to_owners=closed_to_owners(state))
    policy.check("nobody", script=True)  # accepted: the job can reach its folder


@as_root
def test_a_root_server_whose_state_dir_is_closed_refuses_other_users_at_submit(
    tmp_path: Path,
) -> None:
    closed = tmp_path / "home" / "state"
    closed.parent.mkdir()
    os.chmod(closed.parent, 0o700)  # as /root is
    writable_state_dir(closed)
    why = closed_to_owners(closed)
    assert why is not None and str(closed.parent) in why
    policy = RunAsPolicy(unix_identity, 0, "root", closed_to_owners=why)
    with pytest.raises(InvalidRequest) as refused:
        policy.check("nobody", script=True)
    line = str(refused.value)
    assert "cannot run a script as nobody" in line and "--state-dir /var/lib/gpuyard" in line
    assert "\n" not in line
    policy.check("nobody")  # a command needs nothing from its folder: it runs
    policy.check("root", script=True)  # the server's own jobs run as root: they reach it
