"""A state dir the server cannot write (a read-only mount) is one line naming the path and a
fix, as `gpuyard doctor` gives, not a bare "Read-only file system"; one given as another user's
link is refused the same way, never taken over."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, free_port
from tests.e2e.unix_users import unix_users


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A small read-only tmpfs (root may mount; else the test cannot make one: root bypasses a
    directory's mode bits)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        if os.geteuid() == 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {made.stderr.decode().strip()}")
        mount.chmod(0o500)  # not root: the mode bits hold
    try:
        yield mount
    finally:
        if made.returncode == 0:
            subprocess.run(["umount", str(mount)], check=True)
        mount.chmod(0o700)


@pytest.mark.parametrize("below", ["", "state"])
def test_a_read_only_state_dir_names_the_path_and_a_fix(read_only_dir: Path, below: str):
    state = read_only_dir / below if below else read_only_dir
    env = {**os.environ, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.pop("GPUYARD_TOKEN", None)
    result = subprocess.run(
        [GPUYARD, "server", "--state-dir", str(state), "--port", str(free_port()), "--gpus", "1"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(state) in lines[0]
    assert "--state-dir" in lines[0] and "GPUYARD_STATE_DIR" in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's link needs root to make one")
def test_a_state_dir_that_is_another_users_link_is_refused_in_one_line(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="gpuyard-link-", dir="/tmp"))
    try:
        shared.chmod(0o1777)  # as /tmp
        target = shared / "roots-folder"  # root's, 0755: what bob would have chmodded 0711
        target.mkdir(mode=0o755)
        target.chmod(0o755)
        link = shared / "state"
        link.symlink_to(target)
        with unix_users() as users:
            bob = pwd.getpwnam(users.bob)
            os.lchown(link, bob.pw_uid, bob.pw_gid)
            env = {**os.environ, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            env.pop("GPUYARD_TOKEN", None)
            result = subprocess.run(
                [GPUYARD, "server", "--state-dir", str(link), "--port", str(free_port()),
                 "--gpus", "1", "--socket", "off"],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
        assert result.returncode == 1, result.stdout
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert str(link) in lines[0] and "symbolic link" in lines[0]
        assert f"uid {bob.pw_uid}" in lines[0] or users.bob in lines[0]
        assert (target.stat().st_mode & 0o777) == 0o755 and not list(target.iterdir())
    finally:
        shutil.rmtree(shared, ignore_errors=True)
