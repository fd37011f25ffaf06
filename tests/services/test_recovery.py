"""What a restarted server does with jobs its database says are RUNNING."""

from __future__ import annotations

import getpass
import subprocess
import time
from pathlib import Path

import pytest

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.bootstrap import build_server
from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.settings import Settings


def _settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, kill_grace_s=1)


def _seed_running(
    tmp_path: Path, job_id: int, *, pid: int | None = None, argv: tuple[str, ...] = ("true",)
) -> None:
    """A database left by a server that died after recording a start."""
    (tmp_path / "state").mkdir(parents=True, exist_ok=True)
    store = SqlJobStore(sqlite_url(tmp_path / "state" / "gpuyard.db"))
    spec = JobSpec(argv=argv, name="t", workdir=str(tmp_path), gpus=1)
    # Owned by the server's own user: a root server runs any other owner's job as that Unix user.
    owner = getpass.getuser()
    job = Job(id=job_id, spec=spec, owner=owner, state=JobState.PENDING, submitted_at=time.time())
    running = job.transition(JobState.RUNNING, gpus=(1,), started_at=time.time(), pid=pid)
    store.write([job], [])
    store.write([], [running])
    store.close()


def _wait_state(server, job_id: int, state: JobState) -> Job:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = server.reads.get(job_id, server.auth.principal)
        if job.state is state:
            return job  # type: ignore[no-any-return]
        time.sleep(0.02)
    last = server.reads.get(job_id, server.auth.principal).state
    raise AssertionError(f"job {job_id} is {last}, not {state}")


def test_a_start_recorded_but_never_launched_is_requeued_and_runs_once(tmp_path: Path):
    runs = tmp_path / "runs"
    _seed_running(tmp_path, 7, argv=("sh", "-c", f"echo ran >> {runs}"))
    server = build_server(_settings(tmp_path))
    try:
        server.start()
        job = _wait_state(server, 7, JobState.COMPLETED)
        assert job.exit_code == 0
        time.sleep(0.3)  # a second (wrong) start would have appended by now
        assert runs.read_text() == "ran\n"
    finally:
        server.close()


def test_a_vanished_supervisor_without_status_ends_failed(tmp_path: Path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    _seed_running(tmp_path, 3, pid=dead.pid)
    jobdir = tmp_path / "state" / "jobs" / "3"
    jobdir.mkdir(parents=True)
    (jobdir / "supervisor.pid").write_text(str(dead.pid))
    server = build_server(_settings(tmp_path))
    try:
        server.start()
        job = server.reads.get(3, server.auth.principal)
        assert job.state is JobState.FAILED
        assert job.reason.startswith("SupervisorLost")
        assert server.gpus.holdings()[1].job is None
    finally:
        server.close()


def test_a_second_server_on_the_same_state_dir_is_refused(tmp_path: Path):
    first = build_server(_settings(tmp_path))
    try:
        with pytest.raises(Unavailable, match="another gpuyard server already uses"):
            build_server(_settings(tmp_path))
    finally:
        first.close()
