"""Named crash points, one at a time, where the chaos run found a bug (issue 12)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuyard.services.jobs.crashpoints import ENV_VAR
from tests.e2e.server import ServerProcess, wait_for

pytestmark = pytest.mark.e2e

# Its first run works until stopped (and exits 0 on SIGTERM, as a checkpointing job does); a
# later run ends at once. Each run appends its restart count.
JOB = (
    'echo "$GPUYARD_RESTART_COUNT" >> "$RUNS"; '
    'if [ "$GPUYARD_RESTART_COUNT" -ge 1 ]; then exit 0; fi; '
    'trap "exit 0" TERM; while :; do sleep 0.1; done'
)


def _row(state_dir: Path, job_id: int) -> tuple[str, int | None]:
    with sqlite3.connect(f"file:{state_dir / 'gpuyard.db'}?mode=ro", uri=True) as db:
        state, pid = db.execute("SELECT state, pid FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return state, pid


def test_a_start_recorded_but_not_launched_runs_the_job_it_is_not_the_last_runs_end(
    tmp_path: Path,
) -> None:
    """A job that ran once (drained --now: requeued) is started again; the server dies after
    that start is recorded, before the launch. Its folder still holds the first run's
    supervisor.pid and status.json: the restarted server must launch the job again, not take
    the first run's end (SIGTERM, or exit 0) for this run's."""
    runs = tmp_path / "runs"
    server = ServerProcess(tmp_path / "state", "--gpus", "1", "--cpus", "8", "--kill-grace", "1")
    server.start()
    try:
        job_id = int(server.cli("submit", "--gpus", "1", "--env", f"RUNS={runs}", "--",
                                "sh", "-c", JOB).stdout)  # fmt: skip
        wait_for(lambda: runs.exists() and runs.read_text().split() == ["0"])
        server.cli("admin", "drain", "0", "--now", "--reason", "test")
        client = server.client()
        wait_for(lambda: (j := client.job(job_id))["state"] == "PENDING" and j["restarts"] == 1)

        server.kill9()
        server.env[ENV_VAR] = "start_recorded:1"  # its start durable, not launched
        server.start()
        del server.env[ENV_VAR]
        assert server.proc is not None
        server.cli("admin", "resume", "0", check=False)  # its reply may be lost: it dies now
        wait_for(lambda: server.proc is not None and server.proc.poll() is not None)
        assert _row(server.state_dir, job_id) == ("RUNNING", None), "not the moment meant"

        server.start()
        client = server.client()
        done = wait_for(lambda: (j := client.job(job_id))["state"] not in ("PENDING", "RUNNING")
                        and j)  # fmt: skip
        assert (done["state"], done["exit_code"]) == ("COMPLETED", 0)
        assert runs.read_text().split() == ["0", "1"]
    finally:
        server.stop()
        server.kill_jobs()
