"""A supervisor stopped (SIGSTOP, a debugger) while its job runs cannot reap the job when it
ends: before, the job stayed RUNNING, holding its GPU, until someone sent SIGCONT (66 s seen,
issue 22). The server finds it stopped and continues it, so the end is recorded within seconds
and the GPU goes to the next job."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    srv = ServerProcess(tmp_path / "state", "--gpus", "1", "--cpus", "4", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def test_a_stopped_supervisor_whose_job_ends_is_continued_and_frees_the_gpu(
    server: ServerProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    waiter = f"while [ ! -e {go} ]; do sleep 0.05; done; echo finished"
    first = server.cli("submit", "--gpus", "1", "--", "sh", "-c", waiter).stdout.strip()
    api = server.client()
    wait_for(lambda: api.job(int(first))["state"] == "RUNNING")
    nxt = server.cli("submit", "--gpus", "1", "--", "echo", "next").stdout.strip()
    pid = int((server.state_dir / "jobs" / first / "supervisor.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        go.touch()  # the job's process ends while its supervisor is stopped
        ended = wait_ended(api, first)
        assert (ended["state"], ended["exit_code"]) == ("COMPLETED", 0)
        assert "finished" in server.cli("logs", first).stdout
        later = wait_ended(api, nxt)  # the GPU went to the next job
        assert later["state"] == "COMPLETED"
        said = f"job {first}: its supervisor (pid {pid}) was stopped after its job ended"
        assert said in server.log.read_text()
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
