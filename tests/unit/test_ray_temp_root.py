"""Ray's session folder goes in a 0700 folder of the server's (issue 11: Ray's default,
/tmp/ray, is world-writable with world-readable logs): under the state dir, or, when that path
would make Ray's socket paths too long for AF_UNIX, a private one in the temporary directory.
(`tests/raycluster` checks a real cluster's session lands there.)"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from gpuyard.adapters.ray.cluster import _MAX_TEMP_CHARS, private_temp_root


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_under_a_short_state_dir_a_fresh_0700_folder(tmp_path: Path) -> None:
    state = Path("/tmp") / f"gy{tmp_path.name[-8:]}"
    state.mkdir(mode=0o755)
    try:
        (state / "ray" / "t" / "session_old").mkdir(parents=True)
        (state / "ray").chmod(0o777)  # what Ray would have made it
        root = private_temp_root(state)
        assert root == state / "ray"
        assert _mode(root) == 0o700 and list(root.iterdir()) == []  # the old session is gone
    finally:
        shutil.rmtree(state)


def test_a_state_dir_too_deep_for_rays_sockets_gets_a_private_temporary_folder(
    tmp_path: Path,
) -> None:
    state = tmp_path / ("x" * _MAX_TEMP_CHARS)
    state.mkdir()
    root = private_temp_root(state)
    try:
        assert state not in root.parents and len(str(root / "t")) <= _MAX_TEMP_CHARS
        assert _mode(root) == 0o700 and root.stat().st_uid == state.stat().st_uid
        assert not (state / "ray").exists()
    finally:
        shutil.rmtree(root)
