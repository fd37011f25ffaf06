"""A state dir the server cannot write (a read-only mount) is one line naming the path and a
fix, as `gpuyard doctor` gives, not a bare "Read-only file system"."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, free_port


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
