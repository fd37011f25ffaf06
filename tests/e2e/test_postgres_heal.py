"""A server whose PostgreSQL restarts takes its database back by itself (issue 22): while the
database is away `/healthz` says so (503, one line, Retry-After) and clients wait; once it is
back the server takes a new lock and reloads from the database as a restart would, in the same
process on the same port: its running job is re-adopted (not launched twice), the end a job had
meanwhile is recorded, and every submit of a load of SDK clients lands once. A server whose
database another took meanwhile exits non-zero at once, in one line. Each test restarts a
PostgreSQL server of its own, never the one the other tests share."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest

from gpuyard.adapters.store.advisory_lock import LOCK_KEY
from gpuyard.client import Client
from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for
from tests.e2e.test_postgres_takeover import _launch

pytestmark = pytest.mark.e2e


def health(server: ServerProcess) -> tuple[int, str, str | None]:
    """`/healthz` as a load balancer sees it: status, body, Retry-After (0: no answer)."""
    try:
        with urllib.request.urlopen(f"{server.url}/healthz", timeout=2) as answer:
            return answer.status, answer.read().decode(), None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("Retry-After")
    except OSError:
        return 0, "", None


def _waiting_job(server: ServerProcess, tmp_path: Path, name: str, exit_code: int) -> int:
    """A job that notes each run of it in `<name>.runs` (its pid in `<name>.pid`) and ends
    with `exit_code` once `<name>.go` exists."""
    runs, go, pid = (tmp_path / f"{name}.{what}" for what in ("runs", "go", "pid"))
    script = (
        f'echo $$ > "{pid}"; echo run >> "{runs}";'
        f' while [ ! -e "{go}" ]; do sleep 0.1; done; exit {exit_code}'
    )
    return int(server.cli("submit", "--gpus", "1", "--", "sh", "-c", script).stdout)


class Submitters:
    """`n` SDK clients submitting `true` back to back (keyed: the SDK's default) until
    stopped; what each was acknowledged (and when: `acknowledged_at`, monotonic), and what
    failed after the client's own retries. bench/pg_heal.py measures with it too."""

    def __init__(self, server: ServerProcess, n: int) -> None:
        self.acknowledged: list[int] = []
        self.acknowledged_at: list[float] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(server.client(),)) for _ in range(n)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, client: Client) -> None:
        while not self._stop.is_set():
            try:
                job = client.submit(["true"], workdir="/tmp")
            except Exception as exc:  # what the user would see: refused after the retries
                self.failed.append(f"{type(exc).__name__}: {exc}")
            else:
                self.acknowledged.append(int(job["id"]))
                self.acknowledged_at.append(time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def rows(db: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db.replace("+psycopg", ""), autocommit=True) as conn:
        return conn.execute(query).fetchall()


def test_a_server_takes_its_database_back_after_a_restart_under_load_and_loses_nothing(
    own_postgres, tmp_path: Path
):
    pg = own_postgres
    db = pg.create_database("heal")  # type: ignore[attr-defined]
    server = ServerProcess(
        tmp_path / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1", "--db", db
    ).start()
    load: Submitters | None = None
    try:
        kept = _waiting_job(server, tmp_path, "kept", 0)
        ends = _waiting_job(server, tmp_path, "ends", 3)
        wait_for(lambda: (tmp_path / "kept.runs").exists() and (tmp_path / "ends.runs").exists())
        assert server.proc is not None
        pid = server.proc.pid
        load = Submitters(server, 4)
        wait_for(lambda: len(load.acknowledged) >= 20)

        pg.stop_keeping_data()  # type: ignore[attr-defined]
        try:
            (tmp_path / "ends.go").touch()  # it ends while nothing can be written
            wait_for(lambda: health(server)[0] == 503, timeout_s=30)
            _, body, retry_after = health(server)
            assert "lost its hold on PostgreSQL database heal" in body and retry_after == "2", body
        finally:
            pg.start_again()  # type: ignore[attr-defined]
        wait_for(lambda: health(server)[0] == 200, timeout_s=60)
        before = len(load.acknowledged)
        wait_for(lambda: len(load.acknowledged) >= before + 20)  # writes land again
        load.stop()

        # The same process, on the same port, said once what it did; no traceback.
        assert server.proc.poll() is None and server.proc.pid == pid
        log = server.log.read_text()
        assert "took its database back after" in log and "Traceback" not in log, log[-3000:]
        assert load.failed == [], load.failed[:3]  # nothing refused: they waited and landed
        client = server.client()
        ended = wait_ended(client, ends, 30)
        assert ended["state"] == "FAILED" and ended["exit_code"] == 3, ended  # no end lost
        assert client.job(kept)["state"] == "RUNNING"
        assert (tmp_path / "kept.runs").read_text().split() == ["run"], "launched twice"
        (tmp_path / "kept.go").touch()
        assert wait_ended(client, kept, 30)["state"] == "COMPLETED"
        # Every acknowledged submit is one job in the database, none twice, none unacknowledged.
        ids = {int(row[0]) for row in rows(db, "SELECT id FROM jobs")}
        assert len(set(load.acknowledged)) == len(load.acknowledged)
        assert ids == {kept, ends, *load.acknowledged}
    finally:
        if load is not None:
            load.stop()
        for name in ("kept", "ends"):
            (tmp_path / f"{name}.go").touch()
        server.stop()
        server.kill_jobs()


def test_a_server_whose_database_another_took_meanwhile_exits_at_once_in_one_line(
    own_postgres, tmp_path: Path
):
    pg = own_postgres
    db = pg.create_database("fenced")  # type: ignore[attr-defined]
    server = ServerProcess(tmp_path / "state", "--gpus", "1", "--kill-grace", "1", "--db", db)
    server.start()
    taken = threading.Event()
    other = psycopg.connect(db.replace("+psycopg", ""), autocommit=True)
    try:
        job = _waiting_job(server, tmp_path, "job", 0)
        wait_for((tmp_path / "job.runs").exists)
        assert server.client().job(job)["state"] == "RUNNING"
        job_pid = int((tmp_path / "job.pid").read_text())

        def take_over() -> None:  # another server's session, waiting in the lock's queue
            other.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
            taken.set()

        waiter = threading.Thread(target=take_over)
        waiter.start()
        wait_for(lambda: rows(db, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
                                   " AND NOT granted") != [])  # fmt: skip
        # The server's session ends (a network cut, an operator's pg_terminate_backend): the
        # waiting session gets the lock at once, before the server can ask for it again.
        rows(db, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
                  " AND granted")  # fmt: skip
        waiter.join(timeout=30)
        assert taken.is_set()
        assert server.proc is not None
        wait_for(lambda: server.proc is not None and server.proc.poll() is not None, timeout_s=30)
        assert server.proc.returncode != 0
        log = server.log.read_text()
        assert "another gpuyard server already uses PostgreSQL database fenced" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert pid_alive(job_pid), "the job must run on: the other server drives it now"
    finally:
        other.close()
        (tmp_path / "job.go").touch()
        server.stop()
        server.kill_jobs()


def test_a_standby_that_wins_the_database_in_a_restart_waits_for_the_port_and_serves_on(
    own_postgres, tmp_path: Path
):
    # The primary is frozen (SIGSTOP) through the restart, so the standby on the same port
    # and state dir takes the free lock first; the primary, continued, finds the database
    # another's and exits; the standby binds the port it let go and re-adopts its job. The
    # clients, pointed at that one port, see one server throughout: nothing refused or lost.
    pg = own_postgres
    db = pg.create_database("handover")  # type: ignore[attr-defined]
    state = tmp_path / "state"
    options = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1", "--db", db)
    active = ServerProcess(state, *options).start()
    standby = ServerProcess(state, *options, "--standby")
    standby.port = active.port  # a second unit with the same flags
    load: Submitters | None = None
    assert active.proc is not None
    try:
        kept = _waiting_job(active, tmp_path, "kept", 0)
        wait_for((tmp_path / "kept.runs").exists)
        _launch(standby)
        wait_for(lambda: "waiting for it to stop" in standby.log.read_text())
        load = Submitters(active, 4)
        wait_for(lambda: len(load.acknowledged) >= 20)

        os.kill(active.proc.pid, signal.SIGSTOP)
        try:
            pg.stop_keeping_data()  # type: ignore[attr-defined]
            pg.start_again()  # type: ignore[attr-defined]
            wait_for(lambda: "is still the old server's" in standby.log.read_text(), 60)
        finally:
            os.kill(active.proc.pid, signal.SIGCONT)
        wait_for(lambda: active.proc is not None and active.proc.poll() is not None, 30)
        assert active.proc.returncode != 0
        old_log = active.log.read_text()
        assert "another gpuyard server already uses PostgreSQL database handover" in old_log
        wait_for(lambda: health(standby)[0] == 200, 60)
        before = len(load.acknowledged)
        wait_for(lambda: len(load.acknowledged) >= before + 20)
        load.stop()

        assert load.failed == [], load.failed[:3]
        for log in (old_log, standby.log.read_text()):
            assert "Traceback" not in log, log[-3000:]
        client = standby.client()
        assert client.job(kept)["state"] == "RUNNING"
        assert (tmp_path / "kept.runs").read_text().split() == ["run"], "launched twice"
        ids = {int(row[0]) for row in rows(db, "SELECT id FROM jobs")}
        assert ids == {kept, *load.acknowledged} and len(ids) == len(load.acknowledged) + 1
        (tmp_path / "kept.go").touch()
        assert wait_ended(client, kept, 30)["state"] == "COMPLETED"
    finally:
        if load is not None:
            load.stop()
        if active.proc is not None and active.proc.poll() is None:
            os.kill(active.proc.pid, signal.SIGCONT)
        (tmp_path / "kept.go").touch()
        for server in (active, standby):
            server.stop()
        active.kill_jobs()
