"""At submit, a job's workdir, `--venv`/`--python` and program are looked at as the user the
job runs as (issues 26 and 23): a missing one is refused in one line, and a root server tells
nobody what exists inside folders they cannot enter. Real processes, a real Unix user."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.identity import unix_identity
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import JobSpec
from gpuyard.services.launch.launchable import check_launchable, probe_of
from gpuyard.services.ports import RunAs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="looks as another user: root only")


@pytest.fixture
def nobody() -> RunAs:
    found = unix_identity("nobody")
    if found is None:
        pytest.skip("no user nobody here")
    return found


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder everyone may enter (as a project folder on a shared box), with a root-only
    folder inside holding a real interpreter."""
    folder = Path(tempfile.mkdtemp(prefix="gpuyard-launchable-"))
    os.chmod(folder, 0o755)
    private = folder / "root-only"
    (private / "venv" / "bin").mkdir(parents=True)
    shutil.copy("/bin/true", private / "venv" / "bin" / "python")
    os.chmod(private, 0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _refusal(spec: JobSpec, run_as: RunAs) -> str:
    with pytest.raises(InvalidRequest) as refused:
        check_launchable(probe_of(spec, run_as, "/usr/bin:/bin"), server_uid=0)
    return str(refused.value)


def test_a_venv_inside_a_folder_the_user_cannot_enter_reads_as_missing(
    nobody: RunAs, shared: Path
) -> None:
    """Root sees the venv; nobody cannot reach it: the refusal is the one a missing venv
    gets, word for word but the path, so it tells nothing of what is in there."""
    there = JobSpec(("python", "-V"), "x", str(shared), venv=str(shared / "root-only/venv"))
    missing = JobSpec(("python", "-V"), "x", str(shared), venv=str(shared / "root-only/nope"))
    told = _refusal(there, nobody)
    assert "does not exist or user nobody cannot run it" in told and "\n" not in told
    assert told.replace("venv", "nope") == _refusal(missing, nobody).replace("venv", "nope")
    # The server's own user (root) can run it: not refused.
    check_launchable(probe_of(there, None, "/usr/bin:/bin"), server_uid=0)


def test_a_program_not_on_the_job_path_or_a_workdir_the_user_cannot_enter_is_refused(
    nobody: RunAs, shared: Path
) -> None:
    told = _refusal(JobSpec(("no-such-program-xyz",), "x", str(shared)), nobody)
    assert told.startswith("no-such-program-xyz: not found on the job's PATH")
    told = _refusal(JobSpec(("true",), "x", str(shared / "root-only")), nobody)
    assert told.startswith(f"workdir '{shared / 'root-only'}' does not exist on the server or")
    # What nobody can run passes: a program on the PATH the job was sent with.
    ok = JobSpec(("true",), "x", str(shared), env=(("PATH", "/usr/bin:/bin"),))
    check_launchable(probe_of(ok, nobody, "/nowhere"), server_uid=0)
