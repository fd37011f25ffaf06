"""A Ray node runs its command under the same supervisor as a local job (node mode): the
same time limit, the same stop path, and a job that kills its supervisor is still ended.
`NodeRunner` is used directly, without Ray (only `info` needs it): real processes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from gpuyard.adapters.ray.node import NodeRunner


def _run(runner: NodeRunner, timeout_s: float = 20) -> tuple[list[bytes], int, str]:
    lines: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch, code, cause = runner.poll(0.5)
        lines += batch
        if code is not None:
            return lines, code, cause
    raise AssertionError(f"the node's command did not end: {lines}")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_node_gets_its_job_env_and_the_supervisors_time_limit(tmp_path: Path) -> None:
    runner = NodeRunner()
    script = "echo MINE=$MINE; exec sleep 300"
    runner.start(["sh", "-c", script], {"MINE": "x"}, 0.5, str(tmp_path), time_limit_s=1)
    lines, code, cause = _run(runner)
    assert (code, cause) == (-signal.SIGTERM, "timeout")
    assert lines[0] == b"MINE=x"
    assert b"time limit of 1s reached" in lines[-1]


def test_a_job_that_kills_its_node_supervisor_is_ended_by_the_actor(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    runner = NodeRunner()
    script = f"sleep 300 & echo $! > {pidfile}; setsid sleep 300 & echo $! >> {pidfile}; "
    runner.start(["sh", "-c", script + "kill -9 $PPID; wait"], {}, 0.5, str(tmp_path))
    _, code, cause = _run(runner)
    assert (code, cause) == (-signal.SIGKILL, "lost")
    pids = [int(pid) for pid in pidfile.read_text().split()]
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)  # the setsid one too


def test_a_node_command_that_exits_reports_its_code(tmp_path: Path) -> None:
    runner = NodeRunner()
    runner.start(["sh", "-c", "echo out; exit 3"], {}, 0.5, str(tmp_path))
    assert _run(runner) == ([b"out"], 3, "-")
