"""A waiting standby survives a PostgreSQL restart (`pg_ctl stop -m fast`, then start): a
database that is down or shutting down is "not yet", as a lock held by another server is. It
says so in one line, keeps asking, and still takes over when the active server is killed (-9),
re-adopting its running job. The restart is of this module's own PostgreSQL server, never the
one the other tests share."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.e2e.test_postgres_takeover import _launch, _serves

pytestmark = pytest.mark.e2e


def test_a_standby_waits_through_a_database_restart_then_takes_over(
    own_postgres, tmp_path: Path
):
    pg = own_postgres
    db = pg.create_database("restart")  # type: ignore[attr-defined]
    state = tmp_path / "state"
    options = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1", "--db", db)
    active = ServerProcess(state, *options).start()
    standby = ServerProcess(state, *options, "--standby")
    runs, release = tmp_path / "runs", tmp_path / "release"
    try:
        script = f'echo run >> "{runs}"; while [ ! -e "{release}" ]; do sleep 0.1; done; exit 0'
        job_id = int(active.cli("submit", "--gpus", "1", "--", "sh", "-c", script).stdout)
        wait_for(runs.exists)
        _launch(standby)
        wait_for(lambda: "waiting for it to stop" in standby.log.read_text())

        pg.stop_keeping_data()  # type: ignore[attr-defined]
        try:
            # It notices the database gone (or exits: the old code did, on this very error).
            wait_for(
                lambda: "standby: cannot use" in standby.log.read_text()
                or standby.proc is None or standby.proc.poll() is not None,
                timeout_s=60,
            )
            assert standby.proc is not None and standby.proc.poll() is None, (
                standby.log.read_text()[-2000:]
            )
        finally:
            pg.start_again()  # type: ignore[attr-defined]
        log = standby.log.read_text()
        waiting = [line for line in log.splitlines() if "standby: cannot use" in line]
        assert len(waiting) == 1 and "Traceback" not in log, log  # one line, said once

        # Still there once the database is back, then it takes over from a killed server.
        assert standby.proc.poll() is None
        active.kill9()
        killed_at = time.monotonic()
        wait_for(lambda: _serves(standby), timeout_s=60)
        client = standby.client()
        new_id = int(standby.cli("submit", "--", "true").stdout)
        accepted_s = time.monotonic() - killed_at
        assert new_id > job_id
        adopted = client.job(job_id)
        assert adopted["state"] == "RUNNING", adopted
        release.touch()
        ended = wait_ended(client, job_id, 60)
        assert ended["state"] == "COMPLETED" and ended["exit_code"] == 0, ended
        assert runs.read_text().split() == ["run"], "the job ran twice"
        print(f"takeover after kill -9: first accepted submit after {accepted_s:.1f} s")
    finally:
        release.touch()
        for server in (active, standby):
            server.stop()
        active.kill_jobs()
