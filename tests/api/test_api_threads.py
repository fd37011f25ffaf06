"""Requests that wait in a thread (a `show`'s explanation waits for the scheduler's lock, which a
long pass holds) must not hold up the other requests that read in a thread: `asyncio.to_thread`'s
pool was the event loop's default, the CPU count + 4 (6 on a 2-core machine), so six `show`s of
pending jobs during a pass stopped every log read, job list and estimate behind them (a `show`
of 8.3-8.7 s in `bench/mixed_load.py --pending 10000`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.e2e.server import wait_for

# More than the old pool's threads on this machine (min(32, CPUs + 4)), fewer than the new 40.
WAITING_SHOWS = min(32, (os.cpu_count() or 1) + 4) + 2


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, ServerFacade, str]]:
    settings = Settings(state_dir=tmp_path / "state", gpus="1", cpus=4, kill_grace_s=1)
    server, app = build_app(settings)
    auth = {"Authorization": f"Bearer {settings.token_path.read_text().strip()}"}
    with TestClient(app, headers=auth, base_url=settings.url) as client:
        yield client, server, str(tmp_path)
        for job in server.reads.list_jobs(server.auth.principal, include_finished=False):
            server.verbs.cancel(job.id, server.auth.principal)


def test_a_log_is_read_while_many_shows_wait_for_the_scheduler(
    served: tuple[TestClient, ServerFacade, str],
) -> None:
    client, server, workdir = served
    submit = {"command": ["sleep", "600"], "gpus": 1, "workdir": workdir}
    ids = [client.post("/api/v1/jobs", json=submit).json()["id"] for _ in range(2)]
    pending = ids[1]  # the first holds the one GPU
    wait_for(lambda: client.get(f"/api/v1/jobs/{ids[0]}").json()["state"] == "RUNNING")
    with ThreadPoolExecutor(WAITING_SHOWS + 1) as clients:
        with server.scheduler._lock:  # a pass that takes its time
            shows = [clients.submit(client.get, f"/api/v1/jobs/{pending}")
                     for _ in range(WAITING_SHOWS)]  # fmt: skip
            log = clients.submit(client.get, f"/api/v1/jobs/{pending}/log")
            # Answered while every show still waits (the lock is held until it is).
            assert log.result(timeout=60).status_code == 200
            assert not any(show.done() for show in shows)
        assert all(show.result(timeout=60).status_code == 200 for show in shows)
