"""Supervisors forked by the fork server: each in its own session, outliving the fork server
and the executor, recognised after a restart, its exit code still reported; a fork server that
is gone is replaced. Real processes through `LocalExecutor` on a tmp dir."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.executor_rig import Rig
from tests.e2e.server import pid_alive, wait_for


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.executor.close()


def test_a_supervisor_is_forked_into_its_own_session_and_reports_its_end(rig: Rig) -> None:
    job = rig.start(1, "sleep 1; exit 3")
    forks = [p for p in psutil.Process().children() if "--serve" in p.cmdline()]
    assert len(forks) == 1, "one fork server, the executor's child"
    supervisor = psutil.Process(job.pid)
    assert supervisor.ppid() == forks[0].pid
    wait_for(lambda: os.getsid(supervisor.pid) == supervisor.pid)  # a moment after the fork
    assert rig.wait_end(1).exit_code == 3


def test_a_forked_supervisor_outlives_the_executor_and_is_recovered(rig: Rig) -> None:
    job = rig.start(2, "sleep 30")
    jobdir = str(rig.executor.job_dir(2))
    wait_for(lambda: psutil.Process(job.pid).cwd() == jobdir)  # a moment after the fork
    assert os.getsid(job.pid or 0) == job.pid
    rig.executor.close()  # the server goes away, and its fork server with it
    time.sleep(0.2)
    assert pid_alive(job.pid or 0), "the supervisor died with the fork server"
    rig.executor = rig.open()  # a restarted server
    assert rig.executor.recover(job).alive is not None
    unrecorded = job.with_changes(pid=None, pid_started_at=None)  # crashed before the record
    assert rig.executor.recover(unrecorded).alive is not None  # found by supervisor.pid
    rig.executor.watch(job)
    rig.executor.stop(job)
    assert rig.wait_end(2).stop_requested


def test_a_fork_server_that_is_gone_is_replaced(rig: Rig) -> None:
    rig.start(3, "sleep 30")
    forks = wait_for(lambda: [p for p in psutil.Process().children() if "--serve" in p.cmdline()])
    forks[0].send_signal(signal.SIGKILL)
    forks[0].wait(5)
    wait_for(lambda: rig.executor._forks is not None and not rig.executor._forks.alive)
    job = rig.start(4, "exit 0")
    assert rig.wait_end(4).exit_code == 0
    # The first job's supervisor lost the one that knew its exit code: its end is still
    # reported (as an adopted supervisor's is).
    first = rig.executor.job_dir(3) / "supervisor.pid"
    os.kill(int(first.read_text()), signal.SIGTERM)
    assert rig.wait_end(3).stop_requested
    assert job.pid is not None and not pid_alive(job.pid)
