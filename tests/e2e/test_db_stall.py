"""A stalled database (PostgreSQL stopped with SIGSTOP: connections open, nothing answers)
never hangs the API (issue 22): what needs the database answers 503 with Retry-After in a few
seconds, what the server holds in memory and in files (health, the live queue, a live or
recently finished job, its log) answers at once, and once the database answers again nothing
acknowledged is missing and a refused keyed submit is queued once.

The test starts its own PostgreSQL cluster: stopping the shared test server would stall every
other test's database."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from tests.e2e.db_stall import Answer, request, stalled
from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.e2e

# Generous: a loaded 2-core machine must pass; the figures are bench/db_stall.py's.
READ_BOUND_S = 2.0
REFUSAL_BOUND_S = 6.0  # the request deadline (2 s) and the machine's slack


def _refused_as_stalled(answer: Answer, what: str) -> None:
    assert answer.status == 503, (what, answer)
    assert int(answer.headers["retry-after"]) >= 1, (what, answer.headers)
    message = answer.json()["error"]["message"]
    assert "database is not answering" in message and "\n" not in message, message
    assert answer.seconds < REFUSAL_BOUND_S, (what, answer.seconds)


def test_a_stalled_database_leaves_reads_from_memory_answering_and_refuses_the_rest_fast(
    own_postgres: PostgresServer, tmp_path: Path
) -> None:
    db = own_postgres.create_database("stall")
    state = tmp_path / "state"
    server = ServerProcess(state, "--gpus", "2", "--cpus", "8", "--kill-grace", "1", "--db", db)
    server.start()
    release = tmp_path / "release"
    try:
        token = (state / "token").read_text().strip()
        client = server.client()
        finished = int(server.cli("submit", "--", "echo", "done").stdout)
        assert wait_ended(client, finished, 60)["state"] == "COMPLETED"
        script = f'echo started; while [ ! -e "{release}" ]; do sleep 0.1; done'
        running = int(server.cli("submit", "--", "sh", "-c", script).stdout)
        log = state / "jobs" / str(running) / "output.log"
        wait_for(lambda: log.exists() and "started" in log.read_text(), 60)

        def call(method: str, path: str, **kw: object) -> Answer:
            return request(server.port, token, method, path, timeout_s=15, **kw)  # type: ignore[arg-type]

        key = str(uuid.uuid4())
        submit = {"command": ["echo", "after"], "workdir": str(tmp_path)}
        # A pending job: the queue asks the scheduler for its projected start.
        held = call("POST", "/api/v1/jobs", body={**submit, "hold": True}).json()["id"]

        with stalled(own_postgres.data), ThreadPoolExecutor(1) as aside:
            # What needs the database first: a page of history (asked aside), a job the book
            # does not keep.
            history = aside.submit(call, "GET", "/api/v1/jobs?all=true&limit=200")
            _refused_as_stalled(call("GET", "/api/v1/jobs/999999"), "an unknown job")
            # Those calls are still stuck in their threads; what memory and files hold answers.
            health = call("GET", "/healthz")
            assert health.status == 200 and health.json()["status"] == "ok"
            queue = call("GET", "/api/v1/jobs")
            assert queue.status == 200
            assert {j["id"]: j["state"] for j in queue.json()} == {
                running: "RUNNING", held: "PENDING"
            }
            live = call("GET", f"/api/v1/jobs/{running}")
            assert live.status == 200 and live.json()["state"] == "RUNNING"
            done = call("GET", f"/api/v1/jobs/{finished}")
            assert done.status == 200 and done.json()["state"] == "COMPLETED"
            output = call("GET", f"/api/v1/jobs/{running}/log")
            assert output.status == 200 and output.body == b"started\n"
            for answer in (health, queue, live, done, output):
                assert answer.seconds < READ_BOUND_S, answer
            # A submit waits for its write up to the deadline, then is refused: not acknowledged.
            _refused_as_stalled(
                call("POST", "/api/v1/jobs", body=submit, headers={"Idempotency-Key": key}),
                "a submit",
            )
            # One without a key gets as far as its write, which waits in the store's writer.
            _refused_as_stalled(
                call("POST", "/api/v1/jobs", body={**submit, "name": "unacknowledged"}),
                "a submit's write",
            )
            _refused_as_stalled(history.result(), "history")

        # The database answers again: the server works, the refused submit's retry (same key)
        # is answered its one job, and every acknowledged job is in the database.
        again = call("POST", "/api/v1/jobs", body=submit, headers={"Idempotency-Key": key})
        assert again.status in (200, 201), again
        retried = again.json()["id"]
        new = call("POST", "/api/v1/jobs", body=submit)
        assert new.status == 201, new
        release.touch()
        assert wait_ended(client, running, 60)["state"] == "COMPLETED"
        acknowledged = {finished, running, retried, new.json()["id"]}
        url = own_postgres.admin_url.rsplit("/", 1)[0] + "/stall"
        with psycopg.connect(url) as conn:
            stored = {row[0] for row in conn.execute("SELECT id FROM jobs")}
            keyed = conn.execute(
                "SELECT count(*) FROM jobs WHERE idempotency_key = %s", (key,)
            ).fetchone()
        assert acknowledged <= stored
        assert keyed == (1,), "the refused submit and its retry made more than one job"
        # The write the refused plain submit handed to the store landed once it answered, and
        # its job was queued and ran (never written and forgotten, nor written unscheduled).
        late = wait_for(lambda: client.jobs(all=True, name="unacknowledged"))
        assert len(late) == 1
        assert wait_ended(client, late[0]["id"], 60)["state"] == "COMPLETED"
    finally:
        release.touch()
        server.stop()
        server.kill_jobs()
