"""Two servers on one PostgreSQL database: the second is refused in one line; a standby waits
for the advisory lock and, once the active server is killed (-9), takes over as a restarted
server does: it loads the jobs, re-adopts the one still running (same id, its true end, run
once) and takes new submits. Both servers share the state dir on this one machine, as
re-adopting local jobs needs (docs/install.md, "A standby server")."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, wait_ended, wait_for

pytestmark = pytest.mark.e2e


def _launch(server: ServerProcess) -> subprocess.Popen[bytes]:
    """Start `server` without waiting for it to serve (a standby serves only once it holds
    the database)."""
    server.state_dir.mkdir(parents=True, exist_ok=True)
    argv = [GPUYARD, "server", "--port", str(server.port), "--state-dir",
            str(server.state_dir), *server.args]  # fmt: skip
    with open(server.log, "ab") as log:
        server.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=server.env)
    return server.proc


def _serves(server: ServerProcess) -> bool:
    try:
        urllib.request.urlopen(f"{server.url}/healthz", timeout=1).read()
        return True
    except OSError:
        return False


def test_a_standby_takes_over_a_killed_server_and_readopts_its_running_job(
    postgres_server, tmp_path: Path
):
    # The test cluster trusts loopback, so any password is accepted: one that must never be
    # shown (banner, refusal, log).
    secret = "s3cret-pw"
    db = postgres_server.create_database("takeover").replace("postgres@", f"postgres:{secret}@")
    assert secret in db
    state = tmp_path / "state"
    options = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1", "--db", db)
    active = ServerProcess(state, *options).start()
    standby = ServerProcess(state, *options, "--standby")
    runs, release = tmp_path / "runs", tmp_path / "release"
    try:
        # Runs until the test releases it: its end comes after the takeover, whatever the
        # speed of this machine.
        script = f'echo run >> "{runs}"; while [ ! -e "{release}" ]; do sleep 0.1; done; exit 0'
        job_id = int(active.cli("submit", "--gpus", "1", "--", "sh", "-c", script).stdout)
        wait_for(runs.exists)
        gpus = active.client().job(job_id)["gpus"]

        # A plain second server on the same database is refused, in one line, no traceback.
        second = ServerProcess(state, *options)
        refused = subprocess.run(
            [GPUYARD, "server", "--port", str(second.port), "--state-dir", str(state), *options],
            capture_output=True, text=True, env=second.env, timeout=60,
        )  # fmt: skip
        assert refused.returncode != 0
        # (A root server on a state dir under /tmp may warn first that its jobs' owners
        # cannot reach it: a log record, not the error.)
        errors = [line for line in refused.stderr.splitlines() if line.startswith("gpuyard:")]
        assert len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == errors[0]
        assert "another gpuyard server already uses" in errors[0] and "--standby" in errors[0]
        assert secret not in refused.stderr
        assert refused.stdout == ""  # no banner: it never served

        # A standby waits: it says so, and does not serve while the active server lives.
        _launch(standby)
        wait_for(lambda: "waiting for it to stop" in standby.log.read_text())
        assert standby.proc is not None and standby.proc.poll() is None
        assert not _serves(standby)
        assert active.client().job(job_id)["state"] == "RUNNING"

        active.kill9()  # its database sessions end with it, and the lock with them
        wait_for(lambda: _serves(standby), timeout_s=60)
        log = standby.log.read_text()
        assert log.count("waiting for it to stop") == 1, log  # said once, asked many times
        assert "taking over" in log and "database:  PostgreSQL" in log
        assert ":***@127.0.0.1" in log

        client = standby.client()
        adopted = client.job(job_id)
        assert adopted["state"] == "RUNNING" and adopted["gpus"] == gpus
        assert f"job {job_id} re-adopted" in standby.log.read_text()

        release.touch()
        ended = wait_ended(client, job_id, 60)
        assert ended["state"] == "COMPLETED" and ended["exit_code"] == 0, ended
        assert runs.read_text().split() == ["run"], "the job ran twice"

        # The new active server takes new submits and runs them.
        marker = tmp_path / "after"
        new_id = standby.cli("submit", "--", "touch", str(marker)).stdout.strip()
        assert int(new_id) > job_id
        assert standby.cli("wait", new_id).returncode == 0
        assert marker.exists()
        for server in (active, standby):
            assert secret not in server.log.read_text()
    finally:
        release.touch()
        for server in (active, standby):
            server.stop()
        active.kill_jobs()
