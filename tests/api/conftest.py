from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.api.app import create_app
from gpuyard.bootstrap import build_server
from gpuyard.domain.errors import GpuyardError
from gpuyard.settings import Settings


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    """The ASGI app in-process on a real SQLite store, 4 declared GPUs, authorised."""
    settings = Settings(state_dir=tmp_path / "state", gpus="4", cpus=8, kill_grace_s=1)
    server = build_server(settings)
    with TestClient(create_app(server)) as client:
        client.headers["Authorization"] = f"Bearer {server.token}"
        client.workdir = str(tmp_path)  # type: ignore[attr-defined]
        yield client
        for job in server.service.list_jobs(include_finished=False):
            with contextlib.suppress(GpuyardError):  # it may end meanwhile
                server.service.cancel(job.id)  # while the server runs: no job outlives a test
