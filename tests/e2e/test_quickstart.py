"""The README's quick start, as a new user runs it: `make run`'s server, then the commands of the
README typed in a new terminal (no virtualenv active, the system's PATH, no GPUYARD_* set but
the URL of this test's server), on a machine without GPUs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.server import BIN, ServerProcess

ROOT = Path(__file__).resolve().parents[2]
NEW_TERMINAL_PATH = "/usr/local/bin:/usr/bin:/bin"


def readme_block(after: str) -> str:
    """The first ```sh block of the README after the line containing `after`."""
    text = (ROOT / "README.md").read_text()
    found = re.search(re.escape(after) + r".*?```sh\n(.*?)```", text, re.DOTALL)
    assert found, f"README: no sh block after {after!r}"
    return found.group(1)


def new_terminal(home: Path, url: str, **extra: str) -> dict[str, str]:
    """A fresh login's environment: no venv, no GPUYARD_STATE_DIR, no token. Root's default
    state dir (/var/lib/gpuyard) is moved beside `home`: no test reads the machine's own."""
    return {"PATH": NEW_TERMINAL_PATH, "HOME": str(home), "LANG": "C.UTF-8",
            "GPUYARD_URL": url, "GPUYARD_ROOT_STATE_DIR": str(root_default(home)),
            **extra}  # fmt: skip


def root_default(home: Path) -> Path:
    """Where root's default state dir is put for this test (its parent is `home`'s)."""
    return home.parent / "var-lib-gpuyard"


def default_state_dir(home: Path) -> Path:
    """The state dir `gpuyard` uses when told none: root's default for root (this test's
    stand-in for /var/lib/gpuyard), else ~/.local/share/gpuyard."""
    return root_default(home) if os.geteuid() == 0 else home / ".local" / "share" / "gpuyard"


@pytest.fixture
def make_run_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """`gpuyard server` as `make run` starts it: defaults (state in /var/lib/gpuyard for root,
    else ~/.local/share/gpuyard; GPUs detected: none here), the virtualenv on its PATH."""
    if not (ROOT / ".venv" / "bin" / "gpuyard").exists() or BIN != ROOT / ".venv" / "bin":
        pytest.skip("the README's commands name ./.venv, which is not this test run's env")
    home = tmp_path / "home"
    env = {"PATH": f"{BIN}:{NEW_TERMINAL_PATH}", "HOME": str(home), "LANG": "C.UTF-8"}
    server = ServerProcess(default_state_dir(home), env=env)
    server.start()
    yield server, home
    server.stop()
    server.kill_jobs()


def test_the_readme_quick_start_works_as_written_in_a_new_terminal(make_run_server) -> None:  # type: ignore[no-untyped-def]
    server, home = make_run_server
    assert server.client().gpus() == [], "the quick start must hold on a machine without GPUs"
    script = "set -eu\n" + readme_block("In a new terminal")
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                            env=new_terminal(home, server.url), timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "JOBID" in result.stdout and "done: final loss" in result.stdout, result.stdout
    (job,) = server.client().jobs(all=True)
    assert job["state"] == "COMPLETED"


def test_a_refused_or_missing_token_names_the_file_it_tried(tmp_path: Path) -> None:
    home = tmp_path / "home"
    custom = tmp_path / "custom-state"
    server = ServerProcess(custom, env={"PATH": f"{BIN}:{NEW_TERMINAL_PATH}", "HOME": str(home)})
    server.start()
    try:
        default_token = default_state_dir(home) / "token"
        queue = [str(BIN / "gpuyard"), "queue"]
        missing = subprocess.run(queue, capture_output=True, text=True,
                                 env=new_terminal(home, server.url))  # fmt: skip
        assert missing.returncode == 1 and missing.stderr.count("\n") == 1
        assert f"no API token: {default_token} does not exist" in missing.stderr
        assert "GPUYARD_STATE_DIR" in missing.stderr
        default_token.parent.mkdir(parents=True)
        default_token.write_text("an-old-servers-token\n")
        stale = subprocess.run(queue, capture_output=True, text=True,
                               env=new_terminal(home, server.url))  # fmt: skip
        assert stale.returncode == 1 and stale.stderr.count("\n") == 1
        assert f"the server refused the API token in {default_token}" in stale.stderr
        found = subprocess.run(
            queue,
            capture_output=True,
            text=True,
            env=new_terminal(home, server.url, GPUYARD_STATE_DIR=str(custom)),
        )
        assert found.returncode == 0 and found.stdout.startswith("JOBID"), found.stderr
    finally:
        server.stop()
