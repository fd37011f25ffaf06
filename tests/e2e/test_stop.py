"""Cancel and time limits stop the whole process tree: SIGTERM, grace, SIGKILL, no orphan."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for

# A tree: two background sleeps, one of them escaping into its own session, pids recorded.
TREE = (
    'sleep 300 & echo $! >> "$PIDS"; '
    'setsid sleep 300 & echo $! >> "$PIDS"; '
    'echo $$ >> "$PIDS"; echo started; wait'
)


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _start_tree(server: ServerProcess, tmp_path: Path, *extra: str) -> tuple[str, Path]:
    pids = tmp_path / "pids"
    job_id = server.cli("submit", *extra, "--env", f"PIDS={pids}", "--", "sh", "-c", TREE)
    wait_for(lambda: len(_pids(pids)) == 3)
    return job_id.stdout.strip(), pids


def test_cancel_stops_every_process_of_the_job(server: ServerProcess, tmp_path: Path):
    job_id, pids = _start_tree(server, tmp_path, "--gpus", "1")
    assert all(pid_alive(p) for p in _pids(pids))
    server.cli("cancel", job_id)
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "CANCELLED"
    assert not [p for p in _pids(pids) if pid_alive(p)], "a process of the job survived cancel"
    assert server.client().gpus()[job["gpus"][0]]["job"] is None


def test_cancel_pending_job_never_runs_it(server: ServerProcess, tmp_path: Path):
    marker = tmp_path / "ran"
    blocker = server.cli("submit", "--gpus", "4", "--", "sleep", "30").stdout.strip()
    waiting = server.cli("submit", "--gpus", "1", "--", "touch", str(marker)).stdout.strip()
    assert server.client().job(int(waiting))["state"] == "PENDING"
    server.cli("cancel", waiting)
    server.cli("cancel", blocker)
    assert server.client().job(int(waiting))["state"] == "CANCELLED"
    wait_for(lambda: server.client().job(int(blocker))["state"] == "CANCELLED")
    assert not marker.exists()


def test_time_limit_stops_the_tree_with_timeout(server: ServerProcess, tmp_path: Path):
    job_id, pids = _start_tree(server, tmp_path, "--time", "2s")
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "TIMEOUT"
    assert "limit" in job["reason"].lower()
    assert not [p for p in _pids(pids) if pid_alive(p)]
    assert "time limit" in server.cli("logs", job_id).stdout


def test_job_ignoring_sigterm_is_killed_after_the_grace_period(
    server: ServerProcess, tmp_path: Path
):
    pidfile = tmp_path / "pid"
    script = f"trap '' TERM; echo $$ > {pidfile}; while true; do sleep 0.1; done"
    job_id = server.cli("submit", "--", "sh", "-c", script).stdout.strip()
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
    server.cli("cancel", job_id)
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "CANCELLED"
    assert not pid_alive(pid)
    assert "SIGKILL" in server.cli("logs", job_id).stdout


def test_cancel_finished_job_is_a_conflict(server: ServerProcess):
    job_id = server.cli("submit", "--", "true").stdout.strip()
    server.cli("wait", job_id)
    result = server.cli("cancel", job_id, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"gpuyard: job {job_id} already ended (COMPLETED); there is nothing to cancel"
    )
